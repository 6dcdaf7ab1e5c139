"""`belady`: Belady's MIN over the repeating iteration, then prefetches as early as the room allows.

Walking the ops in order over the static profile (what each op touches plus every live tensor kept),
wherever the device would hold more than the capacity the resident tensor whose next use is farthest
leaves (the larger first at one distance), over the whole gap between its uses: offloaded after its
last use, so the eviction has that long to run, and due back at its next use, which may be in the next
iteration (a persistent tensor's trip wraps). MIN moves the fewest pages when pages are equal; tensors
are not, so this is MIN's rule rather than the least bytes, and a pass drops every trip whose room
later trips turn out to make. A wrapped trip whose room is only needed in the next iteration leaves at
its start, not after the last use, since the executor finishes every transfer before an iteration
ends. Then each prefetch is issued as early as the room its tensor takes allows, so that its transfer
overlaps compute, and never so early that the profile would overflow (the driver would evict the
tensor again, or another in its place).

Every trip carries live data: in the shipped graphs every access to a tensor that exists already reads
it (a temporary is created by its producer, not fetched, and freed after its last use by the replay),
so no trip migrates data about to be overwritten. Should a graph ever overwrite a tensor unread, a
`Move` could not say "populate, do not fetch": the prefetch would move dead bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph import Graph
from ..plan import Move
from .autovm import MIN_MOVE_BYTES
from .common import reuse_gaps
from .spec import MAX_BYTES, OptionSpec, PolicySpec

OPTIONS = {
    "min_bytes": OptionSpec(int, MIN_MOVE_BYTES, "move no tensor smaller than this many bytes (the driver "
                                                 "evicts those if it must)", minimum=0,
                           maximum=MAX_BYTES),
}


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    return belady_moves(graph, capacity, options["min_bytes"])


def belady_moves(graph: Graph, capacity: int, min_bytes: int = MIN_MOVE_BYTES) -> list[Move]:
    """MIN's evictions over the static profile, each prefetch then as early as the profile has room."""
    gaps = _Gaps.of(graph, min_bytes)
    occupied = np.array(graph.live_bytes, dtype=np.int64)
    chosen = _evict_farthest(gaps, occupied, capacity)
    chosen = _drop_redundant(gaps, occupied, capacity, chosen)
    starts = _offloads_in_time(gaps, occupied, capacity, chosen)
    return _early_prefetches(gaps, occupied, capacity, starts)


@dataclass(frozen=True)
class _Gaps:
    """Every gap between two uses of a tensor worth a trip, as columns. Op indices are unrolled: a gap
    into the next iteration ends at its use's index plus n, and op j of the profile is j % n. A trip
    over a gap is away over the unrolled ops [start, prefetch_after]: start is last + 1, or n for a
    trip that wraps but leaves at the next iteration's start instead (`_offloads_in_time`)."""

    n: int
    tensor: np.ndarray
    last: np.ndarray  # the use before the gap
    use: np.ndarray  # the use after it, n or more when it wraps: the prefetch is due before it
    nbytes: np.ndarray

    @classmethod
    def of(cls, graph: Graph, min_bytes: int) -> _Gaps:
        rows = [(t, last, use, x.nbytes) for t, x in enumerate(graph.tensors) if x.nbytes >= max(min_bytes, 1)
                for last, use in reuse_gaps(graph, t) if use - last >= 2]
        cols = np.array(rows, dtype=np.int64).reshape(-1, 4).T
        return cls(len(graph.ops), *cols)

    def covering(self, k: int) -> np.ndarray:
        """The gaps op k falls in, as indices."""
        inside = lambda j: (self.last < j) & (j < self.use)  # noqa: E731
        return np.flatnonzero(inside(k) | inside(k + self.n))

    def distance(self, g: np.ndarray, k: int) -> np.ndarray:
        """Ops from k to the use that ends each gap (covering k), the next iteration's counted on."""
        # a gap covers k or k + n, never both, so the use is less than n ops ahead either way
        return (self.use[g] - k) % self.n

    def span(self, i: int) -> tuple[int, int]:
        """The whole gap, [last + 1, use): where the trip is away with its prefetch as late as can be."""
        return int(self.last[i]) + 1, int(self.use[i])

    def move(self, i: int, start: int, prefetch_after: int) -> Move:
        """The trip away over [start, prefetch_after]; a prefetch in the next iteration (a wrapped gap's
        always is) is numbered in it, -1 being its start."""
        offload_after = start - 1 if start < self.n else -1
        wraps = self.use[i] >= self.n
        return Move(int(self.tensor[i]), offload_after, prefetch_after - self.n if wraps else prefetch_after)


