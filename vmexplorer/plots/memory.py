"""Resident bytes over the iteration, stacked by tensor kind, against the emulated capacity.

The figure is built once per page (`resident_figure`) and then fed through its data sources
(`update_resident`, `highlight_tensor`), so zoom and pan survive an edit. Its renderers: "resident"
(the session's own resident curve, as a line), "resident_<kind>" (one stacked area per kind, every kind
always present so the legend never changes), "resident_hover" (an invisible line the hover reads) and
"tensor_resident" (the selected tensor's bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool, Line, Range1d, Step, VArea, VAreaStep
from bokeh.models.annotations import Label, Legend, LegendItem, Span
from bokeh.plotting import figure

from ..graph import Kind
from ..records.spans import resident_steps
from ..session import Session
from ..units import format_bytes
from .axis import Axis, add_renderer, byte_unit, refill

# persistent kinds at the bottom, so what comes and goes during the iteration stacks on a steady base
KINDS = (Kind.WEIGHT, Kind.BUFFER, Kind.OPTIMIZER_STATE, Kind.INPUT, Kind.GRADIENT, Kind.ACTIVATION, Kind.WORKSPACE)
KIND_LABELS = {Kind.WEIGHT: "weights", Kind.BUFFER: "batch-norm statistics", Kind.OPTIMIZER_STATE: "optimizer state",
               Kind.INPUT: "input batch", Kind.GRADIENT: "gradients", Kind.ACTIVATION: "activations",
               Kind.WORKSPACE: "kernel workspace"}
KIND_COLORS = {Kind.WEIGHT: "#4c78a8", Kind.BUFFER: "#9ecae9", Kind.OPTIMIZER_STATE: "#b279a2",
               Kind.INPUT: "#bab0ac", Kind.GRADIENT: "#f58518", Kind.ACTIVATION: "#54a24b",
               Kind.WORKSPACE: "#eeca3b"}
LARGEST = 3  # resident tensors named on hover


@dataclass(frozen=True)
class _Steps:
    """One iteration's changes of the resident bytes, grouped into instants (one row per instant, the
    level after every change at that instant, as `resident_curve` keeps it)."""

    t_ns: np.ndarray  # each instant, increasing
    row: np.ndarray  # the instant of each change
    delta: np.ndarray  # bytes the change adds (negative: removes)
    tensor: np.ndarray  # the tensor it changes


def resident_figure(session: Session, axis: Axis, x_range: Any) -> Any:
    """Resident bytes stacked by tensor kind, the capacity as a dashed line, x linked to `x_range`.
    Hovering names the bytes per kind and the largest resident tensors at that instant; clicking a
    legend entry hides its kind."""
    f = figure(height=165, x_range=x_range, y_range=Range1d(start=0, end=1), x_axis_label=axis.label,
               sizing_mode="stretch_width", tools="xpan,xwheel_zoom,box_zoom,reset")
    kinds = ColumnDataSource(name="resident_kinds")
    items = []
    for kind in KINDS:
        area = add_renderer(f, VAreaStep(x="x", y1=f"{kind.value}_lo", y2=f"{kind.value}_hi", step_mode="after",
                                         fill_color=KIND_COLORS[kind], fill_alpha=0.75),
                            kinds, name=f"resident_{kind.value}")
        items.append(LegendItem(label=KIND_LABELS[kind], renderers=[area]))
    total = ColumnDataSource(name="resident")
    add_renderer(f, Step(x="x", y="y", mode="after", line_color="#3182bd"), total, name="resident")
    hover = add_renderer(f, Line(x="x", y="total", line_alpha=0), kinds, name="resident_hover")
    f.add_tools(HoverTool(renderers=[hover], mode="vline", line_policy="prev", tooltips=[
        ("resident", "@total_text"), *((KIND_LABELS[k], f"@{k.value}_text") for k in KINDS),
        *((f"largest {i + 1}", f"@top{i}") for i in range(LARGEST))]))
    # a plain area over corner points, not varea_step: BokehJS (3.9) hangs the page drawing an empty
    # varea_step beside the kinds' areas, and this one is empty until a tensor is picked
    add_renderer(f, VArea(x="x", y1=0, y2="y", fill_color="#d62728", fill_alpha=0.25, hatch_pattern="/",
                          hatch_color="#d62728"), ColumnDataSource(name="tensor_resident"), name="tensor_resident")
    legend: Any = Legend(items=items, orientation="horizontal", click_policy="hide", border_line_alpha=0,
                         label_text_font_size="9pt", glyph_height=12, label_height=12, margin=2, nrows=2)
    legend.padding = 2  # a compact legend leaves the plot its height
    f.add_layout(legend, "above")
    f.add_layout(Span(location=0, dimension="width", line_color="#d62728", line_dash="dashed", line_width=2,
                      name="capacity"))
    f.add_layout(Label(x=6, x_units="screen", y=0, text="capacity", text_color="#d62728", text_font_size="9pt",
                       y_offset=3, name="capacity_label"))
    update_resident(f, session, axis)
    return f


def update_resident(fig: Any, session: Session, axis: Axis) -> None:
    """Put another session (an edit's, another iteration's) into a figure from `resident_figure`: new
    data in the same sources, the y range and capacity moved to it. The tensor highlight is cleared
    (its times were the old session's): call `highlight_tensor` again to keep it."""
    tl, capacity = session.timeline, session.plan.capacity
    steps = _session_steps(session)
    columns = _kind_columns(session, steps)
    scale, unit = _scale(session)
    # a fixed range: the capacity line must show even when the resident bytes stay far below it
    top = max(capacity, int(columns["total"].max(initial=0)), int(tl.resident_bytes.max(initial=0)))
    for key in [k for k in columns if k.endswith(("_lo", "_hi")) or k == "total"]:
        columns[key] = columns[key] / scale
    columns["x"] = axis.x(columns.pop("t_ns"))
    refill(_named(fig, f"resident_{KINDS[0].value}").data_source, columns)
    refill(_named(fig, "resident").data_source, {"x": axis.x(tl.resident_t_ns), "y": tl.resident_bytes / scale})
    _named(fig, "tensor_resident").data_source.data = {"x": np.zeros(0), "y": np.zeros(0)}
    # reset goes back to this session's range, not to the first one the figure showed
    fig.y_range.update(start=0, end=1.08 * top / scale, reset_start=0, reset_end=1.08 * top / scale)
    fig.yaxis.axis_label = f"resident ({unit})"
    _named(fig, "capacity").location = capacity / scale
    _named(fig, "capacity_label").y = capacity / scale


def highlight_tensor(fig: Any, session: Session, axis: Axis, tensor: int | None) -> None:
    """Draw one tensor's bytes on the device over time (its share of the resident bytes) in a figure
    from `resident_figure` showing `session`; None clears it."""
    if tensor is None:
        _named(fig, "tensor_resident").data_source.data = {"x": np.zeros(0), "y": np.zeros(0)}
        return
    t_ns, level = tensor_resident(session, tensor)
    scale, _ = _scale(session)
    x = axis.x(t_ns)
    # the step's corners: each level from its instant to the next
    _named(fig, "tensor_resident").data_source.data = {"x": np.repeat(x, 2)[1:], "y": np.repeat(level / scale, 2)[:-1]}


def tensor_resident(session: Session, tensor: int) -> tuple[np.ndarray, np.ndarray]:
    """One tensor's bytes on the device as a step function: the instants it changes (and the first and
    last instant of the curve), and its bytes from each on."""
    if not 0 <= tensor < len(session.graph.tensors):
        raise ValueError(f"tensor has to be one of the graph's 0 to {len(session.graph.tensors) - 1}, not {tensor}")
    times, levels = [], []
    for s in _session_steps(session):
        mine = s.tensor == tensor
        change = np.zeros(len(s.t_ns), dtype=np.int64)
        np.add.at(change, s.row[mine], s.delta[mine])
        times.append(s.t_ns)
        levels.append(np.cumsum(change))
    t_ns, level = np.concatenate([np.zeros(0), *times]), np.concatenate([np.zeros(0, dtype=np.int64), *levels])
    keep = np.r_[True, level[1:] != level[:-1]] if len(level) else np.zeros(0, dtype=bool)
    if len(keep):
        keep[-1] = True  # the curve's end, so the step shows up to it
    return t_ns[keep], level[keep]


def _named(fig: Any, name: str) -> Any:
    """A renderer or annotation of the figure by name: a walk of its own lists, where Bokeh's `select`
    walks every model the figure references (tens of ms on each update)."""
    return next(part for part in (*fig.renderers, *fig.center) if part.name == name)


def _scale(session: Session) -> tuple[float, str]:
    return byte_unit(max(session.plan.capacity, int(session.timeline.resident_bytes.max(initial=0))))


def _session_steps(session: Session) -> list[_Steps]:
    """Every recorded iteration's steps. Each iteration's resident bytes start afresh from the plan's
    `resident_at_start`, when the previous iteration's last op or transfer ended (measured runs lay their
    iterations end to end: `engine.executor`), at 0 for the first."""
    g, p, tl = session.graph, session.plan, session.timeline
    n, m = len(g.ops), len(p.memops)
    out, start = [], 0.0
    for it in np.unique(tl.op_iteration):
        ops, mems = tl.op_iteration == it, tl.memop_iteration == it
        op_start, op_end, mem_start, mem_end = (np.full(k, np.nan) for k in (n, n, m, m))
        op_start[tl.op_index[ops]], op_end[tl.op_index[ops]] = tl.op_start_ns[ops], tl.op_end_ns[ops]
        mem_start[tl.memop_index[mems]], mem_end[tl.memop_index[mems]] = tl.memop_start_ns[mems], tl.memop_end_ns[mems]
        times, delta, tensor = resident_steps(g, p, op_start - start, op_end - start, mem_start - start,
                                              mem_end - start)
        seen = ~np.isnan(times)  # an op or transfer the recording lacks changes nothing
        times, delta, tensor = times[seen] + start, delta[seen], tensor[seen]
        t_ns, row = np.unique(times, return_inverse=True)
        out.append(_Steps(t_ns, row.reshape(-1), delta, tensor))
        start = float(max(tl.op_end_ns[ops].max(), tl.memop_end_ns[mems].max(initial=0)))
    return out


def _kind_columns(session: Session, steps: list[_Steps]) -> dict[str, np.ndarray]:
    """Per instant: each kind's bytes as a band of the stack (`<kind>_lo`, `<kind>_hi`), the total, and
    the hover's texts (bytes per kind, the largest resident tensors)."""
    kind_of = np.array([KINDS.index(t.kind) for t in session.graph.tensors], dtype=np.int64)
    per_kind = []
    for s in steps:
        change = np.zeros((len(s.t_ns), len(KINDS)), dtype=np.int64)
        np.add.at(change, (s.row, kind_of[s.tensor]), s.delta)
        per_kind.append(np.cumsum(change, axis=0))
    levels = np.concatenate([np.zeros((0, len(KINDS)), dtype=np.int64), *per_kind])
    hi = np.cumsum(levels, axis=1)
    columns: dict[str, Any] = {"t_ns": np.concatenate([np.zeros(0), *(s.t_ns for s in steps)]),
                               "total": hi[:, -1].astype(np.float64), "total_text": _byte_texts(hi[:, -1])}
    for i, kind in enumerate(KINDS):
        columns[f"{kind.value}_lo"] = (hi[:, i] - levels[:, i]).astype(np.float64)
        columns[f"{kind.value}_hi"] = hi[:, i].astype(np.float64)
        columns[f"{kind.value}_text"] = _byte_texts(levels[:, i])
    names = np.array([t.name for t in session.graph.tensors], dtype=object)
    ranked = [_largest(s, len(names)) for s in steps]
    top_t = np.concatenate([np.zeros((0, LARGEST), dtype=np.int64), *(r[0] for r in ranked)])
    top_b = np.concatenate([np.zeros((0, LARGEST), dtype=np.int64), *(r[1] for r in ranked)])
    for i in range(LARGEST):
        texts = names[top_t[:, i]] + " (" + _byte_texts(top_b[:, i]) + ")"
        columns[f"top{i}"] = np.where(top_b[:, i] > 0, texts, "")
    return columns


def _largest(s: _Steps, n_tensors: int) -> tuple[np.ndarray, np.ndarray]:
    """The `LARGEST` tensors with the most bytes on the device at each instant, largest first, and
    their bytes (0 where fewer are resident). Incremental: only a tensor that changed can enter the
    ranking, so the whole ranking is redone only when a ranked tensor itself changes."""
    level = [0] * n_tensors
    # the same levels as an array, for a full ranking: an array made of the list each time was most of
    # the time a long session's resident plot took
    levels = np.zeros(n_tensors, dtype=np.int64)
    ranked: list[int] = []
    tensors = np.zeros((len(s.t_ns), LARGEST), dtype=np.int64)
    nbytes = np.zeros((len(s.t_ns), LARGEST), dtype=np.int64)
    changes = list(zip(s.tensor.tolist(), s.delta.tolist()))
    ends = np.searchsorted(s.row, np.arange(1, len(s.t_ns) + 1)).tolist()  # changes are in time order
    first = 0
    for i, end in enumerate(ends):
        changed = [t for t, _ in changes[first:end]]
        for t, d in changes[first:end]:
            level[t] += d
            levels[t] += d
        first = end
        if any(t in ranked for t in changed):
            candidates = np.argpartition(-levels, min(LARGEST, n_tensors) - 1)[:LARGEST].tolist()
        else:
            floor = level[ranked[-1]] if len(ranked) == LARGEST else 0
            candidates = ranked + [t for t in set(changed) if level[t] > floor]
        ranked = sorted((t for t in candidates if level[t] > 0), key=lambda t: (-level[t], t))[:LARGEST]
        tensors[i, :len(ranked)] = ranked
        nbytes[i, :len(ranked)] = [level[t] for t in ranked]
    return tensors, nbytes


def _byte_texts(values: np.ndarray) -> np.ndarray:
    """`format_bytes` of each value, formatting each distinct value once (levels repeat a lot)."""
    distinct, where = np.unique(values, return_inverse=True)
    return np.array([format_bytes(v) for v in distinct.tolist()] or [""], dtype=object)[where.reshape(-1)]
