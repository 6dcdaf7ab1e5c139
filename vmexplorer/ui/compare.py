"""The shown session (A) beside another (B): where the time goes for each, their figures side by side,
the typical iteration of each on one time scale, and the time per op of each. The figures are built
once and refilled: an edit of A lands in A's figures with the zoom kept."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import panel as pn
import param

from ..plots import breakdown_figure, update_breakdown
from ..plots.axis import set_type_size
from ..plots.timeline import comparison_figure, update_comparison
from ..session import Session
from ..session.samples import sample_groups
from ..units import format_ns
from . import numbers
from .state import AppState, store_param
from .upload import FileUpload
from .widgets import Text, widget

pd: Any = importlib.import_module("pandas")  # Panel's own dependency (its tables take DataFrames); no stubs
BEFORE_EDITS = "(the shown session as loaded, before edits)"


def _now(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


class Comparison(pn.viewable.Viewer):
    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.pick = widget(pn.widgets.Select, "Compare the shown session (A) with (B)",
                           groups={"the shown session": {BEFORE_EDITS: BEFORE_EDITS}, **sample_groups()})
        self.upload = FileUpload(on_file=lambda data, name: self.act(self.state.compare_with, data, name),
                                 on_refused=self.state.fail)
        self.go = widget(pn.widgets.Button, "Compare", button_type="primary", align="end")
        self.clear = widget(pn.widgets.Button, "Clear", align="end")
        self.fig = pn.pane.Bokeh(sizing_mode="stretch_width")
        self._compared: tuple[Any, ...] = ()  # the (A's loaded session, B) the comparison figure draws
        self.bars_figure = breakdown_figure([])
        # shown and hidden through a Column: Panel copies a Bokeh pane's own `visible` onto the figure and
        # fails on the figure's stylesheets then
        self.bars = pn.Column(pn.pane.Bokeh(self.bars_figure, sizing_mode="stretch_width"), visible=False,
                              sizing_mode="stretch_width")
        self.summary = pn.widgets.Tabulator(disabled=True, show_index=False, sizing_mode="stretch_width",
                                            layout="fit_data_stretch")
        self.deltas = pn.widgets.Tabulator(disabled=True, show_index=False, height=300, sizing_mode="stretch_width",
                                           pagination=None)
        self.note = Text()
        self._large = False
        self.go.on_click(lambda _: self._compare())
        self.clear.on_click(lambda _: self.act(self.state.compare_with, None))

    def _compare(self) -> None:
        if self.pick.value == BEFORE_EDITS:
            self.act(self.state.compare_with, self.state.loaded, "as loaded")
        else:
            self.act(self.state.compare_with, self.pick.value)

    def draw(self) -> None:
        """Show A beside B, or say what to pick when there is no B."""
        a, b = self.state.session, self.state.comparison
        if a is None or b is None:
            self.fig.object = None
            self._compared = ()
            self.bars.visible = False
            self.summary.value = pd.DataFrame()
            self.deltas.value = pd.DataFrame()
            self.note.object = "Pick a session to compare with: the shown one is A."
            return
        self._draw_figures(a, b)
        self.bars.visible = True
        self.summary.value = pd.DataFrame(numbers.summary_delta_rows(self.state))
        rows = numbers.delta_rows(self.state)
        frame = pd.DataFrame([{**r, **{k: _ns(r[k]) for k in ("a_ns", "b_ns", "delta_ns")}} for r in rows])
        frame.columns = [c.replace("_ns", "") for c in frame.columns]
        self.deltas.value = frame
        aligned = "op index" if rows and rows[0]["op"] is not None else "layer (the graphs differ)"
        self.note.object = (f"A: {self.state.origin}. B: {self.state.comparison_origin}. "
                            f"Per op time per iteration (stall + run), aligned by {aligned}.")

    def _draw_figures(self, a: Session, b: Session) -> None:
        titles = ("A", f"B ({self.state.comparison_origin})")
        compared = (self.state.loaded, b)
        if self.fig.object is None:
            self.fig.object = comparison_figure(a, b, titles)
            set_type_size(self.fig.object, self._large)
        else:  # an edit of A with B unchanged keeps the zoom, as the Session tab's figures do
            update_comparison(self.fig.object, a, b, titles, keep_zoom=compared == self._compared)
        self._compared = compared
        update_breakdown(self.bars_figure, numbers.compare_breakdown_rows(self.state))

    def set_large(self, large: bool) -> None:
        self._large = large
        for fig in (self.bars_figure, self.fig.object):
            if fig is not None:
                set_type_size(fig, large)

    def __panel__(self) -> Any:
        return pn.Column(self.note, pn.Row(self.pick, self.go, self.clear),
                         pn.Row(pn.pane.Markdown("or upload B:"), self.upload),
                         self.bars, self.summary, self.fig, self.deltas, sizing_mode="stretch_width")


def _ns(value: Any) -> str:
    return "" if value is None else format_ns(value)
