"""The timeline of a session as Bokeh figures: op lanes, copy-stream lanes, fault bursts, resident bytes.

Every glyph kind is one renderer over one ColumnDataSource of numpy columns, so a session of
thousands of ops draws as fast as one of ten. Renderers carry names ("ops", "memops",
"offload_markers", "prefetch_markers", "faults", "resident") so the app can find and update them.
A measured session with collector records adds what the GPU itself reported ("measured_htod",
"measured_dtoh": CUPTI's migrations per op, with fault groups and kernel time on hover; "nvml_rx",
"nvml_tx": NVML's PCIe throughput), and a note naming any collector that did not run, in their place.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np
from bokeh.layouts import column
from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    CustomJS,
    DataRange1d,
    FactorRange,
    HoverTool,
    PlainText,
    PointDrawTool,
    Range1d,
)
from bokeh.models.annotations import Label, Legend, LegendItem, Span, Title
from bokeh.models.widgets import Div
from bokeh.plotting import figure
from bokeh.resources import Resources

from .fileio import atomic_write
from .plan import Direction, Origin
from .records.breakdown import PARTS as BREAKDOWN_PARTS
from .records.collected import CollectorStatus, migration_shares, per_op
from .records.collected import one_iteration as collected_iteration
from .session import Session
from .units import format_bytes, format_ns

PHASE_COLORS = {"forward": "#4c78a8", "loss": "#b279a2", "backward": "#f58518", "update": "#54a24b"}
MEMOP_COLORS = {"prefetch": "#2ca3a3", "offload": "#8c6d4f", "forced": "#d62728"}
LANES = {"compute": 2, "to device": 1, "to host": 0}  # y of each lane's bottom edge
_BAR = 0.8  # height of a span inside its lane


@dataclass(frozen=True)
class _Axis:
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


def _plain_title(text: str) -> Title:
    """A title shown as written: Bokeh reads $$...$$, \\[...\\] and \\(...\\) in a plain string as TeX,
    and a title names where a session came from (a file's name). Every title is one, so all read alike."""
    return Title(text=PlainText(text=text))


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

    from .records.spans import one_iteration

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


BREAKDOWN_COLORS = ("#4c78a8", "#e45756", "#f58518", "#bab0ac")  # compute, faults, transfers, idle


def breakdown_figure(rows: list[dict[str, Any]]) -> Any:
    """Where the time goes, one stacked bar per row of `AppState.breakdown_rows` (this session first,
    at the top), in ms. Later rows go in through `update_breakdown`, so the figure is built once."""
    keys = [key.replace("_ns", "_ms") for key, _ in BREAKDOWN_PARTS]
    fig = figure(height=60 + 34 * max(len(rows), 3), sizing_mode="stretch_width", toolbar_location=None,
                 y_range=FactorRange(factors=[r["label"] for r in reversed(rows)]), x_range=DataRange1d(start=0),
                 x_axis_label="ms per iteration (the typical one)", title=_plain_title("Where the time goes"), tools="")
    source = ColumnDataSource(_breakdown_columns(rows, keys), name="breakdown")
    fig.hbar_stack(keys, y="label", height=0.7, source=source, color=list(BREAKDOWN_COLORS),
                   legend_label=[label for _, label in BREAKDOWN_PARTS])
    fig.add_tools(HoverTool(tooltips=[("", "@label"), ("iteration", "@iteration_ms{0.0} ms"),
                                      *((label, f"@{key}{{0.0}} ms") for key, (_, label) in
                                        zip(keys, BREAKDOWN_PARTS))]))
    fig.legend.location, fig.legend.orientation = "bottom_right", "vertical"
    fig.legend.click_policy = "hide"
    return fig


def update_breakdown(fig: Any, rows: list[dict[str, Any]]) -> None:
    """Put new rows into a figure from `breakdown_figure`: its data and its categories, not a new figure."""
    keys = [key.replace("_ns", "_ms") for key, _ in BREAKDOWN_PARTS]
    fig.y_range.factors = [r["label"] for r in reversed(rows)]
    fig.select_one({"name": "breakdown"}).data = _breakdown_columns(rows, keys)


def _breakdown_columns(rows: list[dict[str, Any]], keys: list[str]) -> dict[str, list[Any]]:
    return {"label": [r["label"] for r in rows], "iteration_ms": [r["iteration_ms"] for r in rows],
            **{k: [r[k] for r in rows] for k in keys}}


POLICY_COLORS = ("#e45756", "#4c78a8", "#54a24b", "#b279a2", "#9d755d", "#72b7b2")  # by registry order


def sweep_figure(sweep: dict[str, Any]) -> Any:
    """The paging cliff from `AppState.capacity_sweep`: a line per policy (simulated) and the measured
    samples as points on it. Every point is tappable (`sweep_points` selected rows say which), and a
    new sweep goes in through `update_sweep`."""
    fig = figure(height=300, sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset,tap",
                 active_scroll=None, x_axis_label="capacity, % of the footprint",
                 y_axis_label="ms per iteration", title=_plain_title("The paging cliff"))
    lines, points = _sweep_columns(sweep)
    fig.multi_line("xs", "ys", color="color", line_width=2, legend_field="policy",
                   source=ColumnDataSource(lines, name="sweep_lines"))
    dots = fig.scatter("capacity_pct", "iteration_ms", color="color", size="size", marker="marker",
                       source=ColumnDataSource(points, name="sweep_points"))
    fig.add_tools(HoverTool(renderers=[dots], tooltips=[("", "@label"), ("capacity", "@capacity_pct{0}%"),
                                                        ("iteration", "@iteration_ms{0.0} ms")]))
    fig.legend.location = "top_right"
    return fig


def update_sweep(fig: Any, sweep: dict[str, Any]) -> None:
    lines, points = _sweep_columns(sweep)
    fig.select_one({"name": "sweep_lines"}).data = lines
    fig.select_one({"name": "sweep_points"}).data = points


def _sweep_columns(sweep: dict[str, Any]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    color = {line["policy"]: POLICY_COLORS[i % len(POLICY_COLORS)] for i, line in enumerate(sweep["lines"])}
    lines = {"xs": [line["capacity_pct"] for line in sweep["lines"]],
             "ys": [line["iteration_ms"] for line in sweep["lines"]],
             "policy": [f"{line['policy']} (simulated)" for line in sweep["lines"]],
             "color": [color[line["policy"]] for line in sweep["lines"]]}
    points: dict[str, list[Any]] = {k: [] for k in ("policy", "capacity_pct", "iteration_ms", "label", "color",
                                                   "size", "marker", "name")}
    for line in sweep["lines"]:
        for x, y in zip(line["capacity_pct"], line["iteration_ms"]):
            _point(points, line["policy"], x, y, f"{line['policy']}, simulated", color[line["policy"]], 5, "circle", "")
    for m in sweep["measured"]:
        _point(points, m["policy"], m["capacity_pct"], m["iteration_ms"], f"{m['policy']}, measured sample",
               color.get(m["policy"], "#333333"), 11, "diamond", m["name"])
    return lines, points


def _point(points: dict[str, list[Any]], policy: str, x: float, y: float, label: str, color: str, size: int,
           marker: str, name: str) -> None:
    for key, value in (("policy", policy), ("capacity_pct", x), ("iteration_ms", y), ("label", label),
                       ("color", color), ("size", size), ("marker", marker), ("name", name)):
        points[key].append(value)


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


def summary_table(session: Session) -> Div:
    """The figures a person compares, labelled simulated or measured."""
    s: dict[str, Any] = figures(session)
    rows = [(label, value) for _, label, value in summary_items(s)]
    body = "".join(f"<tr><td>{k}</td><td style='text-align:right'>{v}</td></tr>" for k, v in rows)
    p = session.plan
    # names come from session files people share: escape them, a Div renders HTML (and TeX, unless told not to)
    title = escape(f"{p.model} batch {p.batch}, {p.policy}: {s['source']}")
    return Div(text=f"<h3>{title}</h3><p>per iteration, {escape(str(s['source']))}</p><table>{body}</table>",
               name="summary", disable_math=True)


SUMMARY_ROWS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("iteration_ns", "iteration time", format_ns),
    # where the typical iteration's time went (`figures`), in the order the parts stack
    *((key, f"  {label}", format_ns) for key, label in BREAKDOWN_PARTS),
    ("fault_bytes", "demand-faulted in", format_bytes),
    ("bytes_to_host", "moved to host", format_bytes),
    ("bytes_to_device", "moved to device (faults included)", format_bytes),
    ("peak_resident_bytes", "peak resident", format_bytes),
    ("capacity_bytes", "capacity (emulated)", format_bytes),
    ("footprint_bytes", "footprint (no paging)", format_bytes),
    ("iterations", "iterations timed", str),
    ("counted_iterations", "iterations counting unified memory (after the timed ones, slower)", str),
)


def figures(session: Session) -> dict[str, Any]:
    """The session's summary with where its typical iteration's time went, part by part."""
    split = session.time_split()
    return {**session.summary, **{key: getattr(split, key) for key, _ in BREAKDOWN_PARTS}}


def summary_items(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, label, value) of the summary figures a session has; counted iterations only when there are some."""
    return [(key, label, fmt(summary[key])) for key, label, fmt in SUMMARY_ROWS
            if key in summary and not (key == "counted_iterations" and not summary[key])]


def _axis(session: Session, mode: str) -> _Axis:
    tl, n = session.timeline, len(session.graph.ops)
    order = np.argsort(tl.op_start_ns, kind="stable")
    pos = (tl.op_iteration * n + tl.op_index)[order].astype(np.float64)
    knots_ns = np.column_stack([tl.op_start_ns[order], tl.op_end_ns[order]]).ravel().astype(np.float64)
    knots_x = np.column_stack([pos, pos + 1]).ravel()
    return _Axis(mode, np.maximum.accumulate(knots_ns) if knots_ns.size else np.zeros(1),
                 knots_x if knots_x.size else np.zeros(1))


def _op_columns(session: Session, axis: _Axis) -> dict[str, Any]:
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
            "duration": _texts(format_ns, tl.op_end_ns - tl.op_start_ns),
            "stall": _texts(format_ns, tl.op_stall_ns), "fault": _texts(format_bytes, tl.op_fault_bytes)}


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


def _resident(session: Session, axis: _Axis, lanes: Any) -> Any:
    tl, capacity = session.timeline, session.plan.capacity
    top = max(capacity, int(tl.resident_bytes.max(initial=0)))
    scale, unit = _byte_unit(top)
    # a fixed range: the capacity line must show even when the resident bytes stay far below it
    f = figure(height=200, x_range=lanes.x_range, y_range=Range1d(start=0, end=1.08 * top / scale),
               x_axis_label=axis.label, sizing_mode="stretch_width", y_axis_label=f"resident ({unit})",
               tools="xpan,xwheel_zoom,box_zoom,reset")
    src = ColumnDataSource({"x": axis.x(tl.resident_t_ns), "y": tl.resident_bytes / scale})
    f.varea_step(x="x", y1=0, y2="y", step_mode="after", source=src, fill_color="#9ecae1",
                 fill_alpha=0.6, name="resident")
    f.step(x="x", y="y", mode="after", source=src, color="#3182bd")
    f.add_layout(Span(location=capacity / scale, dimension="width", line_color="#d62728",
                      line_dash="dashed", line_width=2, name="capacity"))
    f.add_layout(Label(x=6, x_units="screen", y=capacity / scale, text="capacity", text_color="#d62728",
                       text_font_size="9pt", y_offset=3))
    return f


def _measured(session: Session, axis: _Axis, lanes: Any) -> list[Any]:
    """What the collectors recorded, below the modelled lanes; a note in place of a lane whose
    collector did not run (an empty lane would read as "nothing happened")."""
    c = session.collected
    if session.timeline.source != "measured":
        return []
    if c is None:
        return [Div(text="<i>Recorded without collectors: no CUPTI or NVML lanes.</i>", name="collector_notes",
                    disable_math=True)]
    out: list[Any] = []
    # a status's name and reason come from the file: escaped, and no TeX (a Div renders both)
    missing = [f"<b>{escape(COLLECTOR_LABELS.get(st.name, st.name))}</b>: {escape(st.reason)}"
               for st in c.status if not st.available]
    if missing:
        out.append(Div(text="<i>Not recorded here</i> " + "; ".join(missing), name="collector_notes",
                       disable_math=True))
    if c.available("um"):
        out.append(_migrations(session, axis, lanes))
    if c.available("nvml") and len(c.nvml_t_ns):
        out.append(_pcie(session, axis, lanes))
    return out


# what a collector status names, in words for the page (the names are the session file's)
COLLECTOR_LABELS = {"cupti": "CUPTI", "cupti_um": "CUPTI's migration counters",
                    "cupti_faults": "CUPTI's page-fault records", "cupti_kernels": "CUPTI's kernel records",
                    "cupti_memcpy": "CUPTI's memory-copy records", "nvml": "NVML", "nvtx": "NVTX"}


def _coverage(session: Session) -> str:
    """How much of what the run moved CUPTI's records account for, so a lane short of records never
    reads as fewer bytes moved."""
    assert session.collected is not None
    shares = migration_shares(session.plan, session.timeline, session.collected)
    if not shares:
        return ""
    if all(v >= 0.99 for v in shares.values()):
        return ": every byte the run moved"
    parts = [f"{100 * shares[k]:.0f}% {way}" for k, way in (("htod_share", "in"), ("dtoh_share", "out"))
             if k in shares]
    return (f": only {' and '.join(parts)} of the bytes moved (CUPTI silently loses records of pages coming back "
            "to the GPU, and of the faults that brought them: its fault counts are a lower bound)")


def _migrations(session: Session, axis: _Axis, lanes: Any) -> Any:
    """CUPTI's bytes each way per op, each transfer shared among the ops it ran under: to the device
    up, to the host down."""
    tl, c = session.timeline, session.collected
    assert c is not None
    f = per_op(session.graph, tl, c)
    cols = _op_columns(session, axis)
    htod, dtoh = f["window_bytes_htod"], f["window_bytes_dtoh"]
    scale, unit = _byte_unit(int(max(htod.max(initial=0), dtoh.max(initial=0))))
    title = "CUPTI's migrations per op, to device up, to host down" + _coverage(session)
    fig = figure(height=140, x_range=lanes.x_range, sizing_mode="stretch_width", tools="", toolbar_location=None,
                 y_axis_label=f"CUPTI ({unit})", title=_plain_title(title))
    def shown(table: str, texts: Any) -> Any:  # a column, or "not recorded" where its collector was off
        return texts() if c.available(table) else np.full(len(htod), "not recorded", dtype=object)

    base = {"left": cols["left"], "right": cols["right"], "name": cols["name"],
            "htod": _texts(format_bytes, np.rint(htod).astype(np.int64)),
            "dtoh": _texts(format_bytes, np.rint(dtoh).astype(np.int64)),
            "groups": shown("faults", lambda: f["fault_groups"].astype(str)),
            "pages": shown("faults", lambda: f["faulted_pages"].astype(str)),
            "kernels": shown("kernel", lambda: _texts(format_ns, f["kernel_ns"]))}
    tips = [("op", "@name"), ("to device", "@htod"), ("to host", "@dtoh"), ("fault groups", "@groups"),
            ("faulted pages", "@pages"), ("kernel time", "@kernels")]
    renderers: list[Any] = []
    for name, top, bottom, color in (("measured_htod", htod / scale, 0 * htod, MEMOP_COLORS["prefetch"]),
                                     ("measured_dtoh", 0 * dtoh, -dtoh / scale, MEMOP_COLORS["offload"])):
        keep = top > bottom
        renderers.append(fig.quad(left="left", right="right", bottom="bottom", top="top", color=color, name=name,
                                  source=ColumnDataSource({**{k: v[keep] for k, v in base.items()},
                                                           "top": top[keep], "bottom": bottom[keep]})))
    fig.add_tools(HoverTool(renderers=renderers, tooltips=tips))
    fig.xaxis.visible = False
    fig.yaxis.ticker = BasicTicker(desired_num_ticks=3)
    return fig


def _pcie(session: Session, axis: _Axis, lanes: Any) -> Any:
    c = session.collected
    assert c is not None
    x = axis.x(c.nvml_t_ns)
    fig = figure(height=120, x_range=lanes.x_range, sizing_mode="stretch_width", tools="", toolbar_location=None,
                 y_axis_label="PCIe (GB/s)", title=_plain_title("PCIe throughput (NVML samples)"))
    for name, values, color, label in (("nvml_rx", c.nvml_pcie_rx_bytes_per_s, MEMOP_COLORS["prefetch"], "to device"),
                                       ("nvml_tx", c.nvml_pcie_tx_bytes_per_s, MEMOP_COLORS["offload"], "to host")):
        fig.step(x=x, y=np.asarray(values, dtype=np.float64) / 1e9, mode="after", color=color, name=name,
                 legend_label=label)
    fig.legend.location = "top_left"
    fig.legend.label_text_font_size = "8pt"
    fig.xaxis.visible = False
    fig.yaxis.ticker = BasicTicker(desired_num_ticks=3)
    return fig


def _byte_unit(n: int) -> tuple[float, str]:
    return (2**30, "GiB") if n >= 2**30 else (2**20, "MiB")


def _texts(fmt: Any, values: np.ndarray) -> np.ndarray:
    return np.array([fmt(v) for v in values.tolist()], dtype=object)


def export_html(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    """One HTML file with Bokeh's JavaScript inline, so it opens offline and can be mailed around."""
    atomic_write(path, standalone_html(session), force=force)


def standalone_html(session: Session) -> bytes:
    """`export_html`'s page: the summary and the timeline, all Bokeh needs inline and nothing else."""
    from bokeh.embed import file_html
    from bokeh.layouts import column

    p = session.plan
    title = f"vmexplorer: {p.model} batch {p.batch}, {p.policy} ({session.timeline.source})"
    layout = column(summary_table(session), timeline_figure(session), sizing_mode="stretch_width")
    return file_html(layout, _PageResources(frozenset(type(m) for m in layout.references())), title).encode()


class _PageResources(Resources):
    """Bokeh's INLINE resources, less the files of models the page does not hold. Bokeh links the
    `__javascript__` and `__css__` of every model class the process has imported: in the app's server,
    Panel's (its tables' stylesheet on a CDN, scripts under the server's static/) would be linked from a
    page that has to open offline, and fail there."""

    def __init__(self, classes: frozenset[type], **kwargs: Any) -> None:
        super().__init__(mode="inline", **kwargs)
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
