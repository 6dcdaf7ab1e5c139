"""Find an op or a tensor by name, layer or kind; see what it did; zoom the timeline to it.

A row clicked in a table shows its details, lights a tensor up and zooms the timeline in to where it
ran (`zoom`, the timeline's). What a tap on the timeline picked (`show`) is shown here too. Rows are
built once per session and iteration.
"""

from __future__ import annotations

import importlib
from typing import Any

import panel as pn
import param

from .. import details
from .state import AppState, store_param
from .widgets import Text, widget

pd: Any = importlib.import_module("pandas")  # Panel's own dependency (its tables take DataFrames); no stubs
_OP_COLUMNS = {"op": "#", "name": "op", "kind": "kind", "phase": "phase", "layer": "layer", "time_ms": "ms",
               "stall_ms": "waited ms", "fault_bytes": "faulted MiB"}
_TENSOR_COLUMNS = {"tensor": "#", "name": "tensor", "kind": "kind", "layer": "layer", "bytes": "MiB",
                   "producer": "made by", "uses": "uses", "offloaded": "offloaded", "evicted": "evicted",
                   "faulted": "faulted"}
_MIB_COLUMNS = ("fault_bytes", "bytes")
ALL_KINDS = "every kind"


def details_text(lines: details.Details) -> str:
    """(label, value) lines as a two-column text table, for a `Text` pane in a fixed-width font."""
    width = max((len(label) for label, _ in lines), default=0)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in lines)


def _frame(rows: list[dict[str, Any]], columns: dict[str, str]) -> Any:
    """Rows as the table shows them: its own column titles, bytes in MiB (numbers, so they sort)."""
    shown = [{title: round(r[key] / 2**20, 2) if key in _MIB_COLUMNS else r[key] for key, title in columns.items()}
             for r in rows]
    return pd.DataFrame(shown, columns=list(columns.values()))


def _nowhere(span_ms: tuple[float, float]) -> None:
    """Zoom nowhere: a Finder with no timeline beside it."""


