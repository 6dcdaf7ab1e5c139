"""The timeline of a session as Bokeh figures: op lanes, copy-stream lanes, fault bursts, resident bytes,
and under them what the GPU's collectors recorded.

Every glyph kind is one ColumnDataSource of numpy columns, so a session of thousands of ops draws as
fast as one of ten; a renderer per phase or kind of transfer views its rows, so the legend hides each.
The sources are named ("ops", "memops", "offload_markers", "prefetch_markers", "ghost_markers", "faults",
"resident", ...; `timeline_source` finds one) and `update_timeline` refills them with any other session,
on either axis, so the browser keeps its models and a new session arrives as data. The figures share one
x range that the server sets: a new session is shown whole, an edit keeps a person's zoom. A measured
session with collector records adds what the GPU itself reported ("measured_htod", "measured_dtoh":
CUPTI's migrations per op, with fault groups and kernel time on hover; "nvml_rx", "nvml_tx": NVML's PCIe
throughput), and a note naming any collector that did not run; they are hidden for a simulated one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from bokeh.core.properties import field, value
from bokeh.layouts import column
from bokeh.models import (
    BasicTicker,
    CDSView,
    ColumnDataSource,
    CustomJS,
    GroupFilter,
    HoverTool,
    PointDrawTool,
    Quad,
    Range1d,
    Scatter,
)
from bokeh.models.annotations import Label, Legend, LegendItem
from bokeh.plotting import figure

from ..details import memop_what, memop_words
from ..graph import Graph
from ..plan import Direction, Origin, Plan
from ..plan.mechanisms import mechanism_of
from ..session import Session
from ..session.iterations import typical_iteration
from ..units import format_bytes, format_ns
from . import memory
from .axis import (
    BAR,
    LANES,
    MEMOP_COLORS,
    PHASE_COLORS,
    PHASE_HATCH,
    Axis,
    add_renderer,
    byte_unit,
    make_axis,
    op_columns,
    plain_title,
    refill,
    texts,
)
from .measured import measured_figures, update_measured

AXES = ("time", "op")
_PAD = 0.01  # of the drawn span, either side: the first and last ops clear of the frame


def timeline_figure(session: Session, x_axis: str = "time", editable: bool = False, x_range: Any = None,
                    title: str | None = None, before: Plan | None = None) -> Any:
    """A column of linked figures: lanes with markers, fault bytes per op, resident bytes, and the parts
    that show what the collectors recorded (`plots.measured`).

    editable: the planned offload/prefetch markers get a PointDrawTool (drag only: it adds nothing),
    and a browser-side callback keeps a dragged marker on its row and snaps it to the nearest op
    boundary, on either axis, so a drag moves it along x only. The markers' sources carry the
    `tensor_id`, `iteration` and `issue_after` of each marker; `issue_after_at` turns a dragged x
    back into the op it is issued after. x_range: share one (a comparison's other figure's), which the
    caller then sets. before: the plan as it was before edits; a hollow ghost marks where each moved
    marker was. `update_timeline` puts another session into the same figures."""
    _check_axis(x_axis)
    axis = make_axis(session, x_axis)
    lanes = _lanes_figure(axis, x_range if x_range is not None else Range1d(start=0, end=1))
    sources = {name: ColumnDataSource(name=name) for name in _SOURCES}
    ops = _add_ops(lanes, sources["ops"])
    memops = _add_memops(lanes, sources["memops"])
    markers, ghosts = _add_markers(lanes, sources, editable)
    lanes.add_layout(_legend(ops, memops, markers, ghosts), "above")
    layout = column(lanes, _faults(sources["faults"], lanes), memory.resident_figure(session, axis, lanes.x_range),
                    *measured_figures(lanes), sizing_mode="stretch_width")
    _fill(layout, session, axis, title, before, keep_zoom=x_range is not None)
    label_legend(layout, session)
    return layout


def update_timeline(layout: Any, session: Session, x_axis: str, title: str | None = None,
                    before: Plan | None = None, keep_zoom: bool = False, legend: bool = True) -> None:
    """Put `session` into figures `timeline_figure` drew, on `x_axis`, through their data sources: the
    browser keeps its models. `keep_zoom` (an edit of the session shown, on the same axis) keeps the x
    range a person zoomed to; otherwise the new session is shown whole. `legend=False` leaves the legend
    to a later `label_legend`: BokehJS sets a glyph's new data before its colours (awaiting between
    them), and draws a legend entry shown in the same message at once, with the old colours, so an
    entry that comes back with its rows is shown in a message of its own."""
    _check_axis(x_axis)
    axis = make_axis(session, x_axis)
    lanes = _lanes(layout)
    if lanes.tags != [x_axis]:
        lanes.tags, keep_zoom = [x_axis], False
        for fig in (lanes, layout.children[2]):
            fig.xaxis.axis_label = axis.label
    _fill(layout, session, axis, title, before, keep_zoom)
    if legend:
        label_legend(layout, session)
    memory.update_resident(layout.children[2], session, axis)


def _check_axis(x_axis: str) -> None:
    if x_axis not in AXES:
        raise ValueError(f"x_axis has to be 'time' or 'op', not {x_axis!r}")


def _lanes_figure(axis: Axis, x_range: Any) -> Any:
    lanes = figure(height=190, x_axis_label=axis.label, tools="xpan,xwheel_zoom,box_zoom,reset,save", x_range=x_range,
                   # the wheel scrolls the page until a person picks the zoom tool: a lecture hall scrolls
                   active_scroll=None, sizing_mode="stretch_width", y_range=Range1d(start=-0.2, end=3.2),
                   title=plain_title("", text_font_style="normal", text_font_size="10pt"), name="lanes",
                   tags=[axis.mode])
    lanes.yaxis.ticker = [v + BAR / 2 for v in LANES.values()]
    lanes.yaxis.major_label_overrides = {v + BAR / 2: k for k, v in LANES.items()}
    lanes.ygrid.grid_line_color = None
    return lanes


def _add_ops(lanes: Any, source: ColumnDataSource) -> list[Any]:
    """One renderer per phase over the one "ops" source: the legend hides each."""
    ops = [add_renderer(lanes, Quad(left="left", right="right", bottom=LANES["compute"], top=LANES["compute"] + BAR,
                                    fill_color=field("color"), line_color=field("color"), **PHASE_HATCH.get(phase, {})),
                        source, name=f"ops_{phase}", view=_only("phase", phase)) for phase in PHASE_COLORS]
    lanes.add_tools(HoverTool(renderers=ops, tooltips=[
        ("op", "@name"), ("what it does", "@kind, @phase pass"), ("ran for", "@duration"),
        ("waited before it", "@stall"), ("faulted in while it ran", "@fault")]))
    return ops


def _add_memops(lanes: Any, source: ColumnDataSource) -> list[Any]:
    """One renderer per kind of transfer over the one "memops" source."""
    memops = [add_renderer(lanes, Quad(left="left", right="right", bottom="bottom", top="top",
                                       fill_color=field("color"), line_color=field("color"),
                                       fill_alpha=field("alpha"), line_alpha=field("alpha")),
                           source, view=_only("kind", kind), name=f"memops_{kind.replace(' ', '_')}")
              for kind in MEMOP_COLORS]
    lanes.add_tools(HoverTool(renderers=memops, tooltips=[
        ("tensor", "@tensor"), ("bytes", "@size"), ("what", "@what"), ("took", "@duration")]))
    return memops


def _add_markers(lanes: Any, sources: dict[str, ColumnDataSource], editable: bool) -> tuple[list[Any], Any]:
    """The plan's offload and prefetch markers (draggable when `editable`) and the ghosts of edited ones."""
    markers = [add_renderer(lanes, Scatter(x="x", y="y", marker=shape, size=12 if editable else 9,
                                           fill_color=MEMOP_COLORS[kind], line_color=MEMOP_COLORS[kind],
                                           fill_alpha=field("alpha"), line_alpha=field("alpha")),
                            sources[f"{kind}_markers"], name=f"{kind}_marker_glyphs")
               for kind, shape in (("offload", "inverted_triangle"), ("prefetch", "triangle"))]
    ghosts = add_renderer(lanes, Scatter(x="x", y="y", marker=field("marker"), size=12, fill_alpha=0,
                                         line_color=field("color"), line_width=1.5, line_dash="dotted"),
                          sources["ghost_markers"], name="ghost_marker_glyphs")
    lanes.add_tools(HoverTool(renderers=markers, tooltips=[
        ("tensor", "@tensor"), ("bytes", "@size"), ("what", "@what"), ("issued after", "@after")]))
    lanes.add_tools(HoverTool(renderers=[ghosts], tooltips=[("before the edits", "@what")]))
    if editable:
        draw = PointDrawTool(renderers=markers, add=False, drag=True,
                             description="drag a marker along the x axis (it snaps to op boundaries)")
        lanes.add_tools(draw)
        lanes.toolbar.active_drag = draw
        for m in markers:
            m.data_source.js_on_change("data", CustomJS(
                args={"src": m.data_source, "bounds": sources["boundaries"]}, code=_SNAP_JS))
    return markers, ghosts


