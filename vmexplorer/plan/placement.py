"""Where tensors go in one pool: offsets planned from lifetimes, with no CUDA.

A static memory plan, as an allocator would reach at best: tensors alive at the same op never share a
byte, and a tensor that has died leaves its bytes to those created later. The planner is greedy, in the
spirit of tinygrad's `schedule/memory.py` and TFLite's greedy arenas: persistent tensors first, then the
rest by size (first fit) or op by op from the busiest (best fit); the smaller pool wins. The engine's
pools (`engine.memory` for `device` and managed memory) and the swap pool (`plan.pool`) are placed here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEVICE_ALIGN = 512  # CuPy's own allocation unit: every tensor stays aligned for cuDNN and vector loads
Span = tuple[int, int]  # (first op, last op) a tensor's bytes must hold; -1 and len(ops): across iterations


def aligned(nbytes: int, align: int) -> int:
    return -(-max(nbytes, 1) // align) * align


def peak_bytes(sizes: Sequence[int], lifetimes: Sequence[Span], n_ops: int) -> int:
    """The most bytes alive at any op: no pool can be smaller."""
    delta = np.zeros(n_ops + 1, dtype=np.int64)
    for size, (first, last) in zip(sizes, lifetimes):
        delta[max(first, 0)] += size
        delta[min(last, n_ops - 1) + 1] -= size
    return int(np.cumsum(delta[:n_ops]).max(initial=0))


def plan_offsets(sizes: Sequence[int], lifetimes: Sequence[Span], n_ops: int) -> tuple[int, ...]:
    """Offsets at which no two tensors alive at the same op overlap; of two greedy orders, the one whose
    pool is smaller. Sizes should already be aligned: offsets are sums of sizes."""
    persistent = [t for t, (first, _) in enumerate(lifetimes) if first < 0]
    by_size = persistent + sorted(set(range(len(sizes))) - set(persistent),
                                  key=lambda t: (-sizes[t], lifetimes[t][0], t))
    candidates = [place(by_size, sizes, lifetimes, best_fit=False),
                  place(by_breadth(sizes, lifetimes, n_ops, persistent), sizes, lifetimes, best_fit=True)]
    return min(candidates, key=lambda offs: (max((o + s for o, s in zip(offs, sizes)), default=0)))


def by_breadth(sizes: Sequence[int], lifetimes: Sequence[Span], n_ops: int, persistent: list[int],
                period: int | None = None) -> list[int]:
    """Tensors op by op, the op with the most bytes alive first, each op's tensors largest first.
    With `period`, a lifetime running past it goes on from the period's start (see `place`)."""
    first = np.array([s for s, _ in lifetimes]).reshape(1, -1)
    last = np.array([e for _, e in lifetimes]).reshape(1, -1)
    ops = np.arange(n_ops).reshape(-1, 1)
    alive = (first <= ops) & (ops <= last)
    if period is not None:
        alive |= (first <= ops + period) & (ops + period <= last)
    busiest = np.argsort(-(alive * np.array(sizes)).sum(axis=1), kind="stable")
    order, seen = list(persistent), set(persistent)
    for k in busiest:
        for t in sorted(np.flatnonzero(alive[k]).tolist(), key=lambda t: (-sizes[t], lifetimes[t][0], t)):
            if t not in seen:
                seen.add(t)
                order.append(t)
    return order + [t for t in range(len(sizes)) if t not in seen]


def clash_matrix(lifetimes: Sequence[Span], period: int | None = None) -> np.ndarray:
    """Which tensors are alive at the same op, pairwise (with `period`, as `place` reads lifetimes): worked
    out once for the many placements of one set of lifetimes."""
    a = np.array([s for s, _ in lifetimes], dtype=np.int64)
    b = np.array([e for _, e in lifetimes], dtype=np.int64)
    out = np.zeros((len(a), len(a)), dtype=bool)
    for shift in (0,) if period is None else (0, -period, period):
        out |= (a[None, :] + shift <= b[:, None]) & (a[:, None] <= b[None, :] + shift)
    return out


def place(order: Sequence[int], sizes: Sequence[int], lifetimes: Sequence[Span], best_fit: bool,
          period: int | None = None, clashes: np.ndarray | None = None) -> tuple[int, ...]:
    """Each tensor in `order` at the lowest gap between those already placed and alive with it that holds
    it (`best_fit`: the tightest such gap), else above them all. With `period`, the ops repeat: lifetimes
    start within one period and are at most one long, and one running past its end goes on from its start
    (two clash when they share an op modulo the period). `clashes`: `clash_matrix(lifetimes, period)`."""
    if clashes is None:
        clashes = clash_matrix(lifetimes, period)
    lo, hi = np.zeros(len(sizes), dtype=np.int64), np.zeros(len(sizes), dtype=np.int64)
    placed = np.zeros(len(sizes), dtype=bool)
    offsets = [0] * len(sizes)
    for t in order:
        alive = clashes[t] & placed
        los, his = lo[alive], hi[alive]
        at = 0
        if los.size:
            by = np.argsort(los, kind="stable")
            los, reach = los[by], np.maximum.accumulate(his[by])
            starts = np.concatenate(([0], reach[:-1]))
            gaps = los - starts
            fits = np.flatnonzero(gaps >= sizes[t])
            if fits.size:
                at = int(starts[fits[np.argmin(gaps[fits])] if best_fit else fits[0]])
            else:
                at = int(reach[-1])
        offsets[t] = at
        lo[t], hi[t], placed[t] = at, at + sizes[t], True
    return tuple(offsets)
