"""The web app's panels, as Panel Viewers over one store.

- `state.py`: the store (`AppState`), every decision the page shows, as typed parameters; pure methods,
  tested without widgets. `numbers.py`: the figures beside the shown session, from one cost model.
  `edits.py`: where a marker may go. `lesson.py`: the lesson's steps and words, pure functions over the
  store. `link.py`: what a link holds and opens.
- one module per panel, each owning its figures and their data sources: `story.py` (the headline, where
  the time goes), `timeline.py`, `cliff.py`, `finder.py`, `compare.py`, `configure.py`, `editor.py`,
  `files.py` (open, save, export), `gpu.py` (run on the GPU), `banner.py` (the lesson on the page).
- `page.py` lays them out and wires them to the store; `document.py` is the one way they change a served
  document (in its lock); `serving.py` serves the page (`vmexplorer/app.py` is the entry point);
  `widgets.py` holds what every panel draws with.
"""