# the named sources `update_timeline` refills; "boundaries" is drawn by none: the snapping reads it
_SOURCES = ("ops", "memops", "offload_markers", "prefetch_markers", "ghost_markers", "boundaries", "faults")
_MEMOP_ALPHA = 0.75  # a transfer's bar, over the lane's grid
_FADED = 0.12  # everything but a picked tensor


def highlight_tensor(layout: Any, session: Session, x_axis: str, tensor: int | None) -> None:
    """Light up one tensor's transfers and markers (the rest fade) and draw its resident bytes over the
    kinds' in the memory plot; None clears it. `session` is the one the layout shows."""
    # the picked tensor's rows keep their colour and the rest fade: through the data (a patch of one
    # column), which the browser is sent as any edit's data is
    for name, alpha in (("memops", _MEMOP_ALPHA), ("offload_markers", 1.0), ("prefetch_markers", 1.0)):
        src = timeline_source(layout, name)
        ids = np.asarray(src.data.get("tensor_id", []))
        faded = np.where(ids == tensor, alpha, _FADED) if tensor is not None else np.full(len(ids), alpha)
        if len(ids) and not np.array_equal(np.asarray(src.data["alpha"]), faded):
            src.patch({"alpha": [(slice(0, len(ids)), faded.tolist())]})
    memory.highlight_tensor(layout.children[2], session, make_axis(session, x_axis), tensor)


