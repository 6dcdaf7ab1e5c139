"""Where an iteration's time goes, split the same way for every policy and every source.

The compute stream runs one op after another, so an iteration's time is the ops' spans and the gaps
between them (and after the last one, until the next iteration starts). Each piece goes to one part:

- **compute**: an op's own time, what it takes with nothing paging (the caller's `own_ns`, from the
  same model's `device` run or the cost model); an op that took no demand fault is all compute;
- **recomputing**: the same, of an op that runs a forward op again to make a dropped activation anew
  (phase `recompute`, `graph.recompute`): the time a plan pays for the memory it did not keep, which
  would otherwise pass for compute;
- **waiting on demand faults**: what an op that faulted took beyond its own time;
- **waiting on evictions and prefetches**: the part of a gap before an op until the last transfer
  it waits for ended (the plan's offloads and prefetches, and the driver's evictions, that complete
  before it);
- **idle and launch gaps**: the rest of a gap, where the GPU waited for the host.

The five parts add up to the iteration's time exactly, so bars of different policies compare.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph, Phase
from ..plan import Mode, Plan
from .spans import Timeline, one_iteration


@dataclass(frozen=True)
class TimeSplit:
    compute_ns: int
    recompute_ns: int
    fault_wait_ns: int
    transfer_wait_ns: int
    idle_ns: int

    @property
    def iteration_ns(self) -> int:
        return self.compute_ns + self.recompute_ns + self.fault_wait_ns + self.transfer_wait_ns + self.idle_ns


# the parts in the order they stack, with the words a legend uses
PARTS = (("compute_ns", "compute"), ("recompute_ns", "recomputing"), ("fault_wait_ns", "waiting on demand faults"),
         ("transfer_wait_ns", "waiting on evictions and prefetches"), ("idle_ns", "idle and launch gaps"))


def time_split(graph: Graph, plan: Plan, timeline: Timeline, own_ns: np.ndarray,
               iteration: int | None = None) -> TimeSplit:
    """How `iteration` (the typical one by default) spent its time; `own_ns[k]` is op k's own time."""
    graph = plan.graph_of(graph)
    it = timeline.typical_iteration() if iteration is None else iteration
    tl, _, next_start = one_iteration(timeline, it)
    order = np.argsort(tl.op_start_ns, kind="stable")
    ops, start, end = tl.op_index[order], tl.op_start_ns[order], tl.op_end_ns[order]
    faulted = tl.op_fault_bytes[order] > 0
    rerun = np.array([op.phase is Phase.RECOMPUTE for op in graph.ops], dtype=bool)[ops]
    length = int(timeline.iteration_ns()[np.unique(timeline.op_iteration).tolist().index(it)])
    awaited = _awaited_ends(plan, tl, len(graph.ops))
    compute = recompute = fault = wait = idle = 0
    # the iteration runs from where its first op began to wait (`Timeline.iteration_ns`)
    first = int((tl.op_start_ns - tl.op_stall_ns).min()) if len(start) else 0
    edge = first  # where the compute stream became free
    # the parts add up to the iteration: an op's end past the next iteration's start (the measured times'
    # rounding puts one a nanosecond over) counts up to that start
    for k, s, e, f, r in zip(ops.tolist(), np.minimum(start, first + length).tolist(),
                             np.minimum(end, first + length).tolist(), faulted.tolist(), rerun.tolist()):
        w, i = _split_gap(edge, s, awaited.get(k))
        wait, idle = wait + w, idle + i
        span = max(0, e - max(s, edge))
        own = min(span, int(own_ns[k])) if f else span
        if r:
            recompute += own
        else:
            compute += own
        fault += span - own
        edge = max(edge, e)
    w, i = _split_gap(edge, max(edge, first + length), awaited.get(len(graph.ops)))
    return TimeSplit(compute, recompute, fault, wait + w, idle + i)


def _awaited_ends(plan: Plan, tl: Timeline, n: int) -> dict[int, int]:
    """For each op (and `n`, the iteration's end): when the last planned transfer due before it ended."""
    out: dict[int, int] = {}
    for i, e in zip(tl.memop_index.tolist(), tl.memop_end_ns.tolist()):
        m = plan.memops[i]
        if m.mode is not Mode.FAULT and 0 <= m.complete_before <= n:
            out[m.complete_before] = max(out.get(m.complete_before, 0), e)
    return out


def _split_gap(free: int, start: int, awaited: int | None) -> tuple[int, int]:
    """A gap on the compute stream from `free` to `start`: (waiting on transfers, idle)."""
    gap = max(0, start - free)
    wait = 0 if awaited is None else min(gap, max(0, awaited - free))
    return wait, gap - wait