class Finder(pn.viewable.Viewer):
    state: AppState = store_param()
    zoom = param.Callable(default=_nowhere, doc="zooms the timeline to (start_ms, end_ms) of the iteration shown")
    selected = param.Tuple(default=None, allow_None=True, length=2,
                           doc="what is shown: ('op', op), ('tensor', tensor) or ('memop', a row of memop_rows)")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.search = widget(pn.widgets.TextInput, "Find", placeholder="search ops and tensors by name or layer",
                             max_length=details.MAX_QUERY_CHARS, sizing_mode="stretch_width")
        self.kind = widget(pn.widgets.Select, "Kind", options={ALL_KINDS: ""}, value="", width=200)
        table = {"disabled": True, "show_index": False, "selectable": 1, "height": 300, "pagination": None,
                 "sizing_mode": "stretch_width", "layout": "fit_data_stretch"}
        self.ops = pn.widgets.Tabulator(**table)
        self.tensors = pn.widgets.Tabulator(**table)
        self.tabs = pn.Tabs(("Ops", self.ops), ("Tensors", self.tensors), sizing_mode="stretch_width")
        self.count = Text(styles={"font-size": "0.85em"})
        self.details = Text(styles={"white-space": "pre-wrap", "font-family": "monospace", "font-size": "0.85em"},
                            width=460)
        self._rows: tuple[Any, int | None, list[dict[str, Any]], list[dict[str, Any]]] = (None, None, [], [])
        self._shown: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        self._quiet = False  # set while the Finder itself changes a table's selection
        pn.bind(self._filter, self.search.param.value_input, self.kind, watch=True)
        pn.bind(lambda rows: self._on_row(rows, "op"), self.ops.param.selection, watch=True)
        pn.bind(lambda rows: self._on_row(rows, "tensor"), self.tensors.param.selection, watch=True)
        self.draw()

    def draw(self) -> None:
        """New rows for another session or iteration; another model forgets what was selected."""
        s, it = self.state.session, self.state.shown_iteration()
        (was, was_iteration, _, _) = self._rows
        if s is was and it == was_iteration:
            return
        ops: list[dict[str, Any]] = []
        tensors: list[dict[str, Any]] = []
        if s is not None:
            ops, tensors = details.op_rows(s, it), details.tensor_rows(s)
        self._rows = (s, it, ops, tensors)
        self._kinds(ops, tensors)
        if s is not was:  # an edit keeps the graph and the op or tensor picked; a transfer's row is another's
            same_graph = s is not None and was is not None and s.graph.key == was.graph.key
            if not same_graph or (self.selected is not None and self.selected[0] == "memop"):
                self.selected = None
        self._filter()
        self._show()

    def show_picked(self, selected: tuple[str, int] | None) -> None:
        """Show what a tap on the timeline picked."""
        self.selected = selected
        self._show()

    def _kinds(self, ops: list[dict[str, Any]], tensors: list[dict[str, Any]]) -> None:
        """The kinds this session has: passes and op kinds filter the ops, tensor kinds the tensors."""
        options = {ALL_KINDS: ""}
        options.update({f"{p} pass": p for p in dict.fromkeys(r["phase"] for r in ops)})
        options.update({f"op: {k}": k for k in sorted({r["kind"] for r in ops})})
        options.update({f"tensor: {k}": k for k in sorted({r["kind"] for r in tensors})})
        value = self.kind.value if self.kind.value in options.values() else ""
        self.kind.param.update(options=options, value=value)

    def _filter(self, *_: Any) -> None:
        """Show the rows that match the search and the kind (which applies to the table that has it)."""
        ops, tensors = self._rows[2:]
        text, kind = self.search.value_input or "", self.kind.value or ""
        op_kind = kind if any(kind in (r["kind"], r["phase"]) for r in ops) else ""
        tensor_kind = kind if any(kind == r["kind"] for r in tensors) else ""
        self._shown = (details.filter_rows(ops, text, op_kind), details.filter_rows(tensors, text, tensor_kind))
        self._quiet = True
        try:
            self.ops.param.update(value=_frame(self._shown[0], _OP_COLUMNS), selection=[])
            self.tensors.param.update(value=_frame(self._shown[1], _TENSOR_COLUMNS), selection=[])
        finally:
            self._quiet = False
        self.count.object = f"{len(self._shown[0])} of {len(ops)} ops, {len(self._shown[1])} of {len(tensors)} tensors"

    def _on_row(self, rows_picked: list[int], what: str) -> None:
        """A row clicked: show its details, light a tensor up, and zoom in to where it ran (a tensor: from
        its first use to its last)."""
        rows, s = self._shown[0 if what == "op" else 1], self.state.session
        if self._quiet or not rows_picked or rows_picked[0] >= len(rows) or s is None:
            return
        key = int(rows[rows_picked[0]][what])
        span = details.op_span_ms if what == "op" else details.tensor_span_ms
        try:
            window: tuple[float, float] | None = details.zoom_window(span(s, key, self.state.shown_iteration()))
        except ValueError:  # a tensor no op uses, or an iteration the session lacks: nothing to zoom to
            window = None
        self.selected = (what, key)
        if what == "tensor":
            self.state.picked = key
        self._show()
        if window is not None:
            self.zoom(window)

    def _show(self) -> None:
        """The details of what is selected, and its row highlighted where the table shows it."""
        s, it = self.state.session, self.state.shown_iteration()
        what, key = self.selected if self.selected is not None else ("", -1)
        lines: details.Details = []
        try:
            if s is not None and what == "op":
                lines = details.op_details(s, key, it)
            elif s is not None and what == "tensor":
                lines = details.tensor_details(s, key)
            elif s is not None and what == "memop":
                lines = details.memop_details(s, key)
        except ValueError as e:  # an index from elsewhere that this session does not have
            lines = [("not found", str(e))]
        self.details.object = details_text(lines)
        self._quiet = True
        try:
            for table, rows, name in ((self.ops, self._shown[0], "op"), (self.tensors, self._shown[1], "tensor")):
                table.selection = [i for i, r in enumerate(rows) if what == name and r[name] == key][:1]
        finally:
            self._quiet = False

    def __panel__(self) -> Any:
        finder = pn.Column(pn.Row(self.search, self.kind), self.count, self.tabs, sizing_mode="stretch_width")
        return pn.Row(finder, self.details, sizing_mode="stretch_width")
