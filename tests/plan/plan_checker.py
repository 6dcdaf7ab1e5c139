"""An independent check of a plan: a ledger of device bytes, op by op, from the graph and the memops alone.

vmexplorer builds and validates plans with one replay (`vmexplorer.plan.residency`). This module shares
no code with it, nor with the policies: it reads only the graph (sizes, producers, uses) and the plan's
data (its memory operations and `resident_at_start`), so the tests can hold the two against each other.

The accounting rule, from the meaning of a plan's fields (vmexplorer/plan/plan.py, docs/session-format.md):
a memop issued after op `a` starts right after op `a` runs; one due before op `b` has completed before op
`b` runs. A tensor's bytes take device memory from the moment they start to come in (a prefetch or a
fault starts, or its producer creates it) until the moment they have left (an offload or an eviction
completes, or a temporary's last use has run): a transfer under way holds its bytes on the device at
both ends. Boundary k is the moment before op k (0: the iteration start; n: its end). At boundary k:

1. offloads (asynchronous, to the host) issued after op k-1 start: the tensor is alive, has no transfer
   under way, and the offload moves all the bytes it has on the device (possibly none: a persistent
   tensor the driver already evicted); they stay on the device until it completes;
2. transfers due before op k complete: an offload's bytes leave the device;
3. prefetches (asynchronous, to the device) issued after op k-1 start: the tensor is alive, not wholly
   on the device and has no transfer under way; the prefetch moves exactly its missing bytes, which take
   device memory from now on;

then, except at the end, op k runs:

4. the tensors op k produces are created; its demand faults (mode `fault`, issued after op k-1) each
   bring in exactly the missing bytes of a tensor op k touches, which is alive with no transfer under way;
5. every tensor op k touches is now wholly on the device with no transfer under way;
6. its evictions (mode `sync`, issued after op k-1) each take the bytes they name, at most what the tensor
   has there, from a tensor op k does not touch and that is not being offloaded (an arriving tensor may
   be evicted: the driver throws out what a prefetch brought in, and the arrival is over);
7. the bytes now on the device are what op k runs with, at most the capacity; the plan's
   `peak_resident` is the largest of them;
8. the temporaries op k uses for the last time are freed.

At the end the device must hold exactly `resident_at_start` (a plan is one steady-state iteration), and
every transfer has completed. A memop must also be well formed: a real tensor, issued before it is due,
within the iteration; a `sync` one is an eviction and a `fault` one a fault-in, each completing before the
next op. Evictions after the last op are accepted (they complete by the end) but faults there are not.

Under the `swap` mechanism there is no driver: what comes in before its op is a `sync` copy to the device
(read as step 4's fault-in: exactly the missing bytes of a tensor op k touches), a `fault` means nothing, and
an eviction takes all the bytes the tensor has on the device (a pool frees whole tensors).

The replay counts the same bytes (the tests hold the two ledgers equal at every op), but this ledger is
stricter in two ways, both about plans no policy writes: a memop whose mode and direction mean nothing
together (a `fault` to the host, a `sync` to the device), which the replay reads as best it can, and a
fault listed twice for one op, which the replay (keeping a plan's faults at an op by tensor) reads as one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from vmexplorer.graph import Graph
from vmexplorer.plan import Direction, Mechanism, MemOp, Mode, Plan

_OFFLOAD, _PREFETCH, _FAULT, _EVICT = "offload", "prefetch", "fault", "eviction"


@dataclass(frozen=True)
class Ledger:
    bytes_per_op: tuple[int, ...]  # device bytes while each op runs (step 7)
    problems: tuple[str, ...]  # empty: the plan holds

    @property
    def peak(self) -> int:
        return max(self.bytes_per_op, default=0)


def check_plan(graph: Graph, plan: Plan, capacity: int | None = None) -> Ledger:
    """The plan's ledger, held to `capacity` (the plan's own by default), on the graph the plan runs (its
    workspaces fitted to the plan's room)."""
    return check_memops(graph.sized_for(plan.planned_with), plan.memops, plan.resident_at_start,
                        plan.capacity if capacity is None else capacity, plan.mechanism is Mechanism.SWAP)


def check_memops(graph: Graph, memops: Sequence[MemOp], resident_at_start: Iterable[tuple[int, int]],
                 capacity: int, swap: bool = False) -> Ledger:
    start = dict(resident_at_start)
    kinds = _SWAP_KINDS if swap else _KINDS
    problems = _malformed(graph, memops, kinds) + _bad_start(graph, resident_at_start)
    if problems:  # the ledger below indexes by tensor and op: it needs well-formed memops
        return Ledger((), tuple(problems))
    ledger = _Ledger(graph, start, capacity, kinds, swap)
    by_start: dict[int, list[MemOp]] = {}
    by_end: dict[int, list[MemOp]] = {}
    for m in memops:
        by_start.setdefault(m.issue_after + 1, []).append(m)
        by_end.setdefault(m.complete_before, []).append(m)
    n = len(graph.ops)
    for k in range(n + 1):
        starting, ending = by_start.get(k, []), by_end.get(k, [])
        ledger.boundary(k, starting, ending)
        if k < n:
            ledger.run_op(k, starting)
        else:
            ledger.after_last_op(starting)
    ledger.end(start)
    return Ledger(tuple(ledger.per_op), tuple(ledger.problems))


_KINDS = {(Direction.TO_HOST, Mode.ASYNC): _OFFLOAD, (Direction.TO_HOST, Mode.SYNC): _EVICT,
          (Direction.TO_DEVICE, Mode.ASYNC): _PREFETCH, (Direction.TO_DEVICE, Mode.FAULT): _FAULT}
# swap: a synchronous copy in before the op stands where uvm's fault does
_SWAP_KINDS = {**{k: v for k, v in _KINDS.items() if v != _FAULT}, (Direction.TO_DEVICE, Mode.SYNC): _FAULT}

Kinds = dict[tuple[Direction, Mode], str]


def _malformed(graph: Graph, memops: Sequence[MemOp], kinds: Kinds) -> list[str]:
    n, out = len(graph.ops), []
    for i, m in enumerate(memops):
        if not 0 <= m.tensor < len(graph.tensors):
            out.append(f"memop {i} moves tensor {m.tensor}, which the graph does not have")
        elif not 0 <= m.nbytes <= graph.tensors[m.tensor].nbytes:
            out.append(f"memop {i} moves {m.nbytes} bytes of a {graph.tensors[m.tensor].nbytes}-byte tensor")
        elif not -1 <= m.issue_after < m.complete_before <= n:
            out.append(f"memop {i} is issued after op {m.issue_after} and due before op {m.complete_before}")
        elif (m.direction, m.mode) not in kinds:
            out.append(f"memop {i} is a {m.mode.value} transfer {m.direction.value}: no such transfer")
        elif m.mode is not Mode.ASYNC and m.complete_before != m.issue_after + 1:
            out.append(f"memop {i} is {m.mode.value} but does not complete before the next op")
    return out


def _bad_start(graph: Graph, resident_at_start: Iterable[tuple[int, int]]) -> list[str]:
    out, seen = [], set()
    for t, nbytes in resident_at_start:
        if not (0 <= t < len(graph.tensors) and graph.tensors[t].persistent
                and 0 < nbytes <= graph.tensors[t].nbytes) or t in seen:
            out.append(f"resident_at_start holds {nbytes} bytes of tensor {t}")
        seen.add(t)
    return out


class _Ledger:
    """Per tensor: whether it exists, its bytes on the device, and the transfer under way (if any);
    in all, the bytes on the device and, op by op, what each op ran with."""

    def __init__(self, graph: Graph, start: dict[int, int], capacity: int, kinds: Kinds, swap: bool) -> None:
        self.graph, self.capacity, self.kinds, self.swap = graph, capacity, kinds, swap
        # counted here, so that a mistake in Graph.last_use, which the replay reads, cannot hide
        self.last_use = [t.producer for t in graph.tensors]
        for k, op in enumerate(graph.ops):
            for t in op.reads + op.writes:
                self.last_use[t] = k
        self.alive = [t.persistent for t in graph.tensors]
        self.on_device = [start.get(t, 0) for t in range(len(graph.tensors))]
        self.total = sum(self.on_device)
        self.under_way: dict[int, MemOp] = {}
        self.per_op: list[int] = []
        self.problems: list[str] = []

    def _kind(self, m: MemOp) -> str | None:
        """What a memop is, by its direction and mode; None for a combination that means nothing."""
        return self.kinds.get((m.direction, m.mode))

    def boundary(self, k: int, starting: list[MemOp], ending: list[MemOp]) -> None:
        """Steps 1-3: offloads start, transfers due complete, prefetches start."""
        for m in starting:
            if self._kind(m) == _OFFLOAD:
                self._start(k, m, self.on_device[m.tensor], "is offloaded")
        for m in ending:
            if self.under_way.get(m.tensor) is m:
                del self.under_way[m.tensor]
                if self._kind(m) == _OFFLOAD:
                    self._add(m.tensor, -m.nbytes)
        for m in starting:
            if self._kind(m) == _PREFETCH:
                self._bring_in(k, m, "is prefetched")

    def run_op(self, k: int, starting: list[MemOp]) -> None:
        """Steps 4-8 for op k."""
        op, tensors = self.graph.ops[k], self.graph.tensors
        touched = set(op.reads) | set(op.writes)
        for t in sorted(touched):
            if tensors[t].producer == k:
                if self.alive[t]:
                    self._problem(k, f"{tensors[t].name} is created by {op.name} a second time")
                self.alive[t] = True
                self._add(t, tensors[t].nbytes - self.on_device[t])
        for m in starting:
            if self._kind(m) == _FAULT:
                if m.tensor not in touched:
                    self._problem(k, f"{tensors[m.tensor].name} is faulted in for {op.name}, which does not touch it")
                self._bring_in(k, m, "is faulted in")
        for t in sorted(touched):
            if self.on_device[t] != tensors[t].nbytes or t in self.under_way:
                self._problem(k, f"{op.name} touches {tensors[t].name} with {self.on_device[t]} of its "
                                 f"{tensors[t].nbytes} bytes on the device" + self._moving(t))
        self.evict(k, [m for m in starting if self._kind(m) == _EVICT], touched)
        self.per_op.append(self.total)
        if self.total > self.capacity:
            self._problem(k, f"{op.name} runs with {self.total} bytes on the device, over the capacity "
                             f"{self.capacity}")
        for t in touched:
            if not tensors[t].persistent and self.last_use[t] == k:
                self.alive[t] = False
                self._add(t, -self.on_device[t])

    def evict(self, k: int, evictions: list[MemOp], touched: Collection[int] = ()) -> None:
        """Step 6 (after the last op too)."""
        for m in evictions:
            t, name = m.tensor, self.graph.tensors[m.tensor].name
            moving = self.under_way.get(t)
            if t in touched or (moving is not None and self._kind(moving) == _OFFLOAD) \
                    or not 0 < m.nbytes <= self.on_device[t] or (self.swap and m.nbytes != self.on_device[t]):
                self._problem(k, f"{name}: {m.nbytes} bytes evicted, but it has {self.on_device[t]} on the "
                                 "device" + (", and the op touches it" if t in touched else "") + self._moving(t))
                continue
            self.under_way.pop(t, None)  # an arriving tensor's pages go back: its arrival is over
            self._add(t, -m.nbytes)

    def after_last_op(self, starting: list[MemOp]) -> None:
        """Evictions issued after the last op complete by the end; a fault there is for no op."""
        n = len(self.graph.ops)
        for m in starting:
            if self._kind(m) == _FAULT:
                self._problem(n, f"{self.graph.tensors[m.tensor].name} is faulted in after the last op, for no op")
        self.evict(n, [m for m in starting if self._kind(m) == _EVICT])

    def end(self, start: dict[int, int]) -> None:
        for t, tensor in enumerate(self.graph.tensors):
            expected = start.get(t, 0) if tensor.persistent else 0
            if self.on_device[t] != expected:
                self._problem(len(self.graph.ops), f"{tensor.name} ends the iteration with {self.on_device[t]} "
                                                   f"bytes on the device, but starts it with {expected}")
        for t, m in self.under_way.items():
            self._problem(len(self.graph.ops), f"{self.graph.tensors[t].name} is still moving ({m})")

    def _start(self, k: int, m: MemOp, moves: int, what: str) -> None:
        """A transfer starts: from a live tensor with none under way, moving exactly `moves` bytes."""
        t, name = m.tensor, self.graph.tensors[m.tensor].name
        if not self.alive[t] or t in self.under_way:
            self._problem(k, f"{name} {what} while it is {'not alive' if not self.alive[t] else 'moving'}"
                             + self._moving(t))
            return
        if m.nbytes != moves:
            self._problem(k, f"{name} {what} with {m.nbytes} bytes, but {moves} would move")
            return
        if self._kind(m) == _OFFLOAD or m.complete_before > k:  # an offload completes at step 2, even at once
            self.under_way[t] = m

    def _bring_in(self, k: int, m: MemOp, what: str) -> None:
        t = m.tensor
        missing = self.graph.tensors[t].nbytes - self.on_device[t]
        if self.alive[t] and t not in self.under_way and missing == 0:
            self._problem(k, f"{self.graph.tensors[t].name} {what} but is wholly on the device already")
            return
        before = len(self.problems)
        self._start(k, m, missing, what)
        if len(self.problems) == before:
            self._add(t, missing)

    def _add(self, t: int, nbytes: int) -> None:
        self.on_device[t] += nbytes
        self.total += nbytes

    def _moving(self, t: int) -> str:
        m = self.under_way.get(t)
        return "" if m is None else f" (its {self._kind(m)} is under way, due before op {m.complete_before})"

    def _problem(self, k: int, text: str) -> None:
        where = "at the iteration end" if k == len(self.graph.ops) else f"at op {k}"
        self.problems.append(f"{where}: {text}")
