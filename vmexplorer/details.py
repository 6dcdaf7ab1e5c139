"""Find things in a session: every op and tensor as a row to search and filter, and what one op or one
memory operation did, in words, with where it sits on the time axis so a page can zoom to it.

Times are milliseconds from the start of the iteration they belong to, as `records.spans.one_iteration`
sets it (the iteration's first op or memory operation), which is the axis the app draws one iteration on.
The NVTX range names are the ones the GPU executor pushes, so a row here finds the same range in Nsight
Systems.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import Mechanism
from .graph import Graph, Op
from .plan import Direction, MemOp, Mode, Origin
from .plan.copies import asynchronous, call_before
from .plan.mechanisms import mechanism_of
from .records.spans import one_iteration
from .session import Session
from .units import format_bytes, format_ns

MAX_QUERY_CHARS = 80  # a search box is typed into: longer text is cut, never compiled or repeated
MAX_LISTED = 12  # tensors or transfers named in one detail line; the rest are counted
Details = list[tuple[str, str]]


# --- the names Nsight Systems shows ---------------------------------------------------------------------
def op_range_name(op: Op) -> str:
    """The NVTX range the executor pushes around an op's kernels."""
    return op.name


def memop_range_name(graph: Graph, memop: MemOp) -> str:
    """The NVTX range the executor pushes around a prefetch or eviction it issues (a demand fault has
    none of its own: it happens inside the faulting op's kernels, under that op's range)."""
    return f"{memop.direction.value} {graph.tensors[memop.tensor].name}"


# --- one iteration's spans, by op --------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class IterationSpans:
    """One recorded iteration, by op index: when each op started and ended (ns from the iteration's
    start), how long it waited before starting and the bytes it faulted in; and the memop rows in it."""

    iteration: int
    origin_ns: int  # where the iteration starts on the timeline's own clock
    op_start_ns: np.ndarray
    op_end_ns: np.ndarray
    op_stall_ns: np.ndarray
    op_fault_bytes: np.ndarray
    memop_rows: np.ndarray  # rows of the timeline's memop columns that belong to this iteration


def iteration_spans(session: Session, iteration: int | None = None) -> IterationSpans:
    """The spans of `iteration` (the typical one when None); ValueError when the timeline lacks it."""
    tl = session.timeline
    it = tl.typical_iteration() if iteration is None else int(iteration)
    try:
        one, origin, _ = one_iteration(tl, it)  # the iteration the timeline draws, from the same origin
    except ValueError:
        raise ValueError(f"the timeline has no iteration {it} (it has {tl.iterations})") from None
    n = len(session.graph.ops)
    idx = one.op_index
    start, end, stall, fault = (np.zeros(n, dtype=np.int64) for _ in range(4))
    start[idx], end[idx] = one.op_start_ns, one.op_end_ns
    stall[idx], fault[idx] = one.op_stall_ns, one.op_fault_bytes
    return IterationSpans(it, origin, start, end, stall, fault, np.flatnonzero(tl.memop_iteration == it))


def op_span_ms(session: Session, op: int, iteration: int | None = None) -> tuple[float, float]:
    """Where op `op` ran in `iteration` (the typical one when None): (start, end) in ms from the
    iteration's start, the x range a page zooms its time axis to."""
    _check_op(session, op)
    spans = iteration_spans(session, iteration)
    return float(spans.op_start_ns[op]) / 1e6, float(spans.op_end_ns[op]) / 1e6


def memop_span_ms(session: Session, row: int) -> tuple[float, float]:
    """Where the memory operation of timeline row `row` ran: (start, end) in ms from its iteration's start."""
    tl = session.timeline
    _check_row(session, row)
    origin = iteration_spans(session, int(tl.memop_iteration[row])).origin_ns
    return (tl.memop_start_ns[row] - origin) / 1e6, (tl.memop_end_ns[row] - origin) / 1e6


