"""Edit the plan without the mouse: move a tensor's offload or prefetch marker to an op, undo every edit, switch
a tensor between keep, move and recompute in the table of tensors (its `choice` cell), or add or drop its round
trip. Every edit goes through `AppState.drag`, `choose` or `toggle_offload`, re-planned as `manual` and
re-simulated as a drag on the timeline is; a tensor picked in the table is lit up."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import panel as pn
import param

from . import edits, numbers
from .state import AppState, store_param
from .widgets import Text, widget

pd: Any = importlib.import_module("pandas")  # Panel's own dependency (its tables take DataFrames); no stubs


# the tensor table's columns (`numbers.tensor_rows`): none is edited in place but the choice
TABLE_COLUMNS = ("id", "tensor", "kind", "bytes", "choices", "offloaded", "offload after", "prefetch after")


def _now(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


class Editor(pn.viewable.Viewer):
    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.marker_kind = widget(pn.widgets.Select, "Marker", options=["prefetch", "offload"], width=110)
        self.marker_tensor = widget(pn.widgets.Select, "Tensor", options={}, width=220)
        self.marker_op = widget(pn.widgets.IntInput, "Issue after op", start=-1, width=120)
        self.marker_range = Text(styles={"font-size": "0.85em"})
        self.move = widget(pn.widgets.Button, "Move marker", button_type="primary", align="end")
        self.reset = widget(pn.widgets.Button, "Undo all edits", align="end")
        # only the choice is edited in place, from the three there are; a choice a tensor does not have is
        # refused with the reason (its `choices` cell says which it has): Tabulator's editors are per column
        self.tensors = pn.widgets.Tabulator(show_index=False, selectable=1, height=300, sizing_mode="stretch_width",
                                            pagination=None, editors={**dict.fromkeys(TABLE_COLUMNS),
                                                                      "choice": {"type": "list",
                                                                                 "values": list(edits.CHOICES)}})
        self.toggle = widget(pn.widgets.Button, "Add / remove the selected tensor's offload")
        self._tensor_rows: list[dict[str, Any]] = []  # what the tensor table shows
        self.move.on_click(lambda _: self._move())
        self.reset.on_click(lambda _: self.act(self.state.reset_edits))
        self.toggle.on_click(lambda _: self._toggle())
        self.tensors.on_edit(self._choose)
        pn.bind(self._draw_range, self.marker_kind, self.marker_tensor, watch=True)
        pn.bind(self._pick, self.tensors.param.selection, watch=True)

    def _move(self) -> None:
        if self.marker_tensor.value is None:
            self.state.fail("pick a tensor with a planned round trip (the tensor table adds one)")
            return
        self.act(self.state.drag, self.marker_kind.value, self.marker_tensor.value, self.marker_op.value)

    def _toggle(self) -> None:
        tensor = self._selected()
        if tensor is None:
            self.state.fail("select a tensor in the table first")
            return
        self.act(self.state.toggle_offload, tensor)

    def _choose(self, event: Any) -> None:
        """A choice cell edited: the tensor switched through the store; the table then shows the store's plan
        again, so a refused choice goes back to what the plan does."""
        frame = self.tensors.value
        if event.column == "choice" and frame is not None and 0 <= event.row < len(frame):
            self.act(self.state.choose, int(frame["id"].iloc[event.row]), str(event.value))
        self._tensor_rows = []
        self.draw()

    def _pick(self, _rows: list[int]) -> None:
        tensor = self._selected()
        if tensor is not None:
            self.state.picked = tensor

    def _selected(self) -> int | None:
        """The tensor picked in the tensor table, if a row is picked."""
        rows, frame = self.tensors.selection, self.tensors.value
        if not rows or frame is None or "id" not in frame or rows[0] >= len(frame):
            return None
        return int(frame["id"].iloc[rows[0]])

    def draw(self) -> None:
        """The shown session's tensors and round trips."""
        s = self.state.session
        if s is None:
            return
        rows = numbers.tensor_rows(s, list(self.state.moves), list(self.state.recomputes))
        if rows != self._tensor_rows:  # an edit often moves no tensor in or out of the table's columns
            self._tensor_rows = rows
            self.tensors.value = pd.DataFrame(rows)
        g = s.graph
        moving = sorted({mv.tensor for mv in self.state.moves})
        self.marker_tensor.options = {f"{g.tensors[t].name} ({t})": t for t in moving}
        if self.marker_tensor.value not in moving:
            self.marker_tensor.value = moving[0] if moving else None
        self._draw_range()

    def _draw_range(self, *_: Any) -> None:
        t = self.marker_tensor.value
        if t is None or self.state.session is None:
            self.marker_range.object = ""
            return
        kind = self.marker_kind.value
        mv = next((mv for mv in self.state.moves if mv.tensor == t), None)
        now = None if mv is None else mv.offload_after if kind == "offload" else mv.prefetch_after
        if now is None:
            self.marker_range.object = "this tensor is never prefetched"
            return
        lo, hi = self.state.marker_range(kind, t)
        self.marker_op.value = now
        self.marker_range.object = f"now after op {now}; it may go from {lo} to {hi}"

    def __panel__(self) -> Any:
        return pn.Column(
            pn.pane.Markdown("Drag a ▼ offload or ▲ prefetch marker along the x axis (the drag tool is "
                             "active), or move one here; or switch a tensor's *choice* in the table (keep, move, "
                             "recompute). Each edit re-plans as a `manual` plan and re-simulates."),
            pn.Row(self.marker_kind, self.marker_tensor, self.marker_op, self.move, self.reset),
            self.marker_range, self.tensors, self.toggle, sizing_mode="stretch_width")
