"""The timeline's lanes: ops on the compute stream, transfers on the copy lanes, the plan's offload and
prefetch markers (draggable), and the bytes each op faulted in."""

from __future__ import annotations

from typing import Any

import numpy as np
from bokeh.layouts import column
from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    CustomJS,
    HoverTool,
    PointDrawTool,
    Range1d,
)
from bokeh.models.annotations import Legend, LegendItem
from bokeh.plotting import figure

from ..plan import Direction, Origin
from ..records.collected import CollectorStatus
from ..records.collected import one_iteration as collected_iteration
from ..session import Session
from ..units import format_bytes, format_ns
from .axis import _BAR, LANES, MEMOP_COLORS, PHASE_COLORS, _Axis, _axis, _byte_unit, _op_columns, _plain_title, _texts
from .measured import _measured
from .memory import _resident


def timeline_figure(session: Session, x_axis: str = "time", editable: bool = False, x_range: Any = None,
                    title: str | None = None) -> Any:
    """A column of linked figures: lanes with markers, fault bytes per op, resident bytes.

    editable: the planned offload/prefetch markers get a PointDrawTool (drag only: it adds nothing),
    and a browser-side callback snaps a dragged marker back onto its lane, and in the op axis onto
    the nearest op boundary, so a drag moves it along x only. The markers' sources carry the
    `tensor_id`, `iteration` and `issue_after` of each marker; `issue_after_at` turns a dragged x
    back into the op it is issued after. x_range: share one (e.g. a comparison's other figure's)."""
    if x_axis not in ("time", "op"):
        raise ValueError(f"x_axis has to be 'time' or 'op', not {x_axis!r}")
    axis = _axis(session, x_axis)
    lanes = figure(height=220, x_axis_label=axis.label, tools="xpan,xwheel_zoom,box_zoom,reset,save",
                   **({"x_range": x_range} if x_range is not None else {}),
                   active_scroll="xwheel_zoom", sizing_mode="stretch_width",
                   y_range=Range1d(start=-0.2, end=3.2),
                   title=_plain_title(title or f"{session.plan.policy} on {session.graph.model}: "
                                               f"{session.timeline.source}"))
    lanes.yaxis.ticker = [v + _BAR / 2 for v in LANES.values()]
    lanes.yaxis.major_label_overrides = {v + _BAR / 2: k for k, v in LANES.items()}
    lanes.ygrid.grid_line_color = None
    ops = lanes.quad(left="left", right="right", bottom=LANES["compute"], top=LANES["compute"] + _BAR,
                     color="color", source=ColumnDataSource(_op_columns(session, axis)), name="ops")
    lanes.add_tools(HoverTool(renderers=[ops], tooltips=[
        ("op", "@name"), ("kind", "@kind"), ("phase", "@phase"), ("duration", "@duration"),
        ("stall", "@stall"), ("faulted in", "@fault")]))
    mem = _memop_columns(session, axis)
    memops = lanes.quad(left="left", right="right", bottom="bottom", top="top", color="color",
                        alpha=0.75, source=ColumnDataSource(mem), name="memops")
    lanes.add_tools(HoverTool(renderers=[memops], tooltips=[
        ("tensor", "@tensor"), ("bytes", "@size"), ("direction", "@direction"), ("mode", "@mode"),
        ("origin", "@origin"), ("duration", "@duration")]))
    planned = mem["origin"] == Origin.PLAN.value
    markers: list[Any] = []
    for direction, marker, kind in ((Direction.TO_HOST, "inverted_triangle", "offload"),
                                    (Direction.TO_DEVICE, "triangle", "prefetch")):
        pick = planned & (mem["direction"] == direction.value)
        lane = LANES["to host" if direction is Direction.TO_HOST else "to device"]
        src = ColumnDataSource({"x": mem["issue"][pick], "y": np.full(int(pick.sum()), lane + _BAR + 0.1),
                                "tensor": mem["tensor"][pick], "size": mem["size"][pick],
                                "tensor_id": mem["tensor_id"][pick], "iteration": mem["iteration"][pick],
                                "issue_after": mem["issue_after"][pick]})
        markers.append(lanes.scatter("x", "y", marker=marker, size=12 if editable else 9, color=MEMOP_COLORS[kind],
                                     source=src, name=f"{kind}_markers"))
    lanes.add_tools(HoverTool(renderers=markers, tooltips=[("planned", "$name"), ("tensor", "@tensor"),
                                                           ("bytes", "@size"), ("issued after op", "@issue_after")]))
    if editable:
        draw = PointDrawTool(renderers=markers, add=False, drag=True, description="drag a marker along the op axis")
        lanes.add_tools(draw)
        lanes.toolbar.active_drag = draw
        for m, lane in zip(markers, (LANES["to host"], LANES["to device"])):
            m.data_source.js_on_change("data", CustomJS(
                args={"src": m.data_source, "snap": x_axis == "op", "y0": lane + _BAR + 0.1}, code=_SNAP_JS))
    lanes.add_layout(_legend(ops, memops, markers), "above")
    return column(lanes, _faults(session, axis, lanes), _resident(session, axis, lanes),
                  *_measured(session, axis, lanes), sizing_mode="stretch_width")


