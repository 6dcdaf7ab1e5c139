"""The least traffic any schedule needs: Belady's MIN over the repeating iteration, at byte granularity.

`min_traffic(graph, capacity)` is a lower bound on the bytes every plan of one steady-state iteration
moves each way. Why it is a bound, and not merely what one good policy achieves:

- **Bytes, not tensors.** Deciding which whole tensors to keep is generalized caching (NP-hard, and
  Belady's farthest-next-use rule is not optimal for it when sizes differ). Every whole-tensor
  schedule is also a schedule of its bytes, and for equal-sized pages (a byte, or any unit dividing
  every tensor) MIN, evicting what is next needed farthest ahead, moves the fewest pages in (Belady
  1966, Mattson et al. 1970); the rule still holds when an op needs a set of pages at once, when pages
  are created on the device (an op's outputs) and when they die (tests/plan/test_traffic_bound.py
  checks it against an exhaustive search of every schedule on small graphs). The bytes of one tensor are next
  needed together, so MIN at byte granularity evicts whole tensors in farthest-next-use order, only
  the last one in part, as many bytes as the op needs room for.
- **Dead data is free.** A tensor's contents are dead from their last read until they are written
  without being read (an op's new output, or an overwrite): dead bytes take no room, need no
  write-back and no fetch. A byte evicted while live was copied to the host: no clean host copy is
  kept (managed memory holds each page in one place), so it must come back for its next read, and in a
  steady state every byte fetched was evicted earlier: the least traffic is the same each way.
- **The repeating iteration.** Persistent tensors (weights, momentum, inputs) are next needed in the
  next iteration, so next uses wrap around the iteration. MIN is run over iteration after iteration
  from an empty device until the device holds what it held at the start of an earlier iteration; from
  there every iteration repeats. Its decisions in an iteration are those of MIN over any finite run
  but the run's last iteration (every next use from inside it lies within the next iteration), so
  over N iterations MIN moves the repeating iteration's bytes N times up to a constant, and no
  schedule repeating each iteration (or any run of them) moves fewer per iteration.
- **Residency only.** Timing is not modelled: transfers in flight take no room here (a prefetch that
  arrives early takes room in a real plan), so the bound can only be lower than what plans move.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..graph import Graph
from ..units import format_bytes
from .plan import PlanError

ASSUMPTIONS = ("Belady's MIN at byte granularity (a lower bound for whole-tensor schedules) over the repeating "
               "iteration; dead data (after its last read, before its next overwrite) takes no room and never "
               "moves; every live byte evicted is copied to the host and comes back for its next read; "
               "transfers in flight take no room")
_MAX_ROUNDS = 64  # iterations before giving up on a repeat (all models repeat within a few)


@dataclass(frozen=True)
class Traffic:
    """The least bytes any steady-state schedule moves per iteration, each way."""

    min_bytes_to_host: int
    min_bytes_to_device: int
    assumptions: str = field(default=ASSUMPTIONS, repr=False)


def min_traffic(graph: Graph, capacity: int) -> Traffic:
    """The bound at `capacity` bytes; PlanError below the largest single op's working set."""
    need, op = graph.min_capacity
    if capacity < need:
        raise PlanError(f"capacity {format_bytes(capacity)} is below the minimum for {graph.model} batch "
                        f"{graph.batch}: {graph.ops[op].name} alone touches {format_bytes(need)}")
    return _steady_state(_Min(graph, capacity))


