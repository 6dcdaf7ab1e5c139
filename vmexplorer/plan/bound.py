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

`window_traffic(graph, capacity, first)` says *when* some of those bytes must move: for every window of
consecutive ops, the least bytes any schedule copies out and copies in while it runs, whatever the
schedule did before it. Two counts, each a byte argument at one op boundary m inside the window [j, k):

- **Out.** Contents made by ops j..m-1 and read at or after m did not exist when op j started; when op m
  starts at most `capacity` bytes are on the device, op m's other tensors among them (what it makes new,
  what it reads that was made before op j), so all but the rest of the room were copied out in between
  (a byte on its way out holds its room until it has left).
- **In.** Contents made before op j and read by ops j..m: when op j starts at most `capacity` bytes are
  on the device, what op j makes new among them, and nothing can remake the others, so all but the rest
  of the room are copied in before op m starts (a byte counts once it has landed).

Each window's count is the larger over its boundaries. The forward makes what the backward reads, so
what goes out in one and comes back in the other cannot share time: the simulator's bound adds windows.

**Recomputation** (`remade_free`). A plan may also drop an activation a forward op made and make it
again (`graph.recompute`), so the bytes above need not move. The joint bound, over every mix of keeping,
moving and recomputing, relaxes the graph: every activation that could be recomputed takes room only
at the ops that touch it, made there at no cost (each reader writes a copy of its own, read by no
one). Every plan of the graph is a plan of the relaxation with at least as much on the device at each
op and at least as much traffic, so the least traffic of the relaxation bounds them all; what
recomputing costs in compute is left out here (a re-run's time only adds to an iteration). The
simulator's joint bound charges it at the most crowded ops (`plan.crowded`): what must be away there is
made again, at its re-runs' compute, or copied back, whichever split is cheapest.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field

import numpy as np

from ..graph import Graph, Kind, Phase, Tensor
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


def min_traffic(graph: Graph, capacity: int, recompute: bool = False) -> Traffic:
    """The bound at `capacity` bytes; PlanError below the largest single op's working set. Any plan at
    `capacity` may have made its workspaces as small as they go: the bound counts them at their least.
    `recompute`: over plans that may also recompute activations (`remade_free`)."""
    graph = remade_free(graph) if recompute else graph.least_workspaces()
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


@dataclass(frozen=True, eq=False)
class Windows:
    """The least bytes any schedule copies each way while a window of ops runs, the ops counted from
    `first` around the repeating iteration: `to_host[j, k]` and `to_device[j, k]` (j < k <= n) for the
    ops first+j .. first+k-1, from the start of the first to the start of the one after the last."""

    first: int
    to_host: np.ndarray
    to_device: np.ndarray


def window_traffic(graph: Graph, capacity: int, first: int = 0, recompute: bool = False) -> Windows:
    """Every window's least traffic at `capacity` bytes, the iteration cut before op `first`."""
    graph = remade_free(graph) if recompute else graph.least_workspaces()  # as min_traffic
    n = len(graph.ops)
    size, born, last, read_at, read_of = _contents(graph)
    base = n + first  # windows lie in the middle one of three iterations, and what they see in the three
    pos = np.arange(n + 1)
    made = _made(size, born - base, last - base, n)
    carried = _carried(size, born - base, read_at - base, read_of, n)
    # Op m's other tensors hold their room while it runs: what it makes new, and what it reads that
    # was made before op j (at m = j both counts are for the contents carried in)
    order = (np.arange(n + 1) + first) % n
    new = np.array([sum(graph.tensors[t].nbytes for t in op.writes if t not in op.reads) for op in graph.ops])[order]
    near = (read_at >= base) & (read_at <= base + n)
    at, older, nbytes = read_at[near] - base, born[read_of[near]] - base, size[read_of[near]]
    # a read made before op j counts from the window starting at j = older + 1 on: a histogram by that
    # first j, summed down the rows
    since = np.zeros((n + 2, n + 1))
    np.add.at(since, (np.clip(older + 1, 0, n + 1), at), nbytes)
    others = new[None, :] + np.cumsum(since, axis=0)[:n + 1]  # [j, m]
    after = pos[None, :] > pos[:, None]
    to_host = np.maximum.accumulate(np.where(after, np.maximum(made - (capacity - others), 0), 0), axis=1)
    to_device = np.zeros((n + 1, n + 1))  # a window of ops j..k-1 must have brought in what ops j..k-1 read
    room = capacity - new[:, None]  # what op j makes new holds its room as it starts
    from_j = pos[None, :-1] >= pos[:, None]
    to_device[:, 1:] = np.maximum.accumulate(np.where(from_j, np.maximum(carried[:, :-1] - room, 0), 0), axis=1)
    to_device[np.tril_indices(n + 1)] = 0
    return Windows(first, to_host, to_device)


def recomputable(graph: Graph) -> list[int]:
    """The tensors a plan may recompute (`graph.recompute`): the activations forward ops make."""
    return [t for t, tensor in enumerate(graph.tensors) if tensor.kind is Kind.ACTIVATION and not tensor.persistent
            and graph.ops[tensor.producer].phase is Phase.FORWARD]


def remade_free(graph: Graph) -> Graph:
    """The joint bound's relaxation of `graph` (without its re-runs, workspaces at their least): each
    recomputable activation that an op other than its maker reads is, at that op, a copy the op writes
    itself, and the original is read by no one. Op and tensor numbers stay (the copies come after)."""
    full = graph.full or graph
    g = (full.plain or full).least_workspaces()
    free = set(recomputable(g))
    tensors = list(g.tensors)
    ops = []
    for k, op in enumerate(g.ops):
        copies = []
        for t in dict.fromkeys(op.reads):
            if t in free and g.tensors[t].producer != k:
                copies.append(len(tensors))
                original = g.tensors[t]
                tensors.append(Tensor(f"{original.name} (made free at {op.name})", original.kind, original.shape,
                                      original.dtype, original.nbytes, k, ()))
        kept = tuple(t for t in op.reads if t not in free or g.tensors[t].producer == k)
        ops.append(dataclasses.replace(op, reads=kept, writes=op.writes + tuple(copies)))
    tensors = [dataclasses.replace(t, consumers=()) if i in free else t for i, t in enumerate(tensors)]
    return Graph(g.model, g.batch, g.image_size, tuple(tensors), tuple(ops), g.workspaces, g.capacity,
                 definition=g.definition)


def _made(size: np.ndarray, born: np.ndarray, last: np.ndarray, n: int) -> np.ndarray:
    """[j, m]: the bytes made by ops j..m-1 and read at or after op m (positions relative to the window's
    iteration). A content made at b and last read at l is alive at every m in b+1..l: a difference along
    m gives each maker's bytes alive at m, and a sum over makers from j up gives `made`."""
    keep = (born >= 0) & (born < n) & (last > born)
    b, hi, nbytes = born[keep], np.minimum(last[keep], n), size[keep]
    step = np.zeros((n + 1, n + 2))
    np.add.at(step, (b, b + 1), nbytes)
    np.add.at(step, (b, hi + 1), -nbytes)
    alive = np.cumsum(step, axis=1)[:, :n + 1]  # [b, m]
    return np.cumsum(alive[::-1], axis=0)[::-1]


def _carried(size: np.ndarray, born: np.ndarray, read_at: np.ndarray, read_of: np.ndarray, n: int) -> np.ndarray:
    """[j, m]: the bytes made before op j and read by ops j..m (positions relative to the window's
    iteration), each content counted at its next read from op j on. A content's read at p is its next
    for every j after its read before (or its making) up to p: a difference along j over those, then a
    sum over reads up to m."""
    carried = np.zeros((n + 1, n + 1))
    if not len(read_of):
        return carried
    first_of = np.r_[True, read_of[1:] != read_of[:-1]]  # reads are sorted by content, then position
    before = np.where(first_of, born[read_of], np.r_[0, read_at[:-1]])
    lo, hi = np.maximum(before + 1, 0), read_at
    keep = (hi < n) & (lo <= hi)
    lo, hi, nbytes = lo[keep], hi[keep], size[read_of[keep]]
    step = np.zeros((n + 2, n + 1))
    np.add.at(step, (lo, hi), nbytes)
    np.add.at(step, (hi + 1, hi), -nbytes)
    carried[:n] = np.cumsum(np.cumsum(step, axis=0)[:n], axis=1)
    return carried


def _contents(graph: Graph) -> tuple[np.ndarray, ...]:
    """What tensors hold over three iterations, op positions counted from the first: each content that is
    read (a write starts one, its reads follow until the next write), as its bytes, the position of the
    op that made it (before the first: -1), its last read, and all its reads (position, content) sorted
    by content. A persistent tensor's first content in the three was made in an earlier iteration."""
    n = len(graph.ops)
    size: list[int] = []
    born: list[int] = []
    last: list[int] = []
    read_at: list[int] = []
    read_of: list[int] = []

    def close(nbytes: int, start: int, seen: list[int]) -> None:
        size.append(nbytes)
        born.append(start)
        last.append(seen[-1])
        read_at.extend(seen)
        read_of.extend([len(size) - 1] * len(seen))

    for t, uses in enumerate(graph.uses):
        nbytes, start, seen = graph.tensors[t].nbytes, -1, []
        for k in (u + i * n for i in range(3) for u in uses):
            op = graph.ops[k % n]
            if t in op.reads:
                seen.append(k)
            if t in op.writes:
                if seen:
                    close(nbytes, start, seen)
                start, seen = k, []
        if seen:
            close(nbytes, start, seen)
    i64 = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
    return np.asarray(size, dtype=float), i64(born), i64(last), i64(read_at), i64(read_of)


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
