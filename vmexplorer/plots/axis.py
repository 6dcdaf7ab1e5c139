"""The timeline's x axis (milliseconds or op positions), its lanes and colours, and the helpers
every figure of it shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from bokeh.models import (
    PlainText,
)
from bokeh.models.annotations import Title

from ..session import Session
from ..units import format_bytes, format_ns

# recompute is forward work done again: forward's hue, lighter and hatched (`PHASE_HATCH`), so that it parts
# from forward in every colour vision, in greyscale and on a washed-out projector, and reads as its kin
PHASE_COLORS = {"forward": "#4c78a8", "loss": "#b279a2", "backward": "#f58518", "update": "#54a24b",
                "recompute": "#9ecae9"}
PHASE_HATCH: dict[str, dict[str, Any]] = {
    "recompute": {"hatch_pattern": "/", "hatch_color": "#2b5a85", "hatch_alpha": 0.9, "hatch_scale": 8.0}}
# what moved bytes, in the words of the legend: the plan's copies, and what the driver did on its own
MEMOP_COLORS = {"prefetch": "#2ca3a3", "offload": "#8c6d4f", "demand fault": "#d62728", "driver eviction": "#9467bd"}
LANES = {"compute": 2, "to device": 1, "to host": 0}  # y of each lane's bottom edge
BAR = 0.8  # height of a span inside its lane


@dataclass(frozen=True)
class Axis:
    """Maps the timeline's ns onto the x axis: milliseconds, or op positions (op i of iteration j
    sits at [j * n_ops + i, +1), and times between are interpolated along the compute stream)."""

    mode: str
    knots_ns: np.ndarray
    knots_x: np.ndarray

    def x(self, t_ns: np.ndarray) -> np.ndarray:
        t = np.asarray(t_ns, dtype=np.float64)
        return t / 1e6 if self.mode == "time" else np.interp(t, self.knots_ns, self.knots_x)

    @property
    def label(self) -> str:
        return "time (ms)" if self.mode == "time" else "op (position in execution order)"


def add_renderer(fig: Any, glyph: Any, source: Any, **renderer: Any) -> Any:
    """`fig`'s renderer of `glyph` over `source`, without the two copies of the glyph (for unselected
    and muted rows) that Bokeh's plotting methods add to every renderer. Nothing here is selected or
    muted (legends hide a lane; a picked tensor is lit through an alpha column), and the copies were a
    third of a timeline's glyph models: built by the server for every page, encoded, and built again by
    the browser before it draws."""
    return fig.add_glyph(source, glyph, **renderer)


def refill(source: Any, data: dict[str, Any]) -> None:
    """Put `data` into `source`, sending the browser only the columns that changed when the rows are the
    same in number and the columns the same (an edit's re-simulation: new times, the same names and
    tooltips, which are most of the bytes), and all of it otherwise. The browser keeps the columns not sent."""
    old = source.data
    rows = {len(v) for v in data.values()}
    if set(old) != set(data) or len(rows) > 1 or any(len(v) not in rows for v in old.values()):
        source.data = data
        return
    changed = {k: v for k, v in data.items() if not _same(old[k], v)}
    if changed:
        source.data.update(changed)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except (TypeError, ValueError):
        return False


def make_axis(session: Session, mode: str) -> Axis:
    tl, n = session.timeline, len(session.graph.ops)
    order = np.argsort(tl.op_start_ns, kind="stable")
    pos = (tl.op_iteration * n + tl.op_index)[order].astype(np.float64)
    knots_ns = np.column_stack([tl.op_start_ns[order], tl.op_end_ns[order]]).ravel().astype(np.float64)
    knots_x = np.column_stack([pos, pos + 1]).ravel()
    return Axis(mode, np.maximum.accumulate(knots_ns) if knots_ns.size else np.zeros(1),
                 knots_x if knots_x.size else np.zeros(1))


def plain_title(text: str, **style: Any) -> Title:
    """A title shown as written: Bokeh reads $$...$$, \\[...\\] and \\(...\\) in a plain string as TeX,
    and a title names where a session came from (a file's name). Every title is one, so all read alike."""
    return Title(text=PlainText(text=text), **style)


def op_columns(session: Session, axis: Axis) -> dict[str, Any]:
    tl, ops = session.timeline, session.graph.ops
    idx = tl.op_index
    n = len(ops)
    if axis.mode == "time":
        left, right = axis.x(tl.op_start_ns), axis.x(tl.op_end_ns)
    else:
        left = (tl.op_iteration * n + idx).astype(np.float64)
        right = left + 1
    phase = np.array([o.phase.value for o in ops], dtype=object)[idx] if n else np.array([], dtype=object)
    return {"left": left, "right": right, "phase": phase,
            "color": np.array([PHASE_COLORS[p] for p in phase], dtype=object),
            "name": np.array([ops[i].name for i in idx.tolist()], dtype=object),
            "kind": np.array([ops[i].kind for i in idx.tolist()], dtype=object),
            "duration": texts(format_ns, tl.op_end_ns - tl.op_start_ns),
            "stall": texts(format_ns, tl.op_stall_ns), "fault": texts(format_bytes, tl.op_fault_bytes)}


def byte_unit(n: int) -> tuple[float, str]:
    return (2**30, "GiB") if n >= 2**30 else (2**20, "MiB")


def texts(fmt: Any, values: np.ndarray) -> np.ndarray:
    return np.array([fmt(v) for v in values.tolist()], dtype=object)


# tick labels, axis labels and titles, legends, in px: Bokeh's 11 px ticks do not read from the back of a room
TYPE = {False: {"tick": "12px", "label": "13px", "legend": "11px"},
        True: {"tick": "17px", "label": "19px", "legend": "16px"}}


def set_type_size(layout: Any, large: bool) -> None:
    """Set the text of every figure in `layout` (a figure, or a layout of them) to the normal size or
    to a projector's."""
    size = TYPE[large]
    for fig in _figures(layout):
        for ax in (*fig.xaxis, *fig.yaxis):
            ax.major_label_text_font_size, ax.axis_label_text_font_size = size["tick"], size["label"]
        if fig.title is not None:
            fig.title.text_font_size = size["label"]
        for part in (*fig.above, *fig.center, *fig.below, *fig.right):
            if type(part).__name__ == "Legend":
                part.label_text_font_size = size["legend"]
            elif type(part).__name__ == "Label":
                part.text_font_size = size["legend"]


def _figures(layout: Any) -> list[Any]:
    if hasattr(layout, "xaxis"):
        return [layout]
    return [f for child in getattr(layout, "children", []) for f in _figures(child)]
