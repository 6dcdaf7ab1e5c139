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

from bokeh.layouts import column
from bokeh.resources import Resources

from ..fileio import atomic_write
from ..session import Session
from .summary import summary_table
from .timeline import timeline_figure


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
    layout = column(summary_table(session), *story, timeline_figure(session), sizing_mode="stretch_width")
    page = Document()
    with patch_curdoc(page):
        html: str = file_html(layout, _PageResources(frozenset(type(m) for m in layout.references())), title)
    return html.encode()


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
