"""A session as one HTML page that opens with no server and no network: its summary, the story the app
adds (the headline, where the time goes, the paging cliff) and its timeline, with Bokeh's JavaScript
inline, so it can be mailed around and opened from a file.

The page is always made of new models in a new document, never of a live page's: Bokeh's embedding
reads the current document (`curdoc()`), which inside a server is whichever session last set it and may
be one whose tab has closed; the page's own document is set as the current one while it is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from bokeh.layouts import column
from bokeh.models import ColumnDataSource
from bokeh.resources import Resources

from ..fileio import atomic_write
from ..session import Session
from ..session.iterations import typical_iteration
from .summary import summary_table
from .timeline import aligned_timelines, timeline_figure


def export_html(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    """Write `standalone_html` of the session to `path` (refusing to replace a file unless `force`)."""
    atomic_write(path, standalone_html(session), force=force)


def standalone_html(session: Session, story: Sequence[Any] = ()) -> bytes:
    """The page: the summary, the `story` (new Bokeh models the app adds) and the timeline, and all Bokeh
    needs inline, nothing else."""
    from bokeh.document import Document
    from bokeh.embed import file_html
    from bokeh.io.doc import patch_curdoc

    p = session.plan
    title = f"vmexplorer: {p.model} batch {p.batch}, {p.policy} ({session.timeline.source})"
    drawn, heading = drawn_part(session)
    layout = column(summary_table(session), *story, timeline_figure(drawn, title=heading), sizing_mode="stretch_width")
    models = layout.references()
    _texts_as_unicode(models)
    page = Document()
    with patch_curdoc(page):
        html: str = file_html(layout, _PageResources(frozenset(type(m) for m in models)), title)
    return html.encode()


def compare_html(sessions: Sequence[Session], titles: Sequence[str], path: str | os.PathLike[str],
                 force: bool = False) -> None:
    """Write one page of `sessions` (`vmexplorer compare --html`): each one's summary, then their typical
    iterations one above the other on one time scale, panned and zoomed together."""
    from bokeh.document import Document
    from bokeh.embed import file_html
    from bokeh.io.doc import patch_curdoc

    layout = column(*(summary_table(s) for s in sessions), aligned_timelines(sessions, titles),
                    sizing_mode="stretch_width")
    models = layout.references()
    _texts_as_unicode(models)
    page = Document()
    with patch_curdoc(page):
        html: str = file_html(layout, _PageResources(frozenset(type(m) for m in models)),
                              f"vmexplorer: {len(sessions)} sessions compared")
    atomic_write(path, html.encode(), force=force)


def _texts_as_unicode(models: Any) -> None:
    """Each column of texts of the page's data sources as a numpy unicode array: Bokeh encodes an array
    of objects value by value, half the time a page of 50,000 rows took, and a unicode array as one list,
    the same JSON. (The page's models are its own: a live page's sources keep their columns.)"""
    for model in models:
        if isinstance(model, ColumnDataSource):
            texts = {}
            for name, column in model.data.items():
                if isinstance(column, np.ndarray) and column.dtype == object and column.size:
                    values = column.tolist()
                    if set(map(type, values)) == {str}:
                        texts[name] = np.array(values, dtype=str)
            model.data.update(texts)


# The most op and memory-operation rows a page draws. A session may hold a million (a thousand iterations,
# or ResNet-152's every transfer ninety times over): drawn whole, its page took minutes and gigabytes to
# write and would not open in a browser. Beyond this the page draws the typical iteration, which holds
# the graph's ops and at most `MAX_MEMOPS` transfers, and says so; the summary is the whole session's.
MAX_DRAWN_ROWS = 50_000


def drawn_part(session: Session) -> tuple[Session, str | None]:
    """What a page draws of `session`, with the title that says what it is: the whole session (and
    None: the timeline's own title), or, when it has more than `MAX_DRAWN_ROWS` rows, its typical
    iteration."""
    tl = session.timeline
    rows = len(tl.op_index) + len(tl.memop_index)
    if rows <= MAX_DRAWN_ROWS or tl.iterations == 1:
        return session, None
    k = tl.typical_iteration()
    return typical_iteration(session), (
        f"{session.plan.policy} on {session.graph.model}: {tl.source}, its typical iteration ({k + 1} of "
        f"{tl.iterations}): the {tl.iterations} hold {rows:,} op and transfer rows, more than a page draws "
        "(`vmexplorer export --chrome-trace` writes every one)")


class _PageResources(Resources):
    """Bokeh's INLINE resources, less the files of models the page does not hold. Bokeh links the
    `__javascript__` and `__css__` of every model class the process has imported: in the app's server,
    Panel's (its tables' stylesheet on a CDN, scripts under the server's static/) would be linked from a
    page that has to open offline, and fail there."""

    # every bundle, for `file_html` to drop those the page does not use (it removes them by name): the
    # app's server starts its own Resources from fewer (app.py), and an export must not depend on that
    EVERY_COMPONENT: tuple[Any, ...] = ("bokeh", "bokeh-gl", "bokeh-widgets", "bokeh-tables", "bokeh-mathjax")

    def __init__(self, classes: frozenset[type], components: list[Any] | None = None) -> None:
        super().__init__(mode="inline", components=list(self.EVERY_COMPONENT if components is None else components))
        self.classes = classes

    def clone(self, *, components: list[Any] | None = None) -> _PageResources:
        return _PageResources(self.classes, components=list(self.components if components is None else components))

    def _collect_external_resources(self, resource_attr: Any) -> list[str]:
        found: list[str] = []
        for cls in sorted(self.classes, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
            files = getattr(cls, resource_attr, None)
            for f in [files] if isinstance(files, str) else files or []:
                if f not in found:
                    found.append(f)
        return found