def row_at(layout: Any, x: float, y: float) -> tuple[str, int] | None:
    """What a tap at (x, y) on the lanes of `layout` hit: ("op", row of the "ops" source) or ("memop",
    row of the "memops" source), or None between the lanes."""
    for what, bottom in (("op", LANES["compute"]), ("memop", LANES["to device"]), ("memop", LANES["to host"])):
        if bottom <= y <= bottom + BAR:
            data = timeline_source(layout, "ops" if what == "op" else "memops").data
            left, right = np.asarray(data["left"]), np.asarray(data["right"])
            hit = (left <= x) & (x <= right)
            if what == "memop":
                hit &= np.asarray(data["bottom"]) == bottom
            rows = np.flatnonzero(hit)
            return (what, int(rows[0])) if len(rows) else None
    return None


def timeline_source(layout: Any, name: str) -> ColumnDataSource:
    """The data source of `timeline_figure`'s `layout` named `name` ("ops", "memops",
    "offload_markers", "prefetch_markers", "ghost_markers", "faults", ...): one per glyph kind,
    whatever renderers draw it), or the source of the one renderer named `name` ("resident",
    "measured_htod", ...)."""
    found = _named_sources(layout)
    if name in found:
        return found[name]
    renderers = [r for child in layout.children for r in getattr(child, "renderers", []) if r.name == name]
    if len(renderers) != 1:
        raise KeyError(f"the timeline has {len(renderers)} data sources named {name!r}")
    return renderers[0].data_source


def _named_sources(layout: Any) -> dict[str, ColumnDataSource]:
    """The named sources of the layout's figures, found through their renderers and the snapping's
    arguments: Bokeh's `select` walks every model a layout references, tens of ms each time, and an
    edit looks the sources up several times."""
    out: dict[str, ColumnDataSource] = {}
    for child in layout.children:
        for r in getattr(child, "renderers", []):
            source = getattr(r, "data_source", None)
            if isinstance(source, ColumnDataSource) and source.name:
                out.setdefault(source.name, source)
                for callbacks in source.js_property_callbacks.values():
                    for cb in callbacks:
                        bounds = cb.args.get("bounds") if isinstance(cb, CustomJS) else None
                        if isinstance(bounds, ColumnDataSource) and bounds.name:
                            out.setdefault(bounds.name, bounds)
    return out


