"""The web app's entry point: `vmexplorer serve`, or `panel serve vmexplorer/app.py` (no GPU needed).

Bokeh runs this file as a new module for every browser session and clears that module's globals when the
session ends, before the session-destroyed hooks run and while a GPU run may still be followed. So the
page is built by the package's own modules (`vmexplorer.ui`), imported once per server, which keep what
must outlive a session: the spare page, the GPU's run queue. Importing this module builds nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import panel as pn

# Panel links Bokeh's MathJax bundle (the largest file of the page) into every page holding a Markdown or
# HTML pane, math or not (`panel.io.resources.bundle_resources`); no pane here typesets math (what users
# type is escaped, the Markdown has none), so only a Bokeh model asking for math (Bokeh's own check, still
# made) would bring it in. No public setting says so; this is the function Panel asks.
pn.io.resources._panel_use_mathjax = lambda roots: False

if __package__ in (None, ""):
    # `panel serve vmexplorer/app.py` runs this file as a script from a checkout that may not be
    # installed: make the package importable from the repository it sits in
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if __name__.startswith("bokeh"):  # served by `panel serve`
    from vmexplorer.ui.serving import serve_document

    doc = pn.state.curdoc
    assert doc is not None  # Bokeh serves this script into a document
    pn.extension("tabulator")  # the tables come after the first document: their scripts are asked for by name
    serve_document(doc)
