"""The executor's program: a plan turned into host-order steps on three streams, as data.

The executor is a loop over these steps; everything about ordering is decided here, with no CUDA, so
it is tested on a CPU. Each step runs on one stream, first waits for events recorded by earlier steps,
then records its own `done` event. Following docs/design.md ("Device facts"), an asynchronous memory
call comes as late in host order as it can (right before the op that waits for it): the call blocks the
host for about its transfer, and by then the GPU has every op up to that one queued. A swap plan with a
copy order (`plan.copies`; a pinned copy's call does not block) has each copy called as early as that
order lets it instead.

Under managed memory the dead bytes get steps of their own (`memory.dead_bytes` says which): a discard
after the op a tensor dies at, on a stream of its own so compute never waits for it, and a populate
before the op that creates a tensor on bytes discarded earlier, on another, issued once the op two
before has run (the call then never blocks the host, and overlaps the op before), which that op waits
for. The `Ledger` keeps the bytes each tensor has on the device as these steps are issued.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from ..graph import Graph
from ..plan import Direction, MemOp, Mode, Plan, copies
from ..plan.mechanisms import mechanism_of
from .memory import DeadBytes, Range

PAGE = 64 << 10  # evict partial ranges on page-group boundaries


class Stream(StrEnum):
    COMPUTE = "compute"
    TO_HOST = "to_host"
    TO_DEVICE = "to_device"
    DISCARD = "discard"
    POPULATE = "populate"


class StepKind(StrEnum):
    OP = "op"  # run graph op `index`
    COPY = "copy"  # cudaMemPrefetchAsync of memop `index` on its copy stream
    EVICT = "evict"  # a driver eviction (memop `index`) on the compute stream, before the next op; under
    # swap a synchronous copy out making room
    COPY_IN = "copy_in"  # under swap, a synchronous copy in of memop `index` (on demand) on the compute stream
    FAULT = "fault"  # memop `index` happens inside the next op's kernels: nothing to issue, only recorded
    DISCARD = "discard"  # after op `index` (-1: as the iteration begins): `tensors` died; discard `ranges`
    POPULATE = "populate"  # before op `index`: cudaMemDiscardAndPrefetchBatchAsync of `ranges` to the device


Event = tuple[str, int]  # ("op", k), ("memop", i), ("discard", k) or ("populate", k): recorded when done
_EVENT = {StepKind.OP: "op", StepKind.DISCARD: "discard", StepKind.POPULATE: "populate"}


@dataclass(frozen=True)
class Step:
    kind: StepKind
    index: int
    stream: Stream
    waits: tuple[Event, ...]
    tensors: tuple[int, ...] = ()  # a discard's dead tensors, a populate's new ones
    ranges: tuple[Range, ...] = ()  # a discard's or populate's bytes in the pool

    @property
    def done(self) -> Event:
        return (_EVENT.get(self.kind, "memop"), self.index)


def schedule(graph: Graph, plan: Plan, dead: DeadBytes | None = None,
             pool: Mapping[Event, tuple[Event, ...]] | None = None) -> tuple[Step, ...]:
    """One iteration's steps in host order; with `dead`, the discards and populates of dead bytes too.
    `pool` (swap): per step that puts a tensor in the pool, the ends of the stays whose bytes it takes over
    (`swap.SwapPool.waits`); those its stream's order does not already imply become waits."""
    graph = plan.graph_of(graph)
    n = len(graph.ops)
    mechanism = mechanism_of(plan)
    if mechanism.ordered_copies and plan.copy_order:
        return _ordered(graph, plan, pool or {})
    due: list[list[int]] = [[] for _ in range(n + 1)]
    for i, m in enumerate(plan.memops):
        due[m.complete_before].append(i)
    last_move: dict[int, Event] = {}  # the latest memory operation issued on each tensor
    program = _Program(pool or {})
    evictions: list[list[int]] = [[] for _ in range(n + 1)]  # driver evictions made before each op
    for i, m in enumerate(plan.memops):
        if m.mode is Mode.SYNC and mechanism.waits_for_sync_room:  # else the pool's waits say which room
            evictions[m.complete_before].append(i)
    room = copies.room_for(plan)
    if dead is not None and dead.kept:  # the host has read them: dead now
        program.append(Step(StepKind.DISCARD, -1, Stream.DISCARD, (), dead.kept, dead.kept_ranges))
    for k in range(n + 1):
        ready: list[Event] = []
        for i in mechanism.order_due(plan.memops, due[k], k):
            m = plan.memops[i]
            after: list[Event] = [("op", m.issue_after)] if m.issue_after >= 0 else []
            if m.tensor in last_move:  # an offload and the prefetch of the same tensor never overlap
                after.append(last_move[m.tensor])
            if m.mode is Mode.ASYNC:
                stream = Stream.TO_HOST if m.direction is Direction.TO_HOST else Stream.TO_DEVICE
                if m.direction is Direction.TO_DEVICE:  # it lands in the room made before the next op
                    after += [("memop", j) for j in evictions[m.issue_after + 1] + room[i]]
                program.add(StepKind.COPY, i, stream, after)
                ready.append(("memop", i))
            elif m.mode is Mode.SYNC:
                kind = StepKind.COPY_IN if m.direction is Direction.TO_DEVICE else StepKind.EVICT
                program.add(kind, i, Stream.COMPUTE, [e for e in after if e[0] == "memop"])
            else:
                program.append(Step(StepKind.FAULT, i, Stream.COMPUTE, ()))
            last_move[m.tensor] = ("memop", i)
        if k < n:
            if dead is not None and dead.populate_before[k]:
                program.append(_populate(graph, dead, k))
                ready.append(("populate", k))
            program.add(StepKind.OP, k, Stream.COMPUTE, ready)
            if dead is not None:
                for step in _discard(dead, k, last_move):
                    program.append(step)
    return tuple(program.steps)