def tensor_span_ms(session: Session, tensor: int, iteration: int | None = None) -> tuple[float, float]:
    """From the start of the first op that touches `tensor` to the end of the last, in ms from the
    iteration's start: where a tensor is used (its transfers fall between or around its uses)."""
    uses = session.graph.uses[tensor]
    if not uses:
        raise ValueError(f"no op uses tensor {session.graph.tensors[tensor].name!r}")
    spans = iteration_spans(session, iteration)
    return float(spans.op_start_ns[uses[0]]) / 1e6, float(spans.op_end_ns[uses[-1]]) / 1e6


def zoom_window(span_ms: tuple[float, float], context: float = 2.0, least_ms: float = 0.05) -> tuple[float, float]:
    """A span widened to `context` times its length on each side (at least `least_ms` wide): what to
    zoom to so a short op is seen among its neighbours rather than filling the plot."""
    start, end = span_ms
    pad = max((end - start) * context, least_ms / 2)
    return start - pad, end + pad


def memop_row(session: Session, memop: int, iteration: int) -> int:
    """The timeline row of plan memop `memop` in `iteration`; ValueError when it did not run there."""
    tl = session.timeline
    rows = np.flatnonzero((tl.memop_index == memop) & (tl.memop_iteration == iteration))
    if not rows.size:
        raise ValueError(f"memory operation {memop} did not run in iteration {iteration}")
    return int(rows[0])


# --- rows to search ----------------------------------------------------------------------------------------
def op_rows(session: Session, iteration: int | None = None) -> list[dict[str, Any]]:
    """One row per op of the graph, in execution order, with its figures in `iteration` (the typical one)."""
    spans = iteration_spans(session, iteration)
    return [{"op": i, "name": op.name, "kind": op.kind, "phase": op.phase.value, "layer": op.layer,
             "time_ms": round(float(spans.op_end_ns[i] - spans.op_start_ns[i]) / 1e6, 4),
             "stall_ms": round(float(spans.op_stall_ns[i]) / 1e6, 4),
             "fault_bytes": int(spans.op_fault_bytes[i]), "nvtx_range": op_range_name(op)}
            for i, op in enumerate(session.graph.ops)]


def tensor_layer(graph: Graph, tensor: int) -> str:
    """The layer of the op that makes `tensor`; for what exists before the iteration (weights, momentum,
    the batch), the layer of the first op that uses it ("" when nothing does)."""
    t = graph.tensors[tensor]
    if not t.persistent:
        return graph.ops[t.producer].layer
    uses = graph.uses[tensor]
    return graph.ops[uses[0]].layer if uses else ""


def tensor_rows(session: Session) -> list[dict[str, Any]]:
    """One row per tensor of the graph (all of them, small ones too), with how the plan moves it."""
    g = session.graph
    moved: dict[int, set[str]] = {}
    for m in session.plan.memops:
        moved.setdefault(m.tensor, set()).add(memop_what(m))  # the uvm words: the columns' names
    return [{"tensor": i, "name": t.name, "kind": t.kind.value, "layer": tensor_layer(g, i), "bytes": t.nbytes,
             "producer": "before the iteration" if t.persistent else g.ops[t.producer].name,
             "uses": len(g.uses[i]), "offloaded": "planned offload" in moved.get(i, ()),
             "evicted": "driver eviction" in moved.get(i, ()), "faulted": "demand fault" in moved.get(i, ())}
            for i, t in enumerate(g.tensors)]


def filter_rows(rows: list[dict[str, Any]], text: str | None, kind: str | None = None) -> list[dict[str, Any]]:
    """The rows whose name or layer holds `text` (any case; a plain substring, cut to MAX_QUERY_CHARS) and,
    with `kind`, whose kind or phase is it. Empty text and no kind keep every row."""
    needle = (text or "")[:MAX_QUERY_CHARS].strip().casefold()
    return [r for r in rows
            if (not kind or r.get("kind") == kind or r.get("phase") == kind)
            and (needle in str(r.get("name", "")).casefold() or needle in str(r.get("layer", "")).casefold())]


