"""What ran, or what the simulator predicts would run: columns on one clock, in ns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Kind
from ..plan import Direction, Mode, Plan
from ..plan.stays import elided

MAX_NS = 2**53  # the latest time, and the longest duration, a timeline holds: 104 days, exact as a float


@dataclass(frozen=True, eq=False)
class Timeline:
    """Per-op and per-memory-operation spans, and resident device bytes over time.

    Rows are executions: an op run in iteration 3 is one row. `op_index` points into `Graph.ops`,
    `memop_index` into `Plan.memops`. Times are ns from the start of the first recorded iteration.
    `op_stall_ns` is the time an op waited for memory operations (prefetches, evictions) before it
    could start; `op_fault_bytes` the bytes its kernels demand-faulted in.

    The last `counted` iterations of a measured run ran with CUPTI's unified-memory counters on, which
    slow paging itself (bench/gpu/bench_collectors.py measures by how much): they are kept to show the
    migrations and faults CUPTI saw, and left out of every timing figure, which come from the timed
    iterations before them.
    """

    source: str  # "simulated" | "measured"
    op_iteration: np.ndarray
    op_index: np.ndarray
    op_start_ns: np.ndarray
    op_end_ns: np.ndarray
    op_stall_ns: np.ndarray
    op_fault_bytes: np.ndarray
    memop_iteration: np.ndarray
    memop_index: np.ndarray
    memop_start_ns: np.ndarray
    memop_end_ns: np.ndarray
    resident_t_ns: np.ndarray
    resident_bytes: np.ndarray
    counted: int = 0

    @property
    def iterations(self) -> int:
        return len(np.unique(self.op_iteration))

    @property
    def timed_iterations(self) -> int:
        """The iterations whose times are the run's (all but the counted ones; all, with none timed)."""
        n = self.iterations
        return n - self.counted if 0 <= self.counted < n else n

    def timed_ns(self) -> np.ndarray:
        """`iteration_ns()` of the timed iterations (iterations are numbered from 0 in time order)."""
        return self.iteration_ns()[:self.timed_iterations]

    def iteration_ns(self) -> np.ndarray:
        """Duration of each recorded iteration: from its start to the next one's (the last ends at its
        last op or memory operation, whichever is later). An iteration starts where its first op's wait
        began (`op_start_ns - op_stall_ns`): a measured run's iteration origin, and in a simulation the
        time the first op waited for transfers issued before it, which the iteration would lose if it
        were timed from that op's start."""
        if not len(self.op_iteration):
            return np.zeros(0, dtype=np.int64)
        # each iteration's earliest start, in one pass (a mask per iteration is quadratic in their count)
        iterations, index = np.unique(self.op_iteration, return_inverse=True)
        starts = np.full(len(iterations), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(starts, index, (self.op_start_ns - self.op_stall_ns).astype(np.int64))
        last_end = int(self.op_end_ns.max())
        if len(self.memop_end_ns):
            last_end = max(last_end, int(self.memop_end_ns.max()))
        return np.append(starts[1:], last_end) - starts

    def typical_iteration(self) -> int:
        """The timed iteration whose duration is the median (the lower one of an even count): the
        one to draw, or to take op times from, as typical of the run."""
        its = self.timed_ns()
        if not len(its):
            raise ValueError("the timeline has no iterations")
        return int(np.unique(self.op_iteration)[np.argsort(its, kind="stable")[(len(its) - 1) // 2]])


def summarize(graph: Graph, plan: Plan, timeline: Timeline) -> dict[str, float | int | str]:
    """The figures a person compares, per iteration over the timed iterations: the typical one's time (the
    median one; of an even number, the lower middle: the one `Timeline.typical_iteration` picks, drawn and
    split everywhere, never an average of two) and the means of the rest."""
    graph = plan.graph_of(graph)
    its = timeline.timed_ns()  # each timed iteration runs to the next one's start, counted or not
    tl = timed_only(timeline)
    n = max(tl.iterations, 1)
    moved = {Direction.TO_HOST: 0, Direction.TO_DEVICE: 0}
    nothing = elided(graph, plan)  # a swap copy of a tensor whose host copy is current moves no byte
    # how often each of the plan's memory operations ran, counted at C speed: a long session has a
    # million rows, and its plan a few thousand operations (Python ints: the sum may pass int64)
    runs = np.bincount(tl.memop_index.astype(np.int64), minlength=len(plan.memops)).tolist()
    for i, (m, k) in enumerate(zip(plan.memops, runs)):
        if k and m.mode is not Mode.FAULT and i not in nothing:
            moved[m.direction] += k * m.nbytes
    fault_bytes = int(tl.op_fault_bytes.sum())
    return {
        "source": tl.source,
        "iterations": tl.iterations,
        "counted_iterations": timeline.iterations - tl.iterations,
        "iteration_ns": int(np.sort(its)[(len(its) - 1) // 2]) if len(its) else 0,
        "stall_ns": int(tl.op_stall_ns.sum()) // n,
        "busy_ns": int((tl.op_end_ns - tl.op_start_ns).sum()) // n,  # ops running, faults included
        "fault_bytes": fault_bytes // n,
        "bytes_to_host": moved[Direction.TO_HOST] // n,
        "bytes_to_device": (moved[Direction.TO_DEVICE] + fault_bytes) // n,
        "peak_resident_bytes": int(tl.resident_bytes.max()) if len(tl.resident_bytes) else 0,
        "capacity_bytes": plan.capacity,
        "footprint_bytes": graph.footprint,
    }


def timed_only(timeline: Timeline) -> Timeline:
    """The timeline without its counted iterations (itself, when it has none): what calibration and
    per-op comparisons read, so counting's cost never passes for the run's."""
    tl = timeline
    if not tl.counted or tl.timed_iterations == tl.iterations:
        return tl
    n = tl.timed_iterations
    ops, mems = tl.op_iteration < n, tl.memop_iteration < n
    end = tl.op_start_ns[~ops].min()
    res = tl.resident_t_ns < end
    return Timeline(tl.source, tl.op_iteration[ops], tl.op_index[ops], tl.op_start_ns[ops], tl.op_end_ns[ops],
                    tl.op_stall_ns[ops], tl.op_fault_bytes[ops], tl.memop_iteration[mems], tl.memop_index[mems],
                    tl.memop_start_ns[mems], tl.memop_end_ns[mems], tl.resident_t_ns[res], tl.resident_bytes[res])


def one_iteration(timeline: Timeline, iteration: int) -> tuple[Timeline, int, int | None]:
    """The rows of one recorded iteration as a timeline of its own: iteration 0, times from the
    iteration's first op or memory operation (whichever came first). Returns it, that origin on the
    original axis, and where the next iteration begins there (None after the last). Resident bytes keep
    their level at the origin."""
    tl = timeline
    ops, mems = tl.op_iteration == iteration, tl.memop_iteration == iteration
    if not ops.any():
        raise ValueError(f"the timeline has no iteration {iteration}")
    origin = int(min(tl.op_start_ns[ops].min(), tl.memop_start_ns[mems].min(initial=tl.op_start_ns[ops].min())))
    later = tl.op_iteration > iteration
    next_start = int(tl.op_start_ns[later].min()) if later.any() else None
    inside = (tl.resident_t_ns >= origin) & (tl.resident_t_ns < (np.inf if next_start is None else next_start))
    before = np.flatnonzero(tl.resident_t_ns < origin)
    level = tl.resident_bytes[before[-1]] if before.size else (tl.resident_bytes[0] if len(tl.resident_bytes) else 0)
    return Timeline(
        tl.source, np.zeros(int(ops.sum()), dtype=np.int64), tl.op_index[ops], tl.op_start_ns[ops] - origin,
        tl.op_end_ns[ops] - origin, tl.op_stall_ns[ops], tl.op_fault_bytes[ops],
        np.zeros(int(mems.sum()), dtype=np.int64), tl.memop_index[mems], tl.memop_start_ns[mems] - origin,
        tl.memop_end_ns[mems] - origin, np.concatenate([[0], tl.resident_t_ns[inside] - origin]),
        np.concatenate([[level], tl.resident_bytes[inside]])), origin, next_start


def resident_curve(graph: Graph, plan: Plan, op_start: np.ndarray, op_end: np.ndarray,
                   mem_start: np.ndarray, mem_end: np.ndarray,
                   skipped: frozenset[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Device bytes over time as a step function: a tensor counts from its creation, its prefetch's
    start or its fault, until its release, its offload's end or its eviction's end. `skipped`: the plan's
    memory operations that move nothing (`plan.stays.elided`), where the caller has them."""
    graph = plan.graph_of(graph)
    times, deltas, _ = _resident_steps(graph, plan, op_start, op_end, mem_start, mem_end, skipped)
    order = np.argsort(np.array(times), kind="stable")
    t_sorted = np.array(times)[order]
    level = np.cumsum(np.array(deltas, dtype=np.int64)[order])
    keep = np.append(t_sorted[1:] != t_sorted[:-1], True)  # one level per instant: the last one
    return t_sorted[keep], level[keep]


def resident_by_kind(graph: Graph, plan: Plan, op_start: np.ndarray, op_end: np.ndarray,
                     mem_start: np.ndarray, mem_end: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`resident_curve` split by tensor kind (weights, gradients, activations, ...): the instants, and
    for each kind its bytes on the device from each instant on. The kinds add up to the curve."""
    graph = plan.graph_of(graph)
    times, deltas, tensors = _resident_steps(graph, plan, op_start, op_end, mem_start, mem_end)
    order = np.argsort(np.array(times), kind="stable")
    t_sorted = np.array(times)[order]
    keep = np.append(t_sorted[1:] != t_sorted[:-1], True)
    kinds = np.array([graph.tensors[t].kind.value for t in tensors], dtype=object)[order]
    d = np.array(deltas, dtype=np.int64)[order]
    levels = {k.value: np.cumsum(np.where(kinds == k.value, d, 0))[keep] for k in Kind}
    return t_sorted[keep], levels


def resident_steps(graph: Graph, plan: Plan, op_start: np.ndarray, op_end: np.ndarray, mem_start: np.ndarray,
                   mem_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The changes `resident_curve` adds up, in the order it adds them: when (ns), by how many bytes,
    and of which tensor, so a figure can split the curve by tensor and still add up to it."""
    graph = plan.graph_of(graph)
    times, deltas, tensors = _resident_steps(graph, plan, op_start, op_end, mem_start, mem_end)
    t = np.array(times, dtype=np.float64)
    order = np.argsort(t, kind="stable")
    return t[order], np.array(deltas, dtype=np.int64)[order], np.array(tensors, dtype=np.int64)[order]


def _resident_steps(graph: Graph, plan: Plan, op_start: np.ndarray, op_end: np.ndarray, mem_start: np.ndarray,
                    mem_end: np.ndarray,
                    skipped: frozenset[int] | None = None) -> tuple[list[float], list[int], list[int]]:
    """Every change of the resident bytes: when, by how much, and of which tensor."""
    times: list[float] = []
    deltas: list[int] = []
    tensors: list[int] = []
    for t, nbytes in plan.resident_at_start:
        times.append(0.0)
        deltas.append(nbytes)
        tensors.append(t)
    last_use = graph.last_use
    for t, tensor in enumerate(graph.tensors):
        if not tensor.persistent:
            times += [op_start[tensor.producer], op_end[last_use[t]]]
            deltas += [tensor.nbytes, -tensor.nbytes]
            tensors += [t, t]
    if skipped is None:  # under swap a copy in taken straight back out holds nothing
        skipped = elided(graph, plan)
    for i, m in enumerate(plan.memops):
        if i in skipped:
            continue
        if m.direction is Direction.TO_DEVICE:
            times.append(mem_start[i])
            deltas.append(m.nbytes)
        else:
            times.append(mem_end[i])
            deltas.append(-m.nbytes)
        tensors.append(m.tensor)
    return times, deltas, tensors
