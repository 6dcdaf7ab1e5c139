"""vmexplorer: see, simulate and edit how CNN training pages GPU unified memory.

Graph -> Plan -> (Executor | Simulator) -> Session -> Timeline/App; docs/design.md tells the whole story.
Importing the package imports nothing heavy, so the command line starts fast on a laptop. From Python,
`vmexplorer.api` is the short path through the stages (docs/api.md).
"""

__version__ = "0.1.0"