def _lanes(layout: Any) -> Any:
    return layout.children[0]


def _fill(layout: Any, session: Session, axis: Axis, title: str | None, before: Plan | None,
          keep_zoom: bool) -> None:
    lanes = _lanes(layout)
    lanes.title.text.text = title or f"{session.plan.policy} on {session.graph.model}: {session.timeline.source}"
    # "boundaries" is in the document only where the snapping reads it (an editable figure)
    found = _named_sources(layout)
    sources = {name: found.get(name, ColumnDataSource()) for name in _SOURCES}
    ops = op_columns(session, axis)
    mem = _memop_columns(session, axis)
    refill(sources["ops"], ops)
    refill(sources["memops"], mem)
    # before the markers: a marker dragged in the browser snaps to the boundaries of the timeline it is on
    refill(sources["boundaries"], {"x": np.unique(np.concatenate([ops["left"], ops["right"]]))})
    for kind, direction in (("offload", Direction.TO_HOST), ("prefetch", Direction.TO_DEVICE)):
        refill(sources[f"{kind}_markers"], _marker_columns(mem, axis, kind, direction))
    ghosts = _ghost_columns(session, axis, before)
    refill(sources["ghost_markers"], ghosts)
    faults, unit = _fault_columns(session, ops)
    refill(sources["faults"], faults)
    figure_of_faults = layout.children[1]
    figure_of_faults.yaxis.axis_label = f"faults ({unit})"
    none = next(a for a in figure_of_faults.center if a.name == "no_faults")
    none.visible = len(faults["left"]) == 0
    update_measured(layout.children[3:6], session, axis)
    _fit_x(lanes.x_range, ops, mem, keep_zoom)


def label_legend(layout: Any, session: Session) -> None:
    """The lanes' legend for what the sources hold: an entry with nothing to show reads as a bug, and is
    left out; the transfers nobody planned are the driver's under uvm, the executor's copies under swap."""
    sources = _named_sources(layout)
    ops, mem = sources["ops"].data, sources["memops"].data
    shown = {*(f"ops_{p}" for p in set(ops.get("phase", ()))),
             *(f"memops_{k.replace(' ', '_')}" for k in set(mem.get("kind", ())))}
    shown |= {f"{kind}_marker_glyphs" for kind in ("offload", "prefetch", "ghost")
              if len(sources[f"{kind}_markers"].data.get("x", ()))}
    words = mechanism_of(session.plan).legend
    for legend in _lanes(layout).above:
        if legend.name == "lanes_legend":
            for item in legend.items:
                name = item.renderers[0].name if item.renderers else ""
                item.visible = name in shown
                if name.startswith("memops_"):
                    kind = name.removeprefix("memops_").replace("_", " ")
                    item.label = value(words.get(kind, kind))


def _fit_x(x_range: Any, ops: dict[str, Any], mem: dict[str, Any], keep_zoom: bool) -> None:
    """Where the reset tool goes back to: the whole session drawn; and there too unless `keep_zoom`."""
    ends = [np.asarray(c[k], dtype=np.float64) for c in (ops, mem) for k in ("left", "right")]
    values = np.concatenate([np.zeros(0), *ends])
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    pad = max(hi - lo, 1e-9) * _PAD
    whole = {"reset_start": lo - pad, "reset_end": hi + pad}
    x_range.update(**whole, **({} if keep_zoom else {"start": lo - pad, "end": hi + pad}))


def _only(column_name: str, value: str) -> CDSView:
    return CDSView(filter=GroupFilter(column_name=column_name, group=value))