# --- details, in words -------------------------------------------------------------------------------------
def memop_what(m: MemOp, mechanism: Mechanism = Mechanism.UVM) -> str:
    """What kind of transfer a memory operation is, in words a student reads: under uvm the driver's
    are demand faults and evictions (it moves bytes to the GPU only when an op touches them), under swap
    the executor's synchronous copies (`MechanismSpec.transfer_kind`)."""
    return mechanism_of(mechanism).transfer_kind(m)


def direction_words(direction: Direction) -> str:
    return "to the GPU" if direction is Direction.TO_DEVICE else "to the host"


_HOW = {Mode.ASYNC: "asynchronously, on a copy stream, beside the ops",
        Mode.SYNC: "on the compute stream: the next op waits for it",
        Mode.FAULT: "inside the op's kernels, as they touch pages that are not on the GPU"}


def memop_words(m: MemOp, mechanism: Mechanism = Mechanism.UVM) -> str:
    """A memory operation in one sentence: what it is, which way, and how it runs beside the ops."""
    return f"{memop_what(m, mechanism)} {direction_words(m.direction)}, {_HOW[m.mode]}"


def op_details(session: Session, op: int, iteration: int | None = None) -> Details:
    """What op `op` did in `iteration` (the typical one), as (label, value) lines."""
    _check_op(session, op)
    g, o = session.graph, session.graph.ops[op]
    spans = iteration_spans(session, iteration)
    start, end = int(spans.op_start_ns[op]), int(spans.op_end_ns[op])
    stall, fault = int(spans.op_stall_ns[op]), int(spans.op_fault_bytes[op])
    faults = [m for m in session.plan.memops if m.mode is Mode.FAULT and m.complete_before == op]
    return [("op", f"{o.name} (op {op} of {len(g.ops)})"), ("NVTX range", op_range_name(o)),
            ("what it does", f"{o.kind}, {o.phase.value} pass, layer {o.layer}"),
            ("iteration", _iteration_words(session, spans.iteration)),
            ("ran", f"from {start / 1e6:.3f} ms to {end / 1e6:.3f} ms after the iteration's start"),
            ("took", format_ns(end - start)),
            ("waited before it", format_ns(stall) if stall else "no wait"),
            ("faulted in while it ran", format_bytes(fault) if fault else "no demand faults"),
            ("tensors it faulted", _named(g, [m.tensor for m in faults], [m.nbytes for m in faults]) or "none"),
            ("reads", _named(g, list(o.reads)) or "nothing"), ("writes", _named(g, list(o.writes)) or "nothing"),
            ("transfers issued after it", _issued_after(session, op) or "none")]


def memop_details(session: Session, row: int) -> Details:
    """What the memory operation of timeline row `row` moved, why, and when, as (label, value) lines."""
    _check_row(session, row)
    g, tl = session.graph, session.timeline
    m = session.plan.memops[int(tl.memop_index[row])]
    start, end = memop_span_ms(session, row)
    after = "the start of the iteration" if m.issue_after < 0 else _op_words(g, m.issue_after)
    before = "the end of the iteration" if m.complete_before >= len(g.ops) else _op_words(g, m.complete_before)
    nvtx = ("none of its own: it runs inside the range of the op that faults" if m.mode is Mode.FAULT
            else memop_range_name(g, m))
    when = [("faulted in by", before)] if m.mode is Mode.FAULT else [("issued after", after), ("needed by", before)]
    if m.mode is Mode.ASYNC:
        when.append(("called", _called(session, int(tl.memop_index[row]))))
    return [("tensor", g.tensors[m.tensor].name), ("bytes", format_bytes(m.nbytes)),
            ("direction", direction_words(m.direction)),
            ("what", memop_what(m, session.plan.mechanism) + (
                " (the policy's plan)" if m.origin is Origin.PLAN else f" ({mechanism_of(session.plan).forced_by})")),
            ("how", _HOW[m.mode]), ("NVTX range", nvtx),
            *when,
            ("iteration", _iteration_words(session, int(tl.memop_iteration[row]))),
            ("ran", f"from {start:.3f} ms to {end:.3f} ms after the iteration's start"),
            ("took", format_ns(int(tl.memop_end_ns[row] - tl.memop_start_ns[row])))]


