"""The app's story panels, as Panel components over one `AppState`: the headline, where the time goes
beside the baselines, and the paging cliff. Each builds its Bokeh figure once and, when the state
shows another session, puts the new numbers into the figure's data sources, so a browser keeps one
set of models and a person's zoom.
"""

from __future__ import annotations

from html import escape
from typing import Any

import panel as pn
import param

from .appstate import AppState, times_than
from .records.breakdown import PARTS as BREAKDOWN_PARTS
from .timeline import breakdown_figure, sweep_figure, update_breakdown, update_sweep
from .units import format_ns


class Text(pn.pane.HTML):
    """A pane whose `object` is text, shown as it is. What the page says holds names from session files,
    file names and what people type, and Markdown or HTML panes would render them: `<img onerror=...>`
    in an op name would run, `**x**` turn bold, `$x$` become math. Here every character stays one (the
    HTML pane's math is off by default)."""

    def _transform_object(self, obj: Any) -> dict[str, Any]:
        result: dict[str, Any] = super()._transform_object(escape("" if obj is None else str(obj)))
        return result


def headline(state: AppState) -> str:
    """One sentence a class reads first: the iteration time, against device, and where it went."""
    s = state.session
    if s is None:
        return ""
    split = s.time_split()
    rows = {r["label"].split(",")[0]: r for r in state.breakdown_rows()}
    device = rows.get("device")
    against = "" if device is None else \
        f", {times_than(split.iteration_ns, int(device['iteration_ms'] * 1e6), 'device')}"
    parts = sorted(((getattr(split, key), label) for key, label in BREAKDOWN_PARTS[1:]), reverse=True)
    most = f"; {format_ns(parts[0][0])} of it {parts[0][1]}" if parts and parts[0][0] > 0 else ""
    p = s.plan
    return (f"{p.model} batch {p.batch}, {p.policy}: {format_ns(split.iteration_ns)} per iteration "
            f"({s.timeline.source}){against}{most}")


class WhereTimeGoes(pn.viewable.Viewer):
    """The headline and the stacked bars of this session and its baselines."""

    state = param.ClassSelector(class_=AppState)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not isinstance(self.state, AppState):
            raise TypeError("a story panel needs the page's AppState")
        self.app: AppState = self.state
        self.headline = Text(headline(self.app), styles={"font-size": "1.3em", "font-weight": "bold"},
                             sizing_mode="stretch_width")
        self.figure = breakdown_figure(self.app.breakdown_rows())
        self._pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")
        self.app.param.watch(self._update, "session")

    def _update(self, *_: Any) -> None:
        self.headline.object = headline(self.app)
        update_breakdown(self.figure, self.app.breakdown_rows())

    def __panel__(self) -> Any:
        return pn.Column(self.headline, self._pane, sizing_mode="stretch_width")


class PagingCliff(pn.viewable.Viewer):
    """Iteration time against capacity for every policy; tapping a point opens that configuration."""

    state = param.ClassSelector(class_=AppState)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not isinstance(self.state, AppState):
            raise TypeError("a story panel needs the page's AppState")
        self.app: AppState = self.state
        self.figure = sweep_figure(self.app.capacity_sweep())
        self.points = self.figure.select_one({"name": "sweep_points"})
        self.points.selected.on_change("indices", self._on_tap)
        self._pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")
        self.app.param.watch(self._update, "session")

    def _update(self, *_: Any) -> None:
        update_sweep(self.figure, self.app.capacity_sweep())

    def _on_tap(self, _attr: str, _old: Any, new: list[int]) -> None:
        if not new:
            return
        data = self.points.data
        self.points.selected.indices = []
        self.app.open_sweep_point(data["policy"][new[0]], float(data["capacity_pct"][new[0]]))

    def __panel__(self) -> Any:
        return self._pane
