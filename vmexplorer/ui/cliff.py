"""The paging cliff: iteration time against capacity for every policy, the measured samples as points and
the bound as a line; tapping a point opens that configuration. A sweep simulates dozens of plans, so
the figure is filled only once its tab is shown (`live`), and follows the session from then on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import panel as pn
import param

from ..plots import sweep_figure, update_sweep
from ..plots.axis import set_type_size
from . import numbers
from .state import AppState, store_param


def _now(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


class PagingCliff(pn.viewable.Viewer):
    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")
    live = param.Boolean(default=False, doc="whether the page shows the cliff, so it follows the session")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        empty = {"lines": [], "measured": [], "bound": {"capacity_pct": [], "iteration_ms": []}}
        self.figure = sweep_figure(numbers.sweep(self.state) if self.live else empty)
        self.points = self.figure.select_one({"name": "sweep_points"})
        self.points.selected.on_change("indices", self._on_tap)
        self.pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")
        self.note = pn.pane.Markdown("Iteration time against capacity, simulated with the shown session's cost "
                                     "model; the diamonds were measured, the dashed line is the bound. Tap a point "
                                     "to open it.")

    def draw(self) -> None:
        if self.live:
            update_sweep(self.figure, numbers.sweep(self.state))

    def set_large(self, large: bool) -> None:
        set_type_size(self.figure, large)

    def _on_tap(self, _attr: str, _old: Any, new: list[int]) -> None:
        if not new:
            return
        data = self.points.data
        self.points.selected.indices = []
        self.act(self.state.open_sweep_point, data["policy"][new[0]], float(data["capacity_pct"][new[0]]))

    def __panel__(self) -> Any:
        return pn.Column(self.note, self.pane, sizing_mode="stretch_width")