# Keep a dragged marker on its row (y never changes) and on the op boundary nearest where it is
# dropped (`bounds`: every op's start and end on the axis drawn, sorted), so what a person sees on
# release is where the plan will issue it. Only markers a person moved are snapped: those away from
# where the server drew them (`x0`, `y0`). New data from the server (an edit's re-simulation) has every
# marker where it was drawn, so it is never written back, and its markers are never snapped to the
# previous timeline's boundaries, which the same update may replace a moment later: written back, the
# server would read them as a drag, draw again, and the two would answer each other for ever. Writing
# only when something moved keeps the change event from firing again for nothing.
_SNAP_JS = """
const d = src.data; const n = d.x.length; if (n == 0) { return; }
const b = bounds.data.x; const m = b.length;
function nearest(v) {
  let lo = 0, hi = m - 1;
  if (m == 0) { return v; }
  while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (b[mid] <= v) { lo = mid; } else { hi = mid; } }
  return Math.abs(b[lo] - v) <= Math.abs(b[hi] - v) ? b[lo] : b[hi];
}
let changed = false;
const x = Array.from(d.x); const y = Array.from(d.y);
for (let i = 0; i < n; i++) {
  if (x[i] == d.x0[i] && y[i] == d.y0[i]) { continue; }
  if (y[i] != d.y0[i]) { y[i] = d.y0[i]; changed = true; }
  const s = nearest(x[i]);
  if (s != x[i]) { x[i] = s; changed = true; }
}
if (changed) { src.data = Object.assign({}, d, {x: x, y: y}); }
"""


def issue_after_at(session: Session, x: float, x_axis: str, iteration: int = 0) -> int:
    """The op a marker dragged to `x` is issued after (-1: the start of the iteration), in the
    iteration it belongs to: the nearest op boundary, on either axis."""
    axis = make_axis(session, x_axis)
    position = float(x) if x_axis == "op" else float(np.interp(float(x) * 1e6, axis.knots_ns,
                                                               axis.knots_x))
    return int(round(position)) - 1 - iteration * len(session.graph.ops)


def comparison_figure(a: Session, b: Session, titles: tuple[str, str] = ("A", "B")) -> Any:
    """Two sessions one above the other on one time scale: the typical iteration of each, from its
    start, so the longer one is visibly longer; panning or zooming one moves both."""
    return aligned_timelines([a, b], titles)


def aligned_timelines(sessions: Sequence[Session], titles: Sequence[str]) -> Any:
    """Sessions one above the other on one time scale, as `comparison_figure` draws two (`vmexplorer
    compare --html` draws any number)."""
    shown = [typical_iteration(s) for s in sessions]
    x_range = Range1d(start=0, end=1)
    figures = [timeline_figure(s, "time", x_range=x_range, title=_compared_title(s, label))
               for s, label in zip(shown, titles)]
    fit_both(x_range, *shown)
    return column(*figures, sizing_mode="stretch_width")


def update_comparison(layout: Any, a: Session, b: Session, titles: tuple[str, str] = ("A", "B"),
                      keep_zoom: bool = False) -> None:
    """Put A and B into a `comparison_figure`: both through their data sources, on one time scale."""
    shown = [typical_iteration(s) for s in (a, b)]
    for part, s, label in zip(layout.children, shown, titles):
        update_timeline(part, s, "time", _compared_title(s, label), keep_zoom=True)
    if not keep_zoom:
        fit_both(_lanes(layout.children[0]).x_range, *shown)


def fit_both(x_range: Any, *sessions: Session) -> None:
    """Show the longest of `sessions` whole, from 0: the longer one is visibly longer."""
    end_ms = max(float(max(s.timeline.op_end_ns.max(initial=0), s.timeline.memop_end_ns.max(initial=0))) / 1e6
                 for s in sessions)
    end = 1.02 * end_ms if end_ms > 0 else 1.0
    x_range.update(start=0, end=end, reset_start=0, reset_end=end)


def _compared_title(s: Session, label: str) -> str:
    return (f"{label}: {s.plan.policy} on {s.graph.model}, {s.timeline.source}, its typical iteration "
            f"({format_ns(int(s.timeline.iteration_ns()[0]))})")


