"""Where every tensor is, op by op: one replay that both repairs plans and validates them.

Repair mode is the UVM driver's view: given the transfers a policy planned (possibly none), it adds
what the driver would do on its own — demand faults for tensors an op touches on the host, and LRU
evictions when the device would exceed its capacity. Strict mode adds nothing and reports every
place where a complete plan breaks a rule. Both walk the same state machine, so a repaired plan
always validates.

Per op k the order is: offloads issued after op k-1 start leaving; transfers due before op k
complete; prefetches issued after op k-1 start arriving; op k's tensors come onto the device
(created, or demand-faulted); driver evictions then make room, so the device holds at most `capacity`
bytes while op k runs; after op k, tensors with no later use are released. A tensor that is leaving
or arriving occupies device memory until its transfer completes. Both modes follow this order, so a
repaired plan replays identically in strict mode.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass

from ..graph import Graph
from ..units import format_bytes
from .plan import Direction, MemOp, Mode, Move, Origin, PlanError

DEAD, HOST, DEVICE, LEAVING, ARRIVING = "dead", "host", "device", "leaving", "arriving"
_OCCUPYING = (DEVICE, LEAVING, ARRIVING)
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


def repair(graph: Graph, capacity: int, planned: list[_Transfer]) -> Replay:
    """Run iterations until the residency at the start of one repeats; return that iteration."""
    start = _initial_residency(graph, capacity)
    seen: list[Residency] = []
    lru: OrderedDict[int, None] = OrderedDict((t, None) for t, _ in start)
    result = None
    for _ in range(_STEADY_STATE_ROUNDS):
        seen.append(start)
        result, end = _walk(graph, capacity, [_copy(t) for t in planned], start, lru, fix=True)
        if end == start:
            return result
        if end in seen:  # a cycle longer than one iteration: report the one that starts from here
            return _walk(graph, capacity, [_copy(t) for t in planned], end, lru, fix=True)[0]
        start = end
    assert result is not None
    return result


def check(graph: Graph, capacity: int, memops: tuple[MemOp, ...], start: Residency) -> Replay:
    transfers = [_Transfer(m.tensor, m.direction, m.mode, m.issue_after, m.complete_before, m.origin,
                           m.nbytes) for m in memops]
    lru: OrderedDict[int, None] = OrderedDict((t, None) for t, _ in start)
    result, end = _walk(graph, capacity, transfers, start, lru, fix=False)
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
          lru: OrderedDict[int, None], fix: bool) -> tuple[Replay, Residency]:
    n = len(graph.ops)
    tensors = graph.tensors
    last_use = graph.last_use
    size = [t.nbytes for t in tensors]
    loc = [HOST if t.persistent else DEAD for t in tensors]
    dev = [0] * len(tensors)  # bytes on the device; a tensor on the HOST may keep some there
    for t, nbytes in start:
        dev[t] = nbytes
        loc[t] = DEVICE if nbytes == size[t] else HOST
    occupied = sum(dev)
    issued: list[list[_Transfer]] = [[] for _ in range(n + 1)]
    for tr in transfers:
        issued[tr.issue_after + 1].append(tr)
    due: list[list[_Transfer]] = [[] for _ in range(n + 1)]
    open_offloads: dict[int, _Transfer] = {}
    out: list[_Transfer] = []
    problems: list[str] = []
    per_op: list[int] = []

    def name(k: int) -> str:
        return graph.ops[k].name if 0 <= k < n else ("iteration start" if k < 0 else "iteration end")

    def moving(tr: _Transfer, nbytes: int) -> None:
        if tr.nbytes is None:
            tr.nbytes = nbytes
        elif tr.nbytes != nbytes:
            problems.append(f"{tensors[tr.tensor].name} moves {tr.nbytes} bytes {tr.direction.value} "
                            f"after {name(tr.issue_after)}, but {nbytes} would move there")

    def complete(tr: _Transfer) -> None:
        nonlocal occupied
        t = tr.tensor
        if tr.direction is Direction.TO_HOST and loc[t] == LEAVING:
            loc[t] = HOST
            occupied -= dev[t]
            dev[t] = 0
            lru.pop(t, None)
        elif tr.direction is Direction.TO_DEVICE and loc[t] == ARRIVING:
            loc[t] = DEVICE
            lru[t] = None

    def close(tr: _Transfer, k: int) -> None:
        tr.complete_before = k
        open_offloads.pop(tr.tensor, None)
        complete(tr)

    def evict(t: int, nbytes: int, k: int, origin: Origin) -> None:
        nonlocal occupied
        tr = _Transfer(t, Direction.TO_HOST, Mode.SYNC, k - 1, k, origin, nbytes)
        out.append(tr)
        dev[t] -= nbytes
        occupied -= nbytes
        loc[t] = HOST
        if dev[t] == 0:
            lru.pop(t, None)
        else:  # what is left stays evictable, first in line (an arriving tensor was not in the list yet)
            lru[t] = None
            lru.move_to_end(t, last=False)

    for k in range(n + 1):
        for tr in issued[k]:  # offloads and evictions issued after op k-1 start leaving
            if tr.direction is not Direction.TO_HOST:
                continue
            t = tr.tensor
            if tr.mode is Mode.SYNC:  # driver evictions make room once op k's tensors are in, below
                continue
            out.append(tr)
            if loc[t] not in (DEVICE, HOST):
                problems.append(f"{tensors[t].name} is offloaded after {name(k - 1)} but is {loc[t]} there")
                continue
            moving(tr, dev[t])
            loc[t] = LEAVING
            if tr.complete_before is None:
                open_offloads[t] = tr
            else:
                due[tr.complete_before].append(tr)
        for tr in due[k]:
            complete(tr)
        for tr in issued[k]:  # prefetches issued after op k-1 start arriving
            if tr.direction is not Direction.TO_DEVICE or tr.mode is Mode.FAULT:
                continue
            out.append(tr)
            t = tr.tensor
            if t in open_offloads:  # the copy stream must finish the offload first
                close(open_offloads[t], k)
            if loc[t] != HOST:
                problems.append(f"{tensors[t].name} is prefetched after {name(k - 1)} but is {loc[t]} there")
                moving(tr, 0)
                continue
            moving(tr, size[t] - dev[t])
            loc[t] = ARRIVING
            occupied += size[t] - dev[t]
            dev[t] = size[t]
            if tr.complete_before is None or tr.complete_before <= k:
                complete(tr)
            else:
                due[tr.complete_before].append(tr)
        if k == n:
            break
        op = graph.ops[k]
        touches = op.touches
        faults = {tr.tensor: tr for tr in issued[k] if tr.mode is Mode.FAULT}
        for t in touches:
            state = loc[t]
            if t in faults and state != HOST:
                problems.append(f"{tensors[t].name} is faulted in at {op.name} but is {state} there")
            if tensors[t].producer == k and state == DEAD:
                loc[t], dev[t] = DEVICE, size[t]
                occupied += size[t]
            elif state == HOST and (fix or t in faults):
                tr = faults.get(t) or _Transfer(t, Direction.TO_DEVICE, Mode.FAULT, k - 1, k, Origin.DRIVER)
                out.append(tr)
                moving(tr, size[t] - dev[t])
                occupied += size[t] - dev[t]
                loc[t], dev[t] = DEVICE, size[t]
            elif state != DEVICE:
                if fix:
                    raise PlanError(f"{op.name} touches {tensors[t].name} while it is {state}; "
                                    "a planned transfer overlaps a use of its tensor")
                problems.append(f"{op.name} touches {tensors[t].name}, which is {state} there")
            lru[t] = None
            lru.move_to_end(t)
        for t in faults.keys() - set(touches):
            problems.append(f"{tensors[t].name} is faulted in at {op.name}, which does not touch it")
        for tr in issued[k]:  # a complete plan's driver evictions, where repair would make them
            if tr.mode is not Mode.SYNC:
                continue
            t = tr.tensor
            if loc[t] in (DEVICE, HOST, ARRIVING) and tr.nbytes is not None and 0 < tr.nbytes <= dev[t] \
                    and t not in touches:
                evict(t, tr.nbytes, k, tr.origin)
            else:
                out.append(tr)
                problems.append(f"{tensors[t].name} is evicted before {op.name} but has {dev[t]} bytes "
                                f"there, not {tr.nbytes}, or the op uses it")
        if occupied > capacity and fix:
            for tr in sorted(open_offloads.values(), key=lambda tr: tr.issue_after):
                if occupied <= capacity:
                    break
                close(tr, k)  # the op waits for an offload already under way
            # LRU order, taking only the bytes needed, as the driver evicts page by page; prefetches
            # still arriving only as a last resort: the driver then evicts what was just brought in
            # and the op that needs it faults it back (thrashing)
            victims = iter(list(lru) + sorted((t for t, s in enumerate(loc) if s == ARRIVING),
                                              key=lambda t: -next_use(graph, t, k - 1)))  # type: ignore[operator]
            while occupied > capacity:
                victim = next(victims, None)
                if victim is None:
                    raise PlanError(f"{op.name} needs {format_bytes(occupied)} on the device with what is in "
                                    f"flight, above the capacity {format_bytes(capacity)}")
                if loc[victim] in (DEVICE, HOST, ARRIVING) and dev[victim] and victim not in touches:
                    evict(victim, min(dev[victim], occupied - capacity), k, Origin.DRIVER)
        elif occupied > capacity:
            problems.append(f"{op.name} runs with {format_bytes(occupied)} on the device, above the capacity "
                            f"{format_bytes(capacity)}")
        per_op.append(occupied)
        for t in touches:
            if last_use[t] == k and not tensors[t].persistent:
                occupied -= dev[t]
                loc[t], dev[t] = DEAD, 0
                lru.pop(t, None)
    for tr in list(open_offloads.values()):
        close(tr, n)
    for t, state in enumerate(loc):
        if state == LEAVING:
            occupied -= dev[t]
            loc[t], dev[t] = HOST, 0
        elif state == ARRIVING:
            loc[t] = DEVICE
    end = tuple((t, dev[t]) for t, tensor in enumerate(tensors) if tensor.persistent and dev[t])
    memops = tuple(sorted((tr.frozen(n) for tr in out),
                          key=lambda m: (m.issue_after, m.direction != Direction.TO_HOST, m.tensor)))
    return Replay(memops, start, tuple(per_op), tuple(problems)), end