def _ordered(graph: Graph, plan: Plan, pool: Mapping[Event, tuple[Event, ...]]) -> tuple[Step, ...]:
    """A swap plan's steps with its copy order (`plan.copies`): each stream's copies called in that order,
    each as soon as the op it is issued after is enqueued, the copy before it on its stream is called and
    the steps it waits for (the same tensor's copy before it, the ends of the stays whose pool bytes it
    takes) are placed; a copy waiting for a step not yet placed holds back the copies behind it on its
    stream. The synchronous copies and the ops keep the executor's places."""
    n, memops = len(graph.ops), plan.memops
    program = _Program(pool)
    due_sync: list[list[int]] = [[] for _ in range(n + 1)]
    due_async: list[list[Event]] = [[] for _ in range(n + 1)]
    for i, m in enumerate(memops):
        if m.mode is Mode.SYNC:
            due_sync[m.complete_before].append(i)
        else:
            due_async[m.complete_before].append(("memop", i))
    queues = {Stream.TO_HOST: copies.asynchronous(plan, Direction.TO_HOST),
              Stream.TO_DEVICE: copies.asynchronous(plan, Direction.TO_DEVICE)}
    room = {i: [("memop", j) for j in out] for i, out in enumerate(copies.room_for(plan))}
    previous: dict[int, Event] = {}  # each memory operation -> the one before it on its tensor
    last: dict[int, Event] = {}
    for i in sorted(range(len(memops)), key=lambda i: (memops[i].issue_after, memops[i].complete_before,
                                                       memops[i].mode is Mode.SYNC, i)):
        if memops[i].tensor in last:
            previous[i] = last[memops[i].tensor]
        last[memops[i].tensor] = ("memop", i)

    def call(k: int) -> None:  # every copy whose turn has come by op k
        called = True
        while called:
            called = False
            for stream, queue in queues.items():
                while queue and memops[queue[0]].issue_after < k and all(
                        e in program.where for e in (*pool.get(("memop", queue[0]), ()), *room[queue[0]],
                                                     *([previous[queue[0]]] if queue[0] in previous else []))):
                    i = queue.pop(0)
                    waits = [("op", memops[i].issue_after)] if memops[i].issue_after >= 0 else []
                    program.add(StepKind.COPY, i, stream,
                                waits + ([previous[i]] if i in previous else []) + room[i])
                    called = True

    for k in range(n + 1):
        call(k)
        for i in mechanism_of(plan).order_due(plan.memops, due_sync[k], k):
            kind = StepKind.COPY_IN if memops[i].direction is Direction.TO_DEVICE else StepKind.EVICT
            program.add(kind, i, Stream.COMPUTE, [previous[i]] if i in previous else [])
            call(k)
        if k < n:
            late = [e for e in due_async[k] if e not in program.where]
            if late:  # validate_plan refuses an order calling a copy after the op waiting for it
                raise ValueError(f"op {k} waits for {late[0]}, which the copy order has not called yet")
            program.add(StepKind.OP, k, Stream.COMPUTE, due_async[k])
    return tuple(program.steps)


class _Program:
    """The steps in host order, each added with its waits and, under swap, its pool waits."""

    def __init__(self, pool: Mapping[Event, tuple[Event, ...]]) -> None:
        self.pool = pool
        self.steps: list[Step] = []
        self.where: dict[Event, tuple[Stream, int]] = {}  # each step's stream and position

    def append(self, step: Step) -> None:
        self.where[step.done] = (step.stream, len(self.steps))
        self.steps.append(step)

    def add(self, kind: StepKind, index: int, stream: Stream, waits: list[Event]) -> None:
        early = [e for e in waits if e not in self.where]
        if early:  # its event would be last iteration's, or none: the step would not wait at all
            raise ValueError(f"a step waits for {early[0]}, which comes after it in host order")
        done = Step(kind, index, stream, ()).done
        if done in self.pool:
            waits = waits + self._not_implied(self.pool[done], stream, waits)
        self.append(Step(kind, index, stream, tuple(dict.fromkeys(waits))))

    def _not_implied(self, ends: tuple[Event, ...], stream: Stream, waits: list[Event]) -> list[Event]:
        """Of the ends a step must wait for, those not implied already: a step follows everything before it
        on its own stream, and everything on the compute stream up to an op it waits for."""
        missing = [e for e in ends if e not in self.where]
        if missing:
            raise ValueError(f"a step waits for {missing[0]}, which comes after it: the pool's bytes would "
                             "change hands out of order")
        reach = max((self.where[e][1] for e in waits if e in self.where and self.where[e][0] is Stream.COMPUTE),
                    default=-1)
        return [e for e in ends if self.where[e][0] is not stream
                and not (self.where[e][0] is Stream.COMPUTE and self.where[e][1] <= reach)]