def _legend(ops: list[Any], memops: list[Any], markers: list[Any], ghosts: Any) -> Legend:
    """One entry per phase, per kind of transfer and per kind of marker; a click hides or shows it."""
    items = [LegendItem(label=r.name.split("_", 1)[1].replace("_", " "), renderers=[r]) for r in [*ops, *memops]]
    items += [LegendItem(label=f"{m.name.split('_')[0]} issued", renderers=[m]) for m in markers]
    items.append(LegendItem(label="before the edits", renderers=[ghosts]))
    # two rows: one would be wider than a laptop's plot, and cut off its first entries
    return Legend(items=items, orientation="horizontal", click_policy="hide", border_line_alpha=0,
                  label_text_font_size="9pt", nrows=2, glyph_height=12, label_height=12, margin=2,
                  name="lanes_legend")


def _memop_columns(session: Session, axis: Axis) -> dict[str, Any]:
    g, p, tl = session.graph, session.plan, session.timeline
    ms = [p.memops[i] for i in tl.memop_index.tolist()]
    to_device = np.array([m.direction is Direction.TO_DEVICE for m in ms], dtype=bool)
    bottom = np.where(to_device, LANES["to device"], LANES["to host"]).astype(np.float64)
    kind = [memop_what(m).removeprefix("planned ") for m in ms]  # the legend's words: MEMOP_COLORS
    after = np.array([m.issue_after for m in ms], dtype=np.int64)
    return {"left": axis.x(tl.memop_start_ns), "right": axis.x(tl.memop_end_ns), "bottom": bottom,
            "tensor_id": np.array([m.tensor for m in ms], dtype=np.int64), "issue_after": after,
            "iteration": tl.memop_iteration.astype(np.int64),
            "top": bottom + BAR, "issue": _issue_x(session, axis, tl.memop_iteration, after, tl.memop_start_ns),
            "color": np.array([MEMOP_COLORS[k] for k in kind], dtype=object),
            "kind": np.array(kind, dtype=object),
            "tensor": np.array([g.tensors[m.tensor].name for m in ms], dtype=object),
            "size": np.array([format_bytes(m.nbytes) for m in ms], dtype=object),
            "direction": np.array([m.direction.value for m in ms], dtype=object),
            "origin": np.array([m.origin.value for m in ms], dtype=object),
            "what": np.array([memop_words(m, p.mechanism) for m in ms], dtype=object),
            "after": np.array([_after(g, a) for a in after.tolist()], dtype=object),
            "duration": texts(format_ns, tl.memop_end_ns - tl.memop_start_ns),
            "alpha": np.full(len(ms), _MEMOP_ALPHA)}


def _after(graph: Graph, op: int) -> str:
    return "the start of the iteration" if op < 0 else f"{graph.ops[op].name} (op {op})"


_CROWD = 120  # markers closer than 1/120 of the drawn span share a column and are stacked
_STACK = 4  # rows of a stack before it starts again at the top


def _marker_columns(mem: dict[str, Any], axis: Axis, kind: str, direction: Direction) -> dict[str, Any]:
    """The plan's markers of one kind; markers that crowd one place are stacked down their lane,
    each on its own row (`y0`), so each can be grabbed. `x0` is where each is drawn: the snapping
    leaves the markers there alone."""
    pick = (mem["origin"] == Origin.PLAN.value) & (mem["direction"] == direction.value)
    x = mem["issue"][pick]
    lane = LANES["to host" if direction is Direction.TO_HOST else "to device"]
    span = float(axis.knots_x[-1]) if axis.mode == "op" else float(axis.x(axis.knots_ns[-1:])[0])
    column_of = np.floor(x / max(span / _CROWD, 1e-9)).astype(np.int64)
    order = np.lexsort((x, column_of))
    row = np.zeros(len(x), dtype=np.int64)
    for k in range(1, len(order)):  # the k-th marker of a column goes one row further down
        same = column_of[order[k]] == column_of[order[k - 1]]
        row[order[k]] = (row[order[k - 1]] + 1) % _STACK if same else 0
    y0 = lane + BAR + 0.1 - 0.28 * row
    # copies: a column sent as the same array as another is one array in the browser, which the drag
    # tool changes in place
    return {"x": x, "x0": x.copy(), "y": y0, "y0": y0.copy(), "tensor": mem["tensor"][pick], "size": mem["size"][pick],
            "tensor_id": mem["tensor_id"][pick], "iteration": mem["iteration"][pick],
            "issue_after": mem["issue_after"][pick], "what": mem["what"][pick], "after": mem["after"][pick],
            "alpha": np.ones(len(x))}


