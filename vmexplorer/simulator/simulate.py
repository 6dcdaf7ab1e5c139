"""Predict the timeline of any plan from a cost model: what a run would look like, with no GPU.

The model follows the executor's strategy (docs/design.md, "The simulator"): the host thread enqueues
ops far ahead of the GPU and makes each asynchronous memory call just before it enqueues the op that
waits for it, so the GPU keeps queued work while a call blocks the host. Three streams: compute, and one
copy stream per direction. A copy starts once the op it is issued after has finished, its stream is free
and the host has made the call; the call blocks the host for `host_block` of the transfer. Driver
evictions run on the compute stream before the op that needed the room; demand faults lengthen the op
whose kernels take them.

Where the cost model serialises the directions (`CostModel.serialises_directions`: the UVM driver; on
the H200 an eviction and a prefetch issued together on two streams took their sum) the driver's
migration calls, asynchronous copies and driver evictions alike, go through one engine in the order
the host issues them: each starts only once the one issued before it has ended, whichever its
direction. Demand faults stay beside them, lengthening their op only: in the H100 samples an op's
faults came in at their usual rate while asynchronous evictions ran (alexnet b256 autovm at 50%).
Otherwise the two copy streams run at once, as pinned copies on a copy engine each way do.

A plan's mechanism picks the rates (`CostModel.for_mechanism`). Under `swap` the copies are pinned
cudaMemcpyAsync: the two directions overlap, no call blocks the host, and what the replay forced (a
tensor copied in on demand, room made by copying out) runs synchronously before its op: the op waits
for it, and it takes its direction's copy engine in turn with the copies already queued there, so no
direction ever moves faster than its rate. A tensor copied in and straight back out before any op touches
it (`plan.stays`: the repair making room while its copy in was still arriving) moves nothing, as in the
engine: both copies take no time. A swap plan with a copy order (`plan.copies`) has its copies called
in that order instead, each as soon as the host has enqueued the op it is issued after (and the copy
before it on its stream): a copy then starts once that op has ended, its stream is free and, for a copy
in, the room made before the next op is there.
"""

from __future__ import annotations

import numpy as np

from ..graph import Graph
from ..graph.recompute import RERUN
from ..plan import Direction, MemOp, Mode, Plan, PlanError
from ..plan.copies import asynchronous, call_before, room_for
from ..plan.mechanisms import MechanismSpec, mechanism_of
from ..plan.stays import elided
from ..records.spans import MAX_NS, Timeline, resident_curve
from .costmodel import H100_DEFAULT, CostModel


def simulate(graph: Graph, plan: Plan, cost: CostModel | None = None, executed: Graph | None = None) -> Timeline:
    """The timeline of `plan` on `graph` under `cost`. `executed`: the graph a run executes
    (`plan.pool.executed_graph`: its pool may give a convolution less workspace than `graph` does), whose
    workspaces time the convolutions; `graph` itself if None."""
    graph = plan.graph_of(graph)
    walk = _Walk(graph, plan, (cost or H100_DEFAULT).for_mechanism(plan.mechanism), executed)
    n = len(graph.ops)
    for k in range(n + 1):
        arrived = max(walk.gpu, walk.host)  # op k-1 is done and the host has reached op k
        # under swap a tensor the replay copies out as its copy in lands goes out only once it is in
        early = (_landing_then_out(plan.memops, walk.due_async[k], walk.due_sync[k])
                 if walk.mechanism.arriving_lands_first else [])
        t = walk.land_early(k, early, arrived)
        t = walk.synchronous(k, t)
        t = walk.land_due(k, early, t)
        if k == n:
            break
        walk.run_op(k, arrived, t)
    return walk.timeline()


