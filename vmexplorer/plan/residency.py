"""Where every tensor is, op by op: one replay that both repairs plans and validates them.

Repair mode is the UVM driver's view: given the transfers a policy planned (possibly none), it adds
what the driver would do on its own — demand faults for tensors an op touches on the host, and LRU
evictions when the device would exceed its capacity. Strict mode adds nothing and reports every
place where a complete plan breaks a rule. Both walk the same state machine, so a repaired plan
always validates.

Each tensor is dead (not created yet, or freed), on the host, on the device, leaving (an offload
under way) or arriving (a prefetch under way); a tensor that is leaving or arriving occupies device
memory until its transfer completes, and one on the host may keep some pages on the device (the
driver evicts page by page). The replay (`_walk`) takes these steps before each op k, and once more
at the iteration's end:

1. `start_offloads`: offloads issued after op k-1 start leaving;
2. `complete_due`: transfers due before op k complete;
3. `start_prefetches`: prefetches issued after op k-1 start arriving;

and then, for op k itself:

4. `bring_in`: op k's tensors come onto the device: created by it, or demand-faulted in;
5. `evict_as_planned`: a complete plan's driver evictions, where repair would have made them;
6. `fit`: the device must hold at most `capacity` bytes while op k runs: repair waits for offloads
   under way and then evicts in LRU order; strict mode reports the excess. What the device then
   holds is what op k runs with (`Replay.occupied_bytes`; their largest is the plan's peak);
7. `release_dead`: after op k, tensors with no later use are freed.

At the end (`finish`) open offloads complete, and what persists on the device is the residency the
next iteration starts from. Both modes follow this order, so a repaired plan replays identically in
strict mode.

The mechanism (`Mechanism`) changes what repair adds, not when. Under `uvm` the driver faults pages
in inside the op's kernels (`Mode.FAULT`) and evicts page by page, only the bytes needed. Under `swap`
there is no driver: a tensor an op needs and does not have is copied in whole before the op, on the
compute stream (`Mode.SYNC` to the device: copied in on demand), and room is made by copying whole
tensors out (`Mode.SYNC` to the host), as a pool of whole allocations must. Where the only room left is
a tensor still arriving, under `uvm` the driver takes its pages (thrashing); under `swap` its copy in
is waited for first, so what is copied out is what arrived.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from ..config import Mechanism
from ..graph import Graph
from ..units import format_bytes
from .mechanisms import mechanism_of
from .plan import Direction, MemOp, Mode, Move, Origin, PlanError

DEAD, HOST, DEVICE, LEAVING, ARRIVING = "dead", "host", "device", "leaving", "arriving"
_STEADY_STATE_ROUNDS = 5


@dataclass
class _Transfer:
    tensor: int
    direction: Direction
    mode: Mode
    issue_after: int
    complete_before: int | None  # None: an offload whose deadline the capacity decides
    origin: Origin
    nbytes: int | None = None  # None until issued: what moves depends on what is resident then

    def frozen(self, n_ops: int) -> MemOp:
        due = n_ops if self.complete_before is None else self.complete_before
        return MemOp(self.tensor, self.direction, self.mode, self.issue_after, due, self.origin,
                     self.nbytes or 0)


Residency = tuple[tuple[int, int], ...]  # (tensor, bytes on the device), persistent tensors only


@dataclass(frozen=True)
class Replay:
    memops: tuple[MemOp, ...]
    resident_at_start: Residency
    occupied_bytes: tuple[int, ...]  # device bytes taken while each op runs
    problems: tuple[str, ...]  # strict mode only

    @property
    def peak(self) -> int:
        return max(self.occupied_bytes, default=0)


def transfers_for_moves(graph: Graph, moves: list[Move]) -> list[_Transfer]:
    """A move's offload deadline is left open; its prefetch is due at the tensor's next use."""
    out = []
    for mv in moves:
        out.append(_Transfer(mv.tensor, Direction.TO_HOST, Mode.ASYNC, mv.offload_after, None, Origin.PLAN))
        if mv.prefetch_after is not None:
            due = next_use(graph, mv.tensor, mv.prefetch_after)
            assert due is not None, "moves are checked before they are replayed"
            out.append(_Transfer(mv.tensor, Direction.TO_DEVICE, Mode.ASYNC, mv.prefetch_after, due,
                                 Origin.PLAN))
    return out


def next_use(graph: Graph, tensor: int, after: int) -> int | None:
    """First op after `after` that touches the tensor, or None."""
    uses = graph.uses[tensor]
    i = bisect_right(uses, after)
    return uses[i] if i < len(uses) else None


def repair(graph: Graph, capacity: int, planned: list[_Transfer], mechanism: Mechanism = Mechanism.UVM) -> Replay:
    """Run iterations until the residency at the start of one repeats; return that iteration."""
    graph = graph.sized_for(capacity)
    start = _initial_residency(graph, capacity)
    seen: list[Residency] = []
    lru: OrderedDict[int, None] = OrderedDict((t, None) for t, _ in start)
    result = None
    for _ in range(_STEADY_STATE_ROUNDS):
        seen.append(start)
        result, end = _walk(graph, capacity, [_copy(t) for t in planned], start, lru, True, mechanism)
        if end == start:
            return result
        if end in seen:  # a cycle longer than one iteration: report the one that starts from here
            return _walk(graph, capacity, [_copy(t) for t in planned], end, lru, True, mechanism)[0]
        start = end
    assert result is not None
    return result


def check(graph: Graph, capacity: int, memops: tuple[MemOp, ...], start: Residency,
          mechanism: Mechanism = Mechanism.UVM) -> Replay:
    graph = graph.sized_for(capacity)
    transfers = [_Transfer(m.tensor, m.direction, m.mode, m.issue_after, m.complete_before, m.origin,
                           m.nbytes) for m in memops]
    lru: OrderedDict[int, None] = OrderedDict((t, None) for t, _ in start)
    result, end = _walk(graph, capacity, transfers, start, lru, False, mechanism)
    if end != start:
        moved = sorted(set(end) ^ set(start))[:3]
        names = ", ".join(graph.tensors[t].name for t, _ in moved)
        problem = f"not a steady state: the iteration ends with other bytes on the device ({names})"
        result = Replay(result.memops, result.resident_at_start, result.occupied_bytes,
                        result.problems + (problem,))
    return result


def _copy(t: _Transfer) -> _Transfer:
    return _Transfer(t.tensor, t.direction, t.mode, t.issue_after, t.complete_before, t.origin, t.nbytes)


def _initial_residency(graph: Graph, capacity: int) -> Residency:
    out, used = [], 0
    for t, tensor in enumerate(graph.tensors):
        if tensor.persistent and used + tensor.nbytes <= capacity:
            out.append((t, tensor.nbytes))
            used += tensor.nbytes
    return tuple(out)


def _walk(graph: Graph, capacity: int, transfers: list[_Transfer], start: Residency,
          lru: OrderedDict[int, None], fix: bool, mechanism: Mechanism) -> tuple[Replay, Residency]:
    """One iteration from `start`: the replay and the residency it ends with. `lru` carries the
    driver's eviction order from one iteration to the next."""
    walk = _Walk(graph, capacity, transfers, _Device.at_start(graph, start, lru), fix, mechanism)
    n = len(graph.ops)
    for k in range(n + 1):
        walk.start_offloads(k)
        walk.complete_due(k)
        walk.start_prefetches(k)
        if k == n:
            break
        walk.bring_in(k)
        walk.evict_as_planned(k)
        walk.fit(k)
        walk.per_op.append(walk.device.occupied)
        walk.release_dead(k)
    memops, end = walk.finish()
    return Replay(memops, start, tuple(walk.per_op), tuple(walk.problems)), end