def _planned_issues(plan: Plan) -> dict[tuple[int, Direction, int], int]:
    """The op each planned memory operation is issued after, by (tensor, direction, n-th of those)."""
    seen: dict[tuple[int, Direction], int] = {}
    out = {}
    for m in plan.memops:
        if m.origin is Origin.PLAN:
            n = seen.get((m.tensor, m.direction), 0)
            seen[(m.tensor, m.direction)] = n + 1
            out[(m.tensor, m.direction, n)] = m.issue_after
    return out


def _ghost_columns(session: Session, axis: Axis, before: Plan | None) -> dict[str, Any]:
    """Where the markers of `before` were that the shown plan issues elsewhere, or not at all."""
    cols: dict[str, list[Any]] = {"x": [], "y": [], "marker": [], "color": [], "what": []}
    if before is None:
        return cols
    now = _planned_issues(session.plan)
    gone = [(key, after) for key, after in _planned_issues(before).items() if now.get(key) != after]
    g = session.graph
    for it in range(max(session.timeline.iterations, 1)):
        for (tensor, direction, _), after in gone:
            to_device = direction is Direction.TO_DEVICE
            kind = "prefetch" if to_device else "offload"
            x = _issue_x(session, axis, np.array([it]), np.array([after]), np.array([0]))[0]
            cols["x"].append(float(x))
            cols["y"].append(LANES["to device" if to_device else "to host"] + BAR + 0.1)
            cols["marker"].append("triangle" if to_device else "inverted_triangle")
            cols["color"].append(MEMOP_COLORS[kind])
            cols["what"].append(f"{kind} of {g.tensors[tensor].name}, issued after {_after(g, after)}")
    return cols


def _issue_x(session: Session, axis: Axis, iteration: np.ndarray, after: np.ndarray,
             fallback_ns: np.ndarray) -> np.ndarray:
    """Where a memory operation issued after op `after` (-1: the iteration's start) of `iteration`
    sits: at the end of that op. This is the point a person drags, not when the copy began
    (`fallback_ns` where the timeline has no such op)."""
    g, tl = session.graph, session.timeline
    n = len(g.ops)
    if axis.mode == "op":
        return (iteration * n + after + 1).astype(np.float64)
    ends = np.full((max(tl.iterations, int(iteration.max(initial=-1)) + 1), n + 1), np.inf)
    ends[tl.op_iteration, tl.op_index + 1] = tl.op_end_ns
    np.minimum.at(ends[:, 0], tl.op_iteration, tl.op_start_ns)  # column 0: the iteration's start
    issued = ends[iteration, after + 1] if len(after) else np.zeros(0)
    return axis.x(np.where(np.isinf(issued), fallback_ns, issued))


def _fault_columns(session: Session, ops: dict[str, Any]) -> tuple[dict[str, Any], str]:
    tl = session.timeline
    hit = tl.op_fault_bytes > 0
    scale, unit = byte_unit(int(tl.op_fault_bytes.max(initial=0)))
    return {"left": ops["left"][hit], "right": ops["right"][hit], "top": tl.op_fault_bytes[hit] / scale,
            "name": ops["name"][hit], "fault": ops["fault"][hit]}, unit


def _faults(source: ColumnDataSource, lanes: Any) -> Any:
    f = figure(height=90, x_range=lanes.x_range, sizing_mode="stretch_width", tools="", toolbar_location=None)
    red = MEMOP_COLORS["demand fault"]
    bars = add_renderer(f, Quad(left="left", right="right", bottom=0, top="top", fill_color=red, line_color=red),
                        source, name="fault_bars")
    f.add_tools(HoverTool(renderers=[bars], tooltips=[("op", "@name"), ("faulted in while it ran", "@fault")]))
    # an empty plot reads as "not recorded": say that nothing faulted
    f.add_layout(Label(x=10, y=40, x_units="screen", y_units="screen", text="no demand faults",
                       text_color="#555555", text_font_size="11pt", name="no_faults", visible=False))
    f.xaxis.visible = False
    f.yaxis.ticker = BasicTicker(desired_num_ticks=3)
    return f