def tensor_details(session: Session, tensor: int) -> Details:
    """What a tensor is and how the plan moves it, as (label, value) lines."""
    g = session.graph
    if not 0 <= tensor < len(g.tensors):
        raise ValueError(f"no tensor {tensor}: the graph has {len(g.tensors)}")
    t, uses, mech = g.tensors[tensor], g.uses[tensor], session.plan.mechanism
    moves = [m for m in session.plan.memops if m.tensor == tensor]
    return [("tensor", t.name), ("kind", t.kind.value), ("layer", tensor_layer(g, tensor) or "none"),
            ("shape", " x ".join(map(str, t.shape)) + f" {t.dtype}"), ("bytes", format_bytes(t.nbytes)),
            ("made by", "exists before the iteration" if t.persistent else _op_words(g, t.producer)),
            ("used by", f"{len(uses)} ops" + (f", from {_op_words(g, uses[0])} to {_op_words(g, uses[-1])}"
                                               if uses else "")),
            ("transfers", _list([f"{memop_what(m, mech)} {direction_words(m.direction)} ({format_bytes(m.nbytes)}) "
                                 f"after {_op_words(g, m.issue_after) if m.issue_after >= 0 else 'the start'}"
                                 for m in moves]) or "none: it stays where it is")]


def _called(session: Session, memop: int) -> str:
    """Where the host calls an asynchronous copy, and why there: its stream runs copies in call order."""
    g, plan = session.graph, session.plan
    at = call_before(plan)[memop]
    where = "at the end of the iteration" if at >= len(g.ops) else f"before {_op_words(g, at)} is enqueued"
    if not plan.copy_order:
        return f"{where}, the op that waits for it (the executor's order: its stream runs copies in order of need)"
    stream = asynchronous(plan, plan.memops[memop].direction)
    return (f"{where}, as copy {stream.index(memop) + 1} of {len(stream)} on its stream in the plan's copy order "
            "(each called as early as that order lets it)")


def _issued_after(session: Session, op: int) -> str:
    g, mech = session.graph, session.plan.mechanism
    return _list([f"{memop_what(m, mech)} of {g.tensors[m.tensor].name} {direction_words(m.direction)} "
                  f"({format_bytes(m.nbytes)})"
                  for m in session.plan.memops if m.issue_after == op and m.mode is not Mode.FAULT])


def _named(graph: Graph, tensors: list[int], nbytes: list[int] | None = None) -> str:
    sizes = nbytes if nbytes is not None else [graph.tensors[t].nbytes for t in tensors]
    return _list([f"{graph.tensors[t].name} ({format_bytes(b)})" for t, b in zip(tensors, sizes)])


def _list(items: list[str]) -> str:
    more = len(items) - MAX_LISTED
    return "; ".join(items[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")


def _op_words(graph: Graph, op: int) -> str:
    return f"{graph.ops[op].name} (op {op})"


def _iteration_words(session: Session, iteration: int) -> str:
    tl = session.timeline
    words = f"{iteration + 1} of {tl.iterations}"
    if iteration == tl.typical_iteration():
        words += " (the typical one)"
    elif iteration >= tl.timed_iterations:
        words += " (unified memory counted: slower than the timed ones)"
    return words


def _check_op(session: Session, op: int) -> None:
    if not 0 <= op < len(session.graph.ops):
        raise ValueError(f"no op {op}: the graph has {len(session.graph.ops)}")


def _check_row(session: Session, row: int) -> None:
    n = len(session.timeline.memop_index)
    if not 0 <= row < n:
        raise ValueError(f"no memory operation at row {row}: the timeline has {n}")