@dataclass
class _Device:
    """Each tensor's state and its bytes on the device (a tensor on the HOST may keep some there),
    the bytes occupied in all, and the order the driver evicts in (least recently used first)."""

    size: list[int]
    loc: list[str]
    dev: list[int]
    lru: OrderedDict[int, None]
    occupied: int

    @classmethod
    def at_start(cls, graph: Graph, start: Residency, lru: OrderedDict[int, None]) -> _Device:
        size = [t.nbytes for t in graph.tensors]
        loc = [HOST if t.persistent else DEAD for t in graph.tensors]
        dev = [0] * len(graph.tensors)
        for t, nbytes in start:
            dev[t] = nbytes
            loc[t] = DEVICE if nbytes == size[t] else HOST
        return cls(size, loc, dev, lru, sum(dev))

    def missing(self, t: int) -> int:
        """The bytes of the tensor not on the device: what bringing it in moves."""
        return self.size[t] - self.dev[t]

    def fill(self, t: int, state: str) -> None:
        """All of the tensor takes device memory from now on (created, arriving or faulted in)."""
        self.occupied += self.size[t] - self.dev[t]
        self.loc[t], self.dev[t] = state, self.size[t]

    def touch(self, t: int) -> None:
        self.lru[t] = None
        self.lru.move_to_end(t)

    def left(self, t: int) -> None:
        """An offload completed: the tensor's pages are free."""
        self.loc[t] = HOST
        self.occupied -= self.dev[t]
        self.dev[t] = 0
        self.lru.pop(t, None)

    def arrived(self, t: int) -> None:
        self.loc[t] = DEVICE
        self.lru[t] = None

    def can_evict(self, t: int) -> bool:
        """Whether the driver may take pages of the tensor (an arriving one's included)."""
        return self.loc[t] in (DEVICE, HOST, ARRIVING)

    def evict(self, t: int, nbytes: int) -> None:
        self.dev[t] -= nbytes
        self.occupied -= nbytes
        self.loc[t] = HOST
        if self.dev[t] == 0:
            self.lru.pop(t, None)
        else:  # what is left stays evictable, first in line (an arriving tensor was not in the list yet)
            self.lru[t] = None
            self.lru.move_to_end(t, last=False)

    def release(self, t: int) -> None:
        """A temporary past its last use is freed."""
        self.occupied -= self.dev[t]
        self.loc[t], self.dev[t] = DEAD, 0
        self.lru.pop(t, None)

    def settle(self) -> None:
        """At the iteration's end every transfer is complete."""
        for t, state in enumerate(self.loc):
            if state == LEAVING:
                self.occupied -= self.dev[t]
                self.loc[t], self.dev[t] = HOST, 0
            elif state == ARRIVING:
                self.loc[t] = DEVICE