def _populate(graph: Graph, dead: DeadBytes, k: int) -> Step:
    # after the discards that freed the bytes, and once op k-2 has run: never while an op uses them
    freed = sorted({op for _, _, op in dead.populate_before[k] if op >= 0 or dead.kept})
    waits = [("op", k - 2)] * (k >= 2) + [("discard", op) for op in freed]
    new = tuple(t for t, tensor in enumerate(graph.tensors) if tensor.producer == k)
    return Step(StepKind.POPULATE, k, Stream.POPULATE, tuple(waits), new,
                tuple((s, e) for s, e, _ in dead.populate_before[k]))


def _discard(dead: DeadBytes, k: int, last_move: dict[int, Event]) -> list[Step]:
    gone = dead.dying[k]
    if not gone:
        return []
    waits = [("op", k)] + [last_move[t] for t in gone if t in last_move]
    return [Step(StepKind.DISCARD, k, Stream.DISCARD, tuple(dict.fromkeys(waits)), gone, dead.discard_after[k])]


class Ledger:
    """The bytes of each tensor the executor has put on the device, kept as it issues steps in host order:
    an op brings its tensors in whole, a prefetch brings a tensor in, a driver eviction takes what it says
    off the tensor's end, an offload takes all of it, a populate brings new tensors in and a discard
    leaves dead ones nothing. Managed memory's residency cannot be read back (the driver keeps its
    physical chunks), so this is what the executor's residency rests on. With `release_dead` a temporary
    leaves after its last op, but for those `kept` (its bytes are taken over in place, or discarded); `held`
    adds, per op, the dead bytes left waiting on the device for their next tensor."""

    def __init__(self, graph: Graph, start: Sequence[int], release_dead: bool = False,
                 kept: Collection[int] = (), held: Sequence[int] | None = None) -> None:
        self.graph = graph
        self.bytes = list(start)
        self.total = sum(self.bytes)
        self.peak = self.total  # the most bytes on the device while an op ran
        self.held = held  # per op, dead bytes waiting on the device for their next tensor (`memory.DeadBytes`)
        self.dying: list[list[int]] = [[] for _ in graph.ops]
        if release_dead:
            for t, tensor in enumerate(graph.tensors):
                if not tensor.persistent and t not in kept:
                    self.dying[graph.last_use[t]].append(t)

    def set(self, tensor: int, nbytes: int) -> None:
        self.total += nbytes - self.bytes[tensor]
        self.bytes[tensor] = nbytes

    def apply(self, step: Step, plan: Plan) -> tuple[int, int]:
        """Account for one step; for a copy or eviction, (offset into the tensor, bytes) to move."""
        tensors = self.graph.tensors
        if step.kind is StepKind.OP:
            for t in self.graph.ops[step.index].touches:
                self.set(t, tensors[t].nbytes)
            self.peak = max(self.peak, self.total + (self.held[step.index] if self.held is not None else 0))
            for t in self.dying[step.index]:
                self.set(t, 0)
        elif step.kind in (StepKind.DISCARD, StepKind.POPULATE):
            for t in step.tensors:
                self.set(t, 0 if step.kind is StepKind.DISCARD else tensors[t].nbytes)
        elif step.kind is not StepKind.FAULT:
            return self._move(plan.memops[step.index])
        return 0, 0

    def _move(self, m: MemOp) -> tuple[int, int]:
        have = self.bytes[m.tensor]
        if m.direction is Direction.TO_DEVICE:
            self.set(m.tensor, self.graph.tensors[m.tensor].nbytes)
            return 0, self.graph.tensors[m.tensor].nbytes
        keep = max(0, have - m.nbytes) // PAGE * PAGE if m.mode is Mode.SYNC else 0
        self.set(m.tensor, keep)  # the driver evicts the least recently used pages: the tail here
        return keep, have - keep


def room_per_op(graph: Graph, plan: Plan, kept: Collection[int] = ()) -> list[int]:
    """The bytes the device has beyond its live tensors while each op runs: the capacity less what the
    ledger holds then, dead tensors holding nothing. Dead bytes may wait there for their next tensor."""
    graph = plan.graph_of(graph)
    start = dict(plan.resident_at_start)
    ledger = Ledger(graph, [start.get(t, 0) if tensor.persistent else 0 for t, tensor in enumerate(graph.tensors)])
    room = [0] * len(graph.ops)
    for step in schedule(graph, plan):
        ledger.apply(step, plan)
        if step.kind is StepKind.OP:
            room[step.index] = max(plan.capacity - ledger.total, 0)
            for t in graph.ops[step.index].touches:
                if not graph.tensors[t].persistent and graph.last_use[t] == step.index and t not in kept:
                    ledger.set(t, 0)
    return room