def _steady_state(walk: _Min) -> Traffic:
    """Iterations from an empty device until one starts as an earlier one did: the mean of that cycle
    (rounded down: a bound). Without a repeat in _MAX_ROUNDS, a bound that needs none: over N
    iterations no schedule fetches less than MIN does in iterations 2 to N-1 (the first's cold fetches
    and the last's, which sees no future, left out), so per iteration at least that over N; and as many
    bytes left as came in."""
    seen: dict[tuple[int, ...], int] = {}
    moved: list[tuple[int, int]] = []
    for j in range(_MAX_ROUNDS):
        start = walk.persistent_state()
        if start in seen:
            cycle = moved[seen[start]:]
            return Traffic(sum(o for o, _ in cycle) // len(cycle), sum(i for _, i in cycle) // len(cycle))
        seen[start] = j
        moved.append(walk.iteration(j))
    fetched = sum(i for _, i in moved[1:-1]) // len(moved)
    return Traffic(fetched, fetched)


class _Min:
    """MIN's device, carried from one iteration to the next: each tensor's bytes there and when its
    contents are next read (an absolute op number, counting ops of earlier iterations)."""

    def __init__(self, graph: Graph, capacity: int) -> None:
        self.capacity, self.n = capacity, len(graph.ops)
        self.size = [t.nbytes for t in graph.tensors]
        self.persistent = [t for t, tensor in enumerate(graph.tensors) if tensor.persistent]
        self.touches = [op.touches for op in graph.ops]
        self.reads = [frozenset(op.reads) for op in graph.ops]
        self.next_read = _next_reads(graph)
        self.dev = [0] * len(self.size)
        self.needed_at = [-1] * len(self.size)
        self.occupied = 0
        self.heap: list[tuple[int, int]] = []  # (-next read, tensor): the farthest first; stale entries skipped

    def persistent_state(self) -> tuple[int, ...]:
        return tuple(self.dev[t] for t in self.persistent)

    def iteration(self, j: int) -> tuple[int, int]:
        """One iteration's (bytes evicted, bytes fetched)."""
        out = into = 0
        base = j * self.n
        for k in range(self.n):
            into += self._bring_in(k)
            out += self._fit(k)
            for t, nxt in self.next_read[k]:
                if nxt is None:  # dead until written again
                    self.occupied -= self.dev[t]
                    self.dev[t] = 0
                else:
                    self.needed_at[t] = base + nxt
                    heapq.heappush(self.heap, (-(base + nxt), t))
        return out, into

    def _bring_in(self, k: int) -> int:
        """Op k's tensors all on the device: what it reads is fetched, what it only writes is made."""
        fetched = 0
        for t in self.touches[k]:
            missing = self.size[t] - self.dev[t]
            if t in self.reads[k]:
                fetched += missing
            self.dev[t] = self.size[t]
            self.occupied += missing
        return fetched

    def _fit(self, k: int) -> int:
        """Evict what is read farthest ahead, bytes only as needed, until op k fits."""
        evicted = 0
        while self.occupied > self.capacity:
            nxt, t = heapq.heappop(self.heap)
            if self.dev[t] == 0 or self.needed_at[t] != -nxt or t in self.touches[k]:
                continue  # stale; op k's own tensors are next read now, so never the farthest
            take = min(self.dev[t], self.occupied - self.capacity)
            self.dev[t] -= take
            self.occupied -= take
            evicted += take
            if self.dev[t]:
                heapq.heappush(self.heap, (nxt, t))
        return evicted


def _next_reads(graph: Graph) -> list[list[tuple[int, int | None]]]:
    """For each op, each tensor it touches with the op (counted from this iteration's first) that next
    reads what it holds after the op: None when its next touch only writes it or it has none (a
    temporary's last use). A persistent tensor's next touch may be in the next iteration (op + n)."""
    n = len(graph.ops)
    out: list[list[tuple[int, int | None]]] = [[] for _ in graph.ops]
    for t, uses in enumerate(graph.uses):
        wraps = graph.tensors[t].persistent
        for i, k in enumerate(uses):
            if i + 1 < len(uses):
                nxt: int | None = uses[i + 1]
            else:
                nxt = uses[0] + n if wraps else None
            if nxt is not None and t not in graph.ops[nxt % n].reads:
                nxt = None
            out[k].append((t, nxt))
    return out