class _Walk:
    """The replay's steps (see the module docstring) over the device's state and the plan's transfers.

    `issued[k]` holds what is issued after op k-1 (k = 0: at the iteration start), `due[k]` what
    must complete before op k; offloads repair leaves open wait in `open_offloads` until room is
    needed or the tensor is prefetched. `out` collects every transfer of the resulting plan."""

    def __init__(self, graph: Graph, capacity: int, transfers: list[_Transfer], device: _Device,
                 fix: bool, mechanism: Mechanism) -> None:
        self.graph, self.capacity, self.device, self.fix = graph, capacity, device, fix
        self.mechanism = mechanism_of(mechanism)
        self.demand = self.mechanism.demand  # how a missing tensor comes in before its op
        self.arriving: dict[int, _Transfer] = {}  # prefetches under way, by tensor
        self.touches = [op.touches for op in graph.ops]  # a property that builds its tuple each time
        n = len(graph.ops)
        self.issued: list[list[_Transfer]] = [[] for _ in range(n + 1)]
        for tr in transfers:
            self.issued[tr.issue_after + 1].append(tr)
        self.due: list[list[_Transfer]] = [[] for _ in range(n + 1)]
        self.open_offloads: dict[int, _Transfer] = {}
        self.out: list[_Transfer] = []
        self.problems: list[str] = []
        self.per_op: list[int] = []

    # --- the steps, in order -----------------------------------------------------------------------

    def start_offloads(self, k: int) -> None:
        """Asynchronous offloads issued after op k-1 start leaving. (Synchronous ones, a complete
        plan's driver evictions, wait until op k's tensors are in: `evict_as_planned`.)"""
        d = self.device
        for tr in self.issued[k]:
            if tr.direction is not Direction.TO_HOST or tr.mode is Mode.SYNC:
                continue
            self.out.append(tr)
            t = tr.tensor
            if d.loc[t] not in (DEVICE, HOST):
                self._problem(f"{self._tensor(t)} is offloaded after {self._op(k - 1)} but is {d.loc[t]} there")
                continue
            self._moving(tr, d.dev[t])
            d.loc[t] = LEAVING
            if tr.complete_before is None:
                self.open_offloads[t] = tr
            else:
                self.due[tr.complete_before].append(tr)

    def complete_due(self, k: int) -> None:
        for tr in self.due[k]:
            self._complete(tr)

    def start_prefetches(self, k: int) -> None:
        """Prefetches issued after op k-1 start arriving, once an offload of their tensor still under
        way has finished (the copy stream runs in order)."""
        d = self.device
        for tr in self.issued[k]:
            if tr.direction is not Direction.TO_DEVICE or tr.mode is not Mode.ASYNC:
                continue
            self.out.append(tr)
            t = tr.tensor
            if t in self.open_offloads:
                self._close(self.open_offloads[t], k)
            if d.loc[t] != HOST:
                self._problem(f"{self._tensor(t)} is prefetched after {self._op(k - 1)} but is {d.loc[t]} there")
                self._moving(tr, 0)
                continue
            self._moving(tr, d.missing(t))
            d.fill(t, ARRIVING)
            self.arriving[t] = tr
            if tr.complete_before is None or tr.complete_before <= k:
                self._complete(tr)
            else:
                self.due[tr.complete_before].append(tr)

    def bring_in(self, k: int) -> None:
        """Op k's tensors come onto the device, each becoming the most recently used; a planned
        fault must be for a tensor on the host that the op touches."""
        op = self.graph.ops[k]
        touches = self.touches[k]
        faults = {tr.tensor: tr for tr in self.issued[k]
                  if tr.mode is self.demand and tr.direction is Direction.TO_DEVICE}
        for t in touches:
            self._bring_in_tensor(k, t, faults)
            self.device.touch(t)
        for t in faults.keys() - set(touches):
            self._problem(f"{self._tensor(t)} is faulted in at {op.name}, which does not touch it")

    def evict_as_planned(self, k: int) -> None:
        """A complete plan's driver evictions before op k: each must take bytes the tensor has on
        the device, and not of a tensor the op uses."""
        d = self.device
        touches = self.touches[k]
        for tr in self.issued[k]:
            if tr.mode is not Mode.SYNC or tr.direction is not Direction.TO_HOST:
                continue
            t, nbytes = tr.tensor, tr.nbytes or 0
            # as many bytes as the mechanism takes from it to make that room (a pool: the whole tensor)
            if d.can_evict(t) and 0 < nbytes == self.mechanism.evicted_bytes(d.dev[t], nbytes) and t not in touches:
                self._evict(t, nbytes, k, tr.origin)
            else:
                self.out.append(tr)
                self._problem(f"{self._tensor(t)} is evicted before {self.graph.ops[k].name} but has {d.dev[t]} "
                              f"bytes there, not {tr.nbytes}, or the op uses it")

    def fit(self, k: int) -> None:
        """Op k runs with at most `capacity` bytes on the device: repair makes room, strict mode
        reports a plan that does not."""
        occupied = self.device.occupied
        if occupied <= self.capacity:
            return
        if self.fix:
            self._wait_for_offloads(k)
            self._evict_lru(k)
        else:
            self._problem(f"{self.graph.ops[k].name} runs with {format_bytes(occupied)} on the device, above "
                          f"the capacity {format_bytes(self.capacity)}")

    def release_dead(self, k: int) -> None:
        graph = self.graph
        for t in self.touches[k]:
            if graph.last_use[t] == k and not graph.tensors[t].persistent:
                self.device.release(t)

    def finish(self) -> tuple[tuple[MemOp, ...], Residency]:
        """Open offloads complete by the iteration's end, and so does every transfer: the plan's
        memory operations in order, and what stays on the device for the next iteration."""
        n = len(self.graph.ops)
        for tr in list(self.open_offloads.values()):
            self._close(tr, n)
        d = self.device
        d.settle()
        end = tuple((t, d.dev[t]) for t, tensor in enumerate(self.graph.tensors) if tensor.persistent and d.dev[t])
        memops = tuple(sorted((tr.frozen(n) for tr in self.out),
                              key=lambda m: (m.issue_after, m.direction != Direction.TO_HOST, m.tensor)))
        return memops, end

    # --- parts of the steps ------------------------------------------------------------------------

    def _bring_in_tensor(self, k: int, t: int, faults: dict[int, _Transfer]) -> None:
        d, op = self.device, self.graph.ops[k]
        state = d.loc[t]
        if t in faults and state != HOST:
            self._problem(f"{self._tensor(t)} is faulted in at {op.name} but is {state} there")
        if self.graph.tensors[t].producer == k and state == DEAD:
            d.fill(t, DEVICE)
        elif state == HOST and (self.fix or t in faults):
            tr = faults.get(t) or _Transfer(t, Direction.TO_DEVICE, self.demand, k - 1, k, Origin.DRIVER)
            self.out.append(tr)
            self._moving(tr, d.missing(t))
            d.fill(t, DEVICE)
        elif state != DEVICE:
            if self.fix:
                raise PlanError(f"{op.name} touches {self._tensor(t)} while it is {state}; "
                                "a planned transfer overlaps a use of its tensor")
            self._problem(f"{op.name} touches {self._tensor(t)}, which is {state} there")

    def _wait_for_offloads(self, k: int) -> None:
        """Op k waits for offloads already under way, the earliest issued first, until it fits."""
        for tr in sorted(self.open_offloads.values(), key=lambda tr: tr.issue_after):
            if self.device.occupied <= self.capacity:
                break
            self._close(tr, k)

    def _evict_lru(self, k: int) -> None:
        """The driver evicts page by page, taking only the bytes needed, never of op k's tensors."""
        d, capacity, op = self.device, self.capacity, self.graph.ops[k]
        touches = self.touches[k]
        victims = self._victims(k)
        while d.occupied > capacity:
            victim = next(victims, None)
            if victim is None:
                raise PlanError(f"{op.name} needs {format_bytes(d.occupied)} on the device with what is in "
                                f"flight, above the capacity {format_bytes(capacity)}")
            if d.can_evict(victim) and d.dev[victim] and victim not in touches:
                if self.mechanism.arriving_lands_first and d.loc[victim] == ARRIVING:
                    self._close(self.arriving[victim], k)
                self._evict(victim, self.mechanism.evicted_bytes(d.dev[victim], d.occupied - capacity), k,
                            Origin.DRIVER)

    def _victims(self, k: int) -> Iterator[int]:
        """LRU order; prefetches still arriving only as a last resort, the latest needed first: the
        driver then evicts what was just brought in and the op that needs it faults it back
        (thrashing)."""
        d = self.device
        arriving = sorted((t for t, s in enumerate(d.loc) if s == ARRIVING),
                          key=lambda t: -next_use(self.graph, t, k - 1))  # type: ignore[operator]
        return iter(list(d.lru) + arriving)

    def _evict(self, t: int, nbytes: int, k: int, origin: Origin) -> None:
        self.out.append(_Transfer(t, Direction.TO_HOST, Mode.SYNC, k - 1, k, origin, nbytes))
        self.device.evict(t, nbytes)

    def _complete(self, tr: _Transfer) -> None:
        """A transfer completes: unless something else moved its tensor in the meantime."""
        t = tr.tensor
        if tr.direction is Direction.TO_HOST and self.device.loc[t] == LEAVING:
            self.device.left(t)
        elif tr.direction is Direction.TO_DEVICE and self.device.loc[t] == ARRIVING:
            self.device.arrived(t)

    def _close(self, tr: _Transfer, k: int) -> None:
        """An open offload gets its deadline: op k waits for it."""
        tr.complete_before = k
        self.open_offloads.pop(tr.tensor, None)
        self._complete(tr)

    def _moving(self, tr: _Transfer, nbytes: int) -> None:
        """What a transfer moves is what is there when it is issued; a complete plan must say so."""
        if tr.nbytes is None:
            tr.nbytes = nbytes
        elif tr.nbytes != nbytes:
            self._problem(f"{self._tensor(tr.tensor)} moves {tr.nbytes} bytes {tr.direction.value} after "
                          f"{self._op(tr.issue_after)}, but {nbytes} would move there")

    def _problem(self, text: str) -> None:
        self.problems.append(text)

    def _tensor(self, t: int) -> str:
        return self.graph.tensors[t].name

    def _op(self, k: int) -> str:
        n = len(self.graph.ops)
        return self.graph.ops[k].name if 0 <= k < n else ("iteration start" if k < 0 else "iteration end")