def _evict_farthest(gaps: _Gaps, occupied: np.ndarray, capacity: int) -> list[int]:
    """MIN: at each op over the capacity, the resident tensors whose next use is farthest leave (the
    larger first at one distance) until it fits; the gaps chosen, in order. Where no gap is left the
    driver's LRU evictions take over (tensors below the minimum size, or a working set that fills it)."""
    chosen: list[int] = []
    taken = np.zeros(len(gaps.tensor), dtype=bool)
    for k in np.flatnonzero(occupied > capacity):
        if occupied[k] <= capacity:  # an earlier trip made the room
            continue
        g = gaps.covering(int(k))
        g = g[~taken[g]]
        for i in g[np.lexsort((gaps.tensor[g], -gaps.nbytes[g], -gaps.distance(g, int(k))))]:
            if occupied[k] <= capacity:
                break
            taken[i] = True
            chosen.append(int(i))
            _add(occupied, *gaps.span(int(i)), -int(gaps.nbytes[i]))
    return chosen


def _drop_redundant(gaps: _Gaps, occupied: np.ndarray, capacity: int, chosen: list[int]) -> list[int]:
    """A trip chosen early may be made needless by later ones, whose gaps began before it was chosen
    (or wrap onto the ops already walked): keep it only if the profile overflows without it."""
    kept = []
    for i in chosen:
        lo, hi = gaps.span(i)
        if _fits(occupied, lo, hi, int(gaps.nbytes[i]), capacity):
            _add(occupied, lo, hi, int(gaps.nbytes[i]))
        else:
            kept.append(i)
    return kept


def _offloads_in_time(gaps: _Gaps, occupied: np.ndarray, capacity: int, chosen: list[int]) -> dict[int, int]:
    """Where each trip starts being away. The executor finishes every transfer before the next
    iteration begins, so a wrapped trip's offload issued near the end (after an update, say) has only
    the last ops to hide behind; where the room is not needed before the iteration ends, the tensor
    stays and leaves at the next iteration's start instead, its eviction overlapping that iteration's
    first ops."""
    starts = {}
    for i in chosen:
        lo, hi = gaps.span(i)
        if hi > gaps.n and _fits(occupied, lo, gaps.n, int(gaps.nbytes[i]), capacity):
            _add(occupied, lo, gaps.n, int(gaps.nbytes[i]))
            lo = gaps.n
        starts[i] = lo
    return starts


def _early_prefetches(gaps: _Gaps, occupied: np.ndarray, capacity: int, starts: dict[int, int]) -> list[Move]:
    """Each prefetch issued after the last op where its tensor would not fit beside what the profile
    holds, the tensors needed first claiming the room first (a copy stream runs in order). A wrapped
    gap's prefetch is issued in the next iteration, at its start at the earliest."""
    out = []
    for i in sorted(starts, key=lambda i: (int(gaps.use[i]), int(gaps.tensor[i]))):
        lo, hi, nbytes = starts[i], int(gaps.use[i]), int(gaps.nbytes[i])
        over = np.flatnonzero(occupied[np.arange(lo, hi) % gaps.n] + nbytes > capacity)
        p = lo + int(over[-1]) if len(over) else lo
        if hi >= gaps.n:
            p = max(p, gaps.n - 1)
        _add(occupied, p + 1, hi, nbytes)
        out.append(gaps.move(i, lo, p))
    return sorted(out, key=lambda mv: (mv.offload_after, mv.tensor))


def _add(occupied: np.ndarray, lo: int, hi: int, nbytes: int) -> None:
    """Add bytes over the unrolled op span [lo, hi)."""
    n = len(occupied)
    occupied[lo:min(hi, n)] += nbytes
    if hi > n:
        occupied[max(lo - n, 0):hi - n] += nbytes


def _fits(occupied: np.ndarray, lo: int, hi: int, nbytes: int, capacity: int) -> bool:
    """Whether bytes added over the unrolled span [lo, hi) keep the profile within the capacity."""
    return bool((occupied[np.arange(lo, hi) % len(occupied)] + nbytes <= capacity).all())


SPEC = PolicySpec("belady", "MIN: at capacity the tensor used farthest ahead leaves; each prefetch as early as "
                            "the room allows", plan_moves, OPTIONS)