# Keep a dragged marker on its lane (y never changes) and, on the op axis, on an op boundary.
# Writing only when something moved keeps the change event from firing again for nothing.
_SNAP_JS = """
const d = src.data; const n = d.x.length; if (n == 0) { return; }
let changed = false;
const x = Array.from(d.x); const y = Array.from(d.y);
for (let i = 0; i < n; i++) {
  if (y[i] != y0) { y[i] = y0; changed = true; }
  if (snap && Math.round(x[i]) != x[i]) { x[i] = Math.round(x[i]); changed = true; }
}
if (changed) { src.data = Object.assign({}, d, {x: x, y: y}); }
"""


def issue_after_at(session: Session, x: float, x_axis: str, iteration: int = 0) -> int:
    """The op a marker dragged to `x` is issued after (-1: the start of the iteration), in the
    iteration it belongs to: the nearest op boundary, on either axis."""
    axis = _axis(session, x_axis)
    position = float(x) if x_axis == "op" else float(np.interp(float(x) * 1e6, axis.knots_ns,
                                                               axis.knots_x))
    return int(round(position)) - 1 - iteration * len(session.graph.ops)


def iteration_view(session: Session, iteration: int) -> Session:
    """One recorded iteration of a session as a session of its own (iteration 0, times from its start),
    so a long measured session can be drawn an iteration at a time."""
    from dataclasses import replace

    from ..records.spans import one_iteration

    timeline, origin, end = one_iteration(session.timeline, iteration)
    collected = None if session.collected is None else collected_iteration(session.collected, iteration, origin, end)
    tl = session.timeline
    if collected is not None and tl.counted and iteration < tl.timed_iterations and collected.available("um"):
        # a timed iteration ran without the unified-memory counters: its lane would read as no migration
        first, last = tl.timed_iterations + 1, tl.iterations
        which = f"iteration {first}" if first == last else f"iterations {first} to {last}"
        why = (f"CUPTI counted unified memory in {which} only, after the timed ones, because counting slows "
               f"paging: choose {which} to see its migrations and faults per op")
        collected = replace(collected, status=(*collected.status, CollectorStatus("cupti_um", False, why, 0, 0)))
    return replace(session, timeline=timeline, collected=collected)


def comparison_figure(a: Session, b: Session, titles: tuple[str, str] = ("A", "B")) -> Any:
    """Two sessions one above the other on the op axis (aligned by op index), x ranges linked."""
    top = timeline_figure(a, "op", title=f"{titles[0]}: {a.plan.policy} on {a.graph.model}, {a.timeline.source}")
    lanes = top.children[0]
    bottom = timeline_figure(b, "op", x_range=lanes.x_range,
                             title=f"{titles[1]}: {b.plan.policy} on {b.graph.model}, {b.timeline.source}")
    return column(top, bottom, sizing_mode="stretch_width")


