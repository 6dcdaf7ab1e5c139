"""A session as one HTML page that opens offline: the summary and the timeline, Bokeh's files inline."""

from __future__ import annotations

import os
from typing import Any

from bokeh.layouts import column
from bokeh.resources import Resources

from ..fileio import atomic_write
from ..session import Session
from .lanes import timeline_figure
from .summary import summary_table


def export_html(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    """One HTML file with Bokeh's JavaScript inline, so it opens offline and can be mailed around."""
    atomic_write(path, standalone_html(session), force=force)


def standalone_html(session: Session) -> bytes:
    """`export_html`'s page: the summary and the timeline, all Bokeh needs inline and nothing else."""
    from bokeh.embed import file_html

    p = session.plan
    title = f"vmexplorer: {p.model} batch {p.batch}, {p.policy} ({session.timeline.source})"
    layout = column(summary_table(session), timeline_figure(session), sizing_mode="stretch_width")
    return file_html(layout, _PageResources(frozenset(type(m) for m in layout.references())), title).encode()


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