class _Walk:
    """The simulation's steps, op by op, over the host's and the GPU's clocks and the spans found so far.

    `host` is when the host has made its last call, `gpu` when the last op ended; `room[k]` when the
    driver's evictions before op k have made their room. `due_async[k]`, `due_sync[k]` and `faults[k]`
    hold the memory operations that complete before op k, by mode."""

    def __init__(self, graph: Graph, plan: Plan, cost: CostModel, executed: Graph | None = None) -> None:
        self.graph, self.plan, self.cost = graph, plan, cost
        self.mechanism = mechanism_of(plan)
        self.ops, self.memops = ops, memops = graph.ops, plan.memops
        n = len(ops)
        self.compute = cost.op_times_ns(executed or graph)
        self.gaps = [cost.op_gap_ns.get(op.name.removesuffix(RERUN), 0.0) for op in ops]
        self.due_async: list[list[int]] = [[] for _ in range(n + 1)]
        self.due_sync: list[list[int]] = [[] for _ in range(n + 1)]
        self.faults: list[list[int]] = [[] for _ in range(n + 1)]
        for i, m in enumerate(memops):
            {Mode.ASYNC: self.due_async, Mode.SYNC: self.due_sync,
             Mode.FAULT: self.faults}[m.mode][m.complete_before].append(i)
        self.op_start, self.op_end = np.zeros(n), np.zeros(n)
        self.op_stall, self.op_fault = np.zeros(n), np.zeros(n, dtype=np.int64)
        self.room = np.zeros(n + 1)
        self.mem_start, self.mem_end = np.zeros(len(memops)), np.zeros(len(memops))
        self.host = self.gpu = 0.0
        self.engine = _Engine(cost.serialises_directions)
        self.skipped = elided(graph, plan)
        # a stored copy order (swap): each stream's queue of copies, each called before op `calls[i]`
        self.queues = {d: asynchronous(plan, d) for d in Direction} if plan.copy_order else {}
        self.calls = call_before(plan) if plan.copy_order else {}
        self.done = np.zeros(len(memops), dtype=bool)  # memory operations simulated (called, in a stored order)
        self.room_for = room_for(plan)

    # --- the steps before each op, in order ----------------------------------------------------------

    def land_early(self, k: int, early: list[int], t: float) -> float:
        """The copies in of `early`, before op k's room is made: when the last of them has landed."""
        if self.queues:
            self.call(k, early, False)
            # one held back on its stream behind a copy in that waits for this room is not waited for: its
            # copy out goes ahead, optimistic (no recorded order has such a case; `schedule` refuses one whose
            # steps would wait for a later step)
            return max([t, *(self.mem_end[i] for i in early if self.done[i])])
        for i in early:
            t = self.copy(i, t, self.memops[i].issue_after + 1 < k)
        return t

    def synchronous(self, k: int, t: float) -> float:
        """The synchronous transfers due before op k (`_sync`): the copies out, whose end is op k's room,
        then the copies in."""
        t = self.room[k] = _sync(self.engine, self.cost, self.memops, self.due_sync[k], Direction.TO_HOST, t,
                                 self.mechanism, self.mem_start, self.mem_end, self.skipped)
        return _sync(self.engine, self.cost, self.memops, self.due_sync[k], Direction.TO_DEVICE, t, self.mechanism,
                     self.mem_start, self.mem_end, self.skipped)

    def land_due(self, k: int, early: list[int], t: float) -> float:
        """The rest of the asynchronous copies due before op k, once its room is known: when op k may start."""
        if self.queues:
            self.call(k, early, True)
            if not self.done[self.due_async[k]].all():  # validate_plan refuses such an order
                raise PlanError(f"the copy order has not called every copy op {k} waits for")
            return max([t, *(self.mem_end[i] for i in self.due_async[k])])
        for i in sorted(set(self.due_async[k]) - set(early), key=lambda i: (self.memops[i].issue_after, i)):
            t = self.copy(i, t, True) if not self.done[i] else max(t, self.mem_end[i])
        return t

    def run_op(self, k: int, arrived: float, t: float) -> None:
        """Op k starts at `t` (once its gap after op k-1 has passed and the host has enqueued it) and runs
        its compute and its demand faults; the host goes on to launch the next."""
        t = max(t, self.host, arrived + self.gaps[k])
        fault_bytes = sum(self.memops[i].nbytes for i in self.faults[k])
        self.op_stall[k], self.op_fault[k], self.op_start[k] = t - arrived, fault_bytes, t
        self.gpu = self.op_end[k] = t + self.compute[k] + self.cost.fault_ns(fault_bytes, self.ops[k].kind)
        for i in self.faults[k]:
            self.mem_start[i], self.mem_end[i] = t, self.gpu
        self.host += self.cost.launch_ns

    # --- the copies ----------------------------------------------------------------------------------

    def copy(self, i: int, t: float, room_known: bool) -> float:
        """An asynchronous copy due before op k, on its direction's stream: when op k may start."""
        m = self.memops[i]
        to_device = m.direction is Direction.TO_DEVICE
        after = self.op_end[m.issue_after] if m.issue_after >= 0 else 0.0
        self.done[i] = True
        if i in self.skipped:
            self.mem_start[i] = self.mem_end[i] = max(after, self.host)
            return t
        if to_device:  # it lands in the room made before the next op: the copies out due then have ended
            for j in self.room_for[i]:
                if not self.done[j] and not self.queues:
                    self.copy(j, t, True)
            after = max([after, *(self.mem_end[j] for j in self.room_for[i])])
            if room_known:
                after = max(after, self.room[m.issue_after + 1])
        start, end = self.engine.run(max(after, self.host), self.cost.copy_ns(m.nbytes, to_device), m.direction)
        self.mem_start[i], self.mem_end[i] = start, end
        self.host += self.cost.host_block * max(0.0, end - self.host)
        return max(t, end)

    def call(self, k: int, early: list[int], room_known: bool) -> None:
        """In a stored order, the copies each stream's queue calls before op k: the host is there, and
        their issue ops have ended. Until op k's room is known, a copy in issued right before op k waits
        (it lands in that room) unless the replay takes it straight back out."""
        for d, queue in self.queues.items():
            while queue and self.calls[queue[0]] <= k:
                i = queue[0]
                if d is Direction.TO_DEVICE and (not room_known and self.memops[i].issue_after == k - 1
                                                 and i not in early or not self.done[self.room_for[i]].all()):
                    break
                self.copy(i, 0.0, self.memops[i].issue_after + 1 < k or room_known)
                queue.pop(0)

    # --- the result ----------------------------------------------------------------------------------

    def timeline(self) -> Timeline:
        n, memops = len(self.ops), self.memops
        last = max(self.gpu, self.host, float(self.mem_end.max(initial=0.0)))
        if not last < MAX_NS:  # a cost model far too slow for the plan: say so rather than wrap around
            raise PlanError(f"with this cost model the plan's iteration would last {last / 8.64e13:.3g} days, "
                            "beyond the 104 a timeline holds; check the cost model's rates")
        resident_t, resident = resident_curve(self.graph, self.plan, self.op_start, self.op_end, self.mem_start,
                                              self.mem_end, self.skipped)
        i64 = lambda a: np.rint(a).astype(np.int64)  # noqa: E731
        return Timeline(
            source="simulated",
            op_iteration=np.zeros(n, dtype=np.int64), op_index=np.arange(n, dtype=np.int64),
            op_start_ns=i64(self.op_start), op_end_ns=i64(self.op_end), op_stall_ns=i64(self.op_stall),
            op_fault_bytes=self.op_fault,
            memop_iteration=np.zeros(len(memops), dtype=np.int64),
            memop_index=np.arange(len(memops), dtype=np.int64),
            memop_start_ns=i64(self.mem_start), memop_end_ns=i64(self.mem_end),
            resident_t_ns=i64(resident_t), resident_bytes=resident,
        )