def _legend(ops: Any, memops: Any, markers: list[Any]) -> Legend:
    """One entry per phase and per kind of transfer, each pointing at a row that has it: one
    renderer per glyph kind keeps the figure fast, so entries are rows, not renderers."""
    items = []
    for renderer, column_name, labels in ((ops, "phase", PHASE_COLORS), (memops, "kind", MEMOP_COLORS)):
        values = list(renderer.data_source.data[column_name])
        items += [LegendItem(label=label, renderers=[renderer], index=values.index(label))
                  for label in labels if label in values]
    items += [LegendItem(label=f"{m.name.split('_')[0]} issued", renderers=[m]) for m in markers]
    return Legend(items=items, orientation="horizontal", click_policy="none", border_line_alpha=0,
                  label_text_font_size="9pt")


def _memop_columns(session: Session, axis: _Axis) -> dict[str, Any]:
    g, p, tl = session.graph, session.plan, session.timeline
    ms = [p.memops[i] for i in tl.memop_index.tolist()]
    to_device = np.array([m.direction is Direction.TO_DEVICE for m in ms], dtype=bool)
    bottom = np.where(to_device, LANES["to device"], LANES["to host"]).astype(np.float64)
    kind = ["forced" if m.origin is Origin.DRIVER else "prefetch" if m.direction is Direction.TO_DEVICE
            else "offload" for m in ms]
    return {"left": axis.x(tl.memop_start_ns), "right": axis.x(tl.memop_end_ns), "bottom": bottom,
            "tensor_id": np.array([m.tensor for m in ms], dtype=np.int64),
            "issue_after": np.array([m.issue_after for m in ms], dtype=np.int64),
            "iteration": tl.memop_iteration.astype(np.int64),
            "top": bottom + _BAR, "issue": _issue_x(session, axis),
            "color": np.array([MEMOP_COLORS[k] for k in kind], dtype=object),
            "kind": np.array(kind, dtype=object),
            "tensor": np.array([g.tensors[m.tensor].name for m in ms], dtype=object),
            "size": np.array([format_bytes(m.nbytes) for m in ms], dtype=object),
            "direction": np.array([m.direction.value for m in ms], dtype=object),
            "mode": np.array([m.mode.value for m in ms], dtype=object),
            "origin": np.array([m.origin.value for m in ms], dtype=object),
            "duration": _texts(format_ns, tl.memop_end_ns - tl.memop_start_ns)}


def _issue_x(session: Session, axis: _Axis) -> np.ndarray:
    """Where each memory operation is issued: at the end of its `issue_after` op in its iteration
    (the start of the iteration for -1). This is the point a person drags, not when the copy began."""
    g, p, tl = session.graph, session.plan, session.timeline
    n = len(g.ops)
    after = np.array([p.memops[i].issue_after for i in tl.memop_index.tolist()], dtype=np.int64)
    if axis.mode == "op":
        return (tl.memop_iteration * n + after + 1).astype(np.float64)
    ends = np.full((max(tl.iterations, int(tl.memop_iteration.max(initial=-1)) + 1), n + 1), np.inf)
    ends[tl.op_iteration, tl.op_index + 1] = tl.op_end_ns
    np.minimum.at(ends[:, 0], tl.op_iteration, tl.op_start_ns)  # column 0: the iteration's start
    issued = ends[tl.memop_iteration, after + 1] if len(after) else np.zeros(0)
    return axis.x(np.where(np.isinf(issued), tl.memop_start_ns, issued))


def _faults(session: Session, axis: _Axis, lanes: Any) -> Any:
    tl = session.timeline
    hit = tl.op_fault_bytes > 0
    cols = _op_columns(session, axis)
    scale, unit = _byte_unit(int(tl.op_fault_bytes.max(initial=0)))
    f = figure(height=110, x_range=lanes.x_range, sizing_mode="stretch_width", tools="",
               y_axis_label=f"faulted ({unit})", toolbar_location=None)
    src = ColumnDataSource({"left": cols["left"][hit], "right": cols["right"][hit],
                            "top": tl.op_fault_bytes[hit] / scale, "name": cols["name"][hit],
                            "fault": cols["fault"][hit]})
    bars = f.quad(left="left", right="right", bottom=0, top="top", color=MEMOP_COLORS["forced"],
                  source=src, name="faults")
    f.add_tools(HoverTool(renderers=[bars], tooltips=[("op", "@name"), ("faulted in", "@fault")]))
    f.xaxis.visible = False
    f.yaxis.ticker = BasicTicker(desired_num_ticks=3)
    return f
