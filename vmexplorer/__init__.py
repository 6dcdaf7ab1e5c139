"""vmexplorer: see, simulate and edit how CNN training pages GPU unified memory.

Graph -> Plan -> (Executor | Simulator) -> Session -> Timeline/App; docs/design.md tells the whole story.
Importing the package imports nothing heavy, so the command line starts fast on a laptop.
"""

__version__ = "0.1.0"