def _landing_then_out(memops: tuple[MemOp, ...], due_async: list[int], due_sync: list[int]) -> list[int]:
    """The copies in due before an op whose tensors are copied out before it (the replay made room by
    waiting for them), in the order they were issued."""
    out = {memops[i].tensor for i in due_sync if memops[i].direction is Direction.TO_HOST}
    return sorted((i for i in due_async if memops[i].direction is Direction.TO_DEVICE and memops[i].tensor in out),
                  key=lambda i: (memops[i].issue_after, i))


def _sync(engine: _Engine, cost: CostModel, memops: tuple[MemOp, ...], due: list[int], direction: Direction,
          t: float, mechanism: MechanismSpec, mem_start: np.ndarray, mem_end: np.ndarray,
          skipped: frozenset[int]) -> float:
    """The synchronous transfers of one direction due before an op, one after another from `t` (copies
    out make the room, copies in on demand follow); when the last ends. Each runs where the mechanism
    says (`sync_stream`): pinned copies take their direction's copy engine in turn; the uvm driver's
    evictions order themselves on the compute stream."""
    for i in due:
        m = memops[i]
        if i in skipped and m.direction is direction:
            mem_start[i] = mem_end[i] = t
        elif m.direction is direction:
            to_device = direction is Direction.TO_DEVICE
            where = mechanism.sync_stream(direction)
            mem_start[i], mem_end[i] = engine.run(t, cost.copy_ns(m.nbytes, to_device), where)
            t = mem_end[i]
    return t


class _Engine:
    """When migration calls run: one copy at a time on each direction's copy stream and, where the cost
    model serialises the directions, one call at a time in all, in the order they are issued."""

    def __init__(self, serialised: bool) -> None:
        self.serialised = serialised
        self.stream_free = {Direction.TO_DEVICE: 0.0, Direction.TO_HOST: 0.0}
        self.free = 0.0  # when the shared engine has ended the last migration issued to it

    def run(self, ready: float, ns: float, stream: Direction | None = None) -> tuple[float, float]:
        """The start and end of a migration of `ns` that could start at `ready`, on a copy stream or
        (None) the compute stream, which orders it by itself."""
        start = ready if stream is None else max(ready, self.stream_free[stream])
        if self.serialised:
            start = max(start, self.free)
            self.free = start + ns
        if stream is not None:
            self.stream_free[stream] = start + ns
        return start, start + ns
