"""`autovm`: graph-informed paging after AutoVM. A feature map is offloaded after its last forward use
and prefetched a few ops before its first backward use; with tensors="all", every tensor with a long
reuse gap makes the trip. The LRU eviction of the replay is only the fallback where the trips planned
do not free enough."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..graph import Graph, Kind
from ..plan import Move
from ..plan.residency import next_use
from .common import reuse_gaps
from .spec import MAX_DISTANCE, OptionSpec, PolicySpec

OPTIONS = {
    "prefetch_distance": OptionSpec(int, 3, "issue each prefetch this many ops before its use", minimum=1,
                                    maximum=MAX_DISTANCE),
    "offload": OptionSpec(str, "needed", "offload only as many feature maps as the capacity needs "
                                         "(earliest first), or all without immediate reuse",
                          choices=("needed", "all")),
    "tensors": OptionSpec(str, "activations", "plan feature maps only (AutoVM), or every tensor with "
                                              "a long reuse gap: weights, gradients, momentum too",
                          choices=("activations", "all")),
}

MIN_MOVE_BYTES = 2 << 20  # below one 2 MiB page group a trip costs more in calls than it frees


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    return autovm_moves(graph, capacity, options["prefetch_distance"], options["offload"], options["tensors"])


def autovm_moves(graph: Graph, capacity: int, prefetch_distance: int = 3, offload: str = "needed",
                 tensors: str = "activations") -> list[Move]:
    """Offload after the last use before a long gap, prefetch `prefetch_distance` ops before the use
    that ends it. AutoVM's gaps are a feature map's, from its last forward use to its first backward
    use; tensors="all" takes every tensor's gaps, a persistent tensor's gap across the iteration
    boundary included (a trip with prefetch_after < offload_after). With offload="needed", take the
    earliest trips (the most time to move) until the static profile fits the capacity."""
    candidates = _candidates(graph, prefetch_distance, tensors)
    if offload == "all":
        return _fit_prefetches(graph, capacity, candidates)
    occupied = np.array(graph.live_bytes, dtype=np.int64)
    chosen: list[Move] = []
    remaining = list(candidates)
    while True:
        over = np.flatnonzero(occupied > capacity)
        if not len(over):
            return _fit_prefetches(graph, capacity, chosen)
        k = int(over[0])
        covering = [mv for mv in remaining if any(lo <= k < hi for lo, hi in _away(mv, len(graph.ops)))]
        if not covering:  # nothing planned can be away at this op: the LRU fallback takes over here
            occupied[k] = 0
            continue
        # the earliest trip that alone clears the excess (each byte offloaded costs slow eviction
        # bandwidth), else the earliest: candidates are in order of their offloads
        excess = occupied[k] - capacity
        pick = next((mv for mv in covering if graph.tensors[mv.tensor].nbytes >= excess), covering[0])
        remaining.remove(pick)
        chosen.append(pick)
        for lo, hi in _away(pick, len(graph.ops)):
            occupied[lo:hi] -= graph.tensors[pick.tensor].nbytes


def _candidates(graph: Graph, prefetch_distance: int, tensors: str) -> list[Move]:
    """Every trip worth its calls, in order of their offloads (the larger tensor first at one op)."""
    candidates = []
    n = len(graph.ops)
    for t, tensor in enumerate(graph.tensors):
        if tensor.nbytes < MIN_MOVE_BYTES or not (tensors == "all" or tensor.kind is Kind.ACTIVATION):
            continue
        for last, use in reuse_gaps(graph, t, feature_maps_only=tensors != "all"):
            prefetch_after = use - prefetch_distance
            if use >= n:  # a wrapped gap: the prefetch is issued in the next iteration, at its start at the earliest
                prefetch_after = max(prefetch_after - n, -1)
                if use - n > prefetch_after:
                    candidates.append(Move(t, last, prefetch_after))
            elif prefetch_after > last:
                candidates.append(Move(t, last, prefetch_after))
    candidates.sort(key=lambda mv: (mv.offload_after, -graph.tensors[mv.tensor].nbytes))
    return candidates


def _away(mv: Move, n: int) -> list[tuple[int, int]]:
    """Op ranges [lo, hi) during which a move's tensor is off the device in the static profile."""
    p = mv.prefetch_after
    assert p is not None
    if p >= mv.offload_after:
        return [(mv.offload_after + 1, p + 1)]
    return [(mv.offload_after + 1, n), (0, p + 1)]


def _fit_prefetches(graph: Graph, capacity: int, moves: list[Move]) -> list[Move]:
    """Issue prefetches late enough that, while they are in flight, they and each op's own tensors
    fit: neither can be evicted, so an earlier prefetch would only be thrown out again."""
    working = np.array(graph.working_sets, dtype=np.int64)
    arriving = np.zeros(len(graph.ops), dtype=np.int64)
    out = []
    for mv in sorted(moves, key=lambda mv: -(mv.prefetch_after or 0)):  # latest uses claim room first
        nbytes = graph.tensors[mv.tensor].nbytes
        p = mv.prefetch_after
        assert p is not None
        use = next_use(graph, mv.tensor, p)
        assert use is not None
        tight = np.flatnonzero(working[p + 1:use] + arriving[p + 1:use] + nbytes > capacity)
        if len(tight):  # issue after the last op it would not fit beside
            p = min(p + 1 + int(tight[-1]), use - 1)
        arriving[p + 1:use] += nbytes
        out.append(Move(mv.tensor, mv.offload_after, p))
    return sorted(out, key=lambda mv: (mv.offload_after, mv.tensor))


SPEC = PolicySpec("autovm", "graph-informed: offload feature maps after their last forward use, prefetch them "
                            "before their backward use; LRU only as a fallback", plan_moves, OPTIONS)
