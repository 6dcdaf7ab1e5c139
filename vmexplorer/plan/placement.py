"""Where tensors go in one pool: offsets planned from lifetimes, with no CUDA.

A static memory plan, as an allocator would reach at best: tensors alive at the same op never share a
byte, and a tensor that has died leaves its bytes to those created later. The planner is greedy, in the
spirit of tinygrad's `schedule/memory.py` and TFLite's greedy arenas: persistent tensors first, then the
rest by size (first fit) or op by op from the busiest (best fit); the smaller pool wins. The engine's
pools (`engine.memory` for `device` and managed memory) and the swap pool (`plan.pool`) are placed here.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import numpy as np

DEVICE_ALIGN = 512  # CuPy's own allocation unit: every tensor stays aligned for cuDNN and vector loads
MANAGED_ALIGN = 2 << 20  # the driver migrates managed memory in 2 MiB blocks: a tensor takes whole ones
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


def plan_offsets(sizes: Sequence[int], lifetimes: Sequence[Span], n_ops: int,
                 improve: int | None = None) -> tuple[int, ...]:
    """Offsets at which no two tensors alive at the same op overlap, searched (`search_offsets`) towards the
    peak: workspaces, alive one op each, leave gaps a greedy order alone does not fill. Sizes should
    already be aligned: offsets are sums of sizes."""
    persistent = [t for t, (first, _) in enumerate(lifetimes) if first < 0]
    return search_offsets(sizes, lifetimes, n_ops, persistent, peak_bytes(sizes, lifetimes, n_ops),
                          IMPROVE_PLACEMENTS if improve is None else improve)


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
    # each tensor's place in the one order every op's tensors are taken in: largest, then earliest, first
    rank = np.empty(len(sizes), dtype=np.int64)
    rank[sorted(range(len(sizes)), key=lambda t: (-sizes[t], lifetimes[t][0], t))] = np.arange(len(sizes))
    order = list(persistent)
    seen = np.zeros(len(sizes), dtype=bool)
    seen[persistent] = True
    for k in busiest:
        new = np.flatnonzero(alive[k] & ~seen)
        if new.size:
            order += new[np.argsort(rank[new])].tolist()
            seen[new] = True
    return order + np.flatnonzero(~seen).tolist()


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
          period: int | None = None, clashes: np.ndarray | None = None,
          neighbours: Sequence[np.ndarray] | None = None) -> tuple[int, ...]:
    """Each tensor in `order` at the lowest gap between those already placed and alive with it that holds
    it (`best_fit`: the tightest such gap), else above them all. With `period`, the ops repeat: lifetimes
    start within one period and are at most one long, and one running past its end goes on from its start
    (two clash when they share an op modulo the period). `clashes`: `clash_matrix(lifetimes, period)`;
    `neighbours`: its rows' nonzero columns (`neighbours_of`), worked out once for many placements."""
    if clashes is None:
        clashes = clash_matrix(lifetimes, period)
    if neighbours is None:
        neighbours = neighbours_of(clashes)
    n = len(sizes)
    lo, hi = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    placed = np.zeros(n, dtype=bool)
    offsets = [0] * n
    # what is alive at every op and placed first (the persistent tensors) stacks from 0 whichever the fit:
    # one block below all the others, never among the gaps sorted for them (it was most of each sort)
    base, k = 0, 0
    if n and min(sizes) > 0:
        everyone: np.ndarray = np.asarray(clashes.all(axis=1))
        while k < len(order) and everyone[order[k]]:
            offsets[order[k]], base, k = base, base + sizes[order[k]], k + 1
    # the loop runs once per tensor and placement, hundreds of thousands of times in a sweep: each step is one
    # numpy call on the few tensors alive beside it (no wrappers such as flatnonzero, no new arrays joined)
    never = np.iinfo(np.int64).max
    for t in order[k:]:
        nb = neighbours[t]
        nb = nb[placed[nb]]
        at = base
        if nb.size:
            los = lo[nb]
            by = los.argsort(kind="stable")
            reach = np.maximum.accumulate(hi[nb[by]])
            gaps = los[by]  # each gap: from the highest byte below it to the next tensor's start
            gaps[0] -= base
            gaps[1:] -= reach[:-1]
            fits = gaps >= sizes[t]
            # the first gap that holds it, or (best fit) the first of the tightest
            j = int(np.where(fits, gaps, never).argmin() if best_fit else fits.argmax())
            if fits[j]:
                at = int(reach[j - 1]) if j else base
            else:
                at = int(reach[-1])
        offsets[t] = at
        lo[t], hi[t], placed[t] = at, at + sizes[t], True
    return tuple(offsets)


def neighbours_of(clashes: np.ndarray) -> list[np.ndarray]:
    """Per tensor, the others alive with it: `clash_matrix`'s row as indices."""
    return [np.flatnonzero(row) for row in clashes]


IMPROVE_PLACEMENTS = 20_000  # tensors placed in all while improving a pool that outgrows its target (about 1 s)
IMPROVE_ROUNDS = 100  # and placements tried at most: a small graph's take a few ms each, and a plan is made in rounds


def top(offsets: Sequence[int], sizes: Sequence[int]) -> int:
    """The pool's size: the highest byte any placed tensor reaches."""
    return max(map(operator.add, offsets, sizes), default=0)


def search_offsets(sizes: Sequence[int], spans: Sequence[Span], n: int, always: list[int], target: int,
                   improve: int, period: int | None = None) -> tuple[int, ...]:
    """The smallest of six greedy placements (what is always there first, then by size, by the busiest
    op, or by time; first or best fit), then, while it outgrows `target`, the ones sticking out above it
    moved earlier in the order, as far as a seeded draw says ("squeaky wheel"): the best pool found within
    `improve` placements of one tensor (and `IMPROVE_ROUNDS` placements), so one input always gets the
    same offsets. `period`: as `place` reads lifetimes."""
    return _searched(sizes, spans, n, always, target, improve, period)[0]


def _searched(sizes: Sequence[int], spans: Sequence[Span], n: int, always: list[int], target: int, improve: int,
              period: int | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`search_offsets`'s placement, and the smallest greedy one it started from."""
    rest = sorted(set(range(len(sizes))) - set(always))
    orders = [always + sorted(rest, key=lambda i: (-sizes[i], spans[i][0], i)),
              by_breadth(sizes, spans, n, always, period=period),
              always + sorted(rest, key=lambda i: (spans[i][0], -sizes[i], i))]
    clashes = clash_matrix(spans, period=period)
    neighbours = neighbours_of(clashes)
    tried = [(place(order, sizes, spans, fit, period=period, clashes=clashes, neighbours=neighbours), order, fit)
             for order in orders for fit in (False, True)]
    offsets, order, fit = min(tried, key=lambda t: top(t[0], sizes))
    rng = np.random.default_rng(0)
    best, greedy, order = offsets, offsets, list(order)
    for _ in range(min(improve // max(len(sizes), 1), IMPROVE_ROUNDS)):
        if top(best, sizes) <= target:
            break
        out = [i for i in order if offsets[i] + sizes[i] > target and i not in always]
        position = {i: j for j, i in enumerate(order)}
        for i in sorted(out if len(out) <= 3 else rng.choice(out, len(out) // 2, replace=False).tolist(),
                        key=position.__getitem__):
            j = order.index(i)
            order.insert(max(len(always), j - int(rng.integers(1, j + 2))), order.pop(j))
        offsets = place(order, sizes, spans, fit, period=period, clashes=clashes, neighbours=neighbours)
        if top(offsets, sizes) < top(best, sizes):
            best = offsets
    return best, greedy


FITS_KEPT = 64  # placements `fit_stretches` remembers: a swap plan's pool is asked for again and again


def fit_stretches(sizes: Sequence[int], spans: Sequence[Span], n: int, always: list[int], fitting: Sequence[int],
                  target: int, floor: int, align: int, improve: int, period: int | None = None,
                  anew: bool = True) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`place_stretches`, remembered for the last `FITS_KEPT` inputs: it is a pure function of them, and
    the same plan's pool is placed several times over (fitting the room, ordering the copies, timing a
    plan by its workspaces, a run's or a sweep's pool), each placement taking up to a second."""
    return _fitted(tuple(sizes), tuple(spans), n, tuple(always), tuple(fitting), target, floor, align, improve,
                   period, anew)


@functools.lru_cache(maxsize=FITS_KEPT)
def _fitted(sizes: tuple[int, ...], spans: tuple[Span, ...], n: int, always: tuple[int, ...],
            fitting: tuple[int, ...], target: int, floor: int, align: int, improve: int, period: int | None,
            anew: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return place_stretches(sizes, spans, n, list(always), fitting, target, floor, align, improve, period, anew)


def place_stretches(sizes: Sequence[int], spans: Sequence[Span], n: int, always: list[int], fitting: Sequence[int],
                    target: int, floor: int, align: int, improve: int, period: int | None = None,
                    anew: bool = True) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(offsets, sizes): a placement within `target` where the tensors of `fitting` may shrink (a
    convolution's workspace: its kernel chooses an algorithm within what it is given), each by as little
    as this finds. First, at each op whose tensors hold more than the target, its tensors of `fitting` give
    up the excess (in `align` units, never below `floor`) and all are placed by the greedy orders alone;
    what fits is kept. Else each of `fitting` reaching above the target is placed again, the rest kept
    where they are; where others than those still reach above it, the others are placed anew
    (`search_offsets` towards the target) and all of `fitting` after them: a greedy order leaves gaps
    around one-op workspaces that these then take. A tensor placed again goes to the lowest stretch free
    below the target while it is alive that holds it whole, else to the largest, cut to it, else at the
    lowest gap that holds `floor` (or its size, if less). The lowest of what was tried, if none fits.
    Without `anew`, the first placement is improved instead and nothing is placed anew: the workspaces
    are cut only where they stick out of it, as little as that takes (placed anew, the others leave them
    stretches that may be far smaller than they are, and a convolution in less memory can be much
    slower)."""
    clashes = clash_matrix(spans, period=period)
    fit = set(fitting)
    out = np.array(sizes, dtype=np.int64)
    ops = [np.arange(first, last + 1) % (period or n) if first >= 0 else np.arange(n) for first, last in spans]
    held = np.zeros(n, dtype=np.int64)
    for size, at in zip(out, ops):
        held[at] += size
    for f in sorted(fit, key=lambda i: (-sizes[i], i)):
        excess = int(held[ops[f]].max(initial=0)) - target
        if excess > 0:
            cut = min(-(-excess // align) * align, max(int(out[f]) - floor, 0))
            out[f] -= cut
            held[ops[f]] -= cut
    # the greedy orders alone here: improving is spent on the others, if they need placing anew
    tried = []
    # the improved placement, and the greedy one it started from: cutting the workspaces that stick out may
    # leave either the smaller pool, and with both, improving never gives a larger pool than not
    for start in dict.fromkeys(_searched(out.tolist(), spans, n, always, target, 0 if anew else improve, period)):
        lo = np.array(start, dtype=np.int64)
        tried.append(_place_cut(lo, out, [f for f in fitting if lo[f] + out[f] > target], clashes, target, floor,
                                align, in_place=True))
    above = np.flatnonzero(min(tried, key=lambda placed: int(placed[0].max(initial=0)))[0] > target)
    if anew and above.size and fit and not all(i in fit for i in above):
        rest = [i for i in range(len(sizes)) if i not in fit]
        index = {t: j for j, t in enumerate(rest)}
        lo[rest] = search_offsets([int(out[i]) for i in rest], [spans[i] for i in rest], n,
                                  [index[a] for a in always], target, improve, period=period)
        tried.append(_place_cut(lo, out, sorted(fit, key=lambda i: (-sizes[i], i)), clashes, target, floor, align))
    best = min(tried, key=lambda placed: int(placed[0].max(initial=0)))
    return tuple(int(o) for o in best[1]), tuple(int(s) for s in best[2])


def _place_cut(lo: np.ndarray, out: np.ndarray, which: Sequence[int], clashes: np.ndarray, target: int, floor: int,
               align: int, in_place: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tops, offsets, sizes) with each of `which` placed again in turn as `fit_stretches` says, the
    others where `lo` has them. `in_place`: `which` are placed already, and each may also stay where it
    is, cut at the target (its own bytes are free of the others')."""
    lo, out = lo.copy(), out.copy()
    done = np.ones(len(lo), dtype=bool)
    done[list(which)] = False
    for f in which:
        alive = np.flatnonzero(clashes[f] & done)
        by = alive[np.argsort(lo[alive], kind="stable")]
        reach = np.maximum.accumulate(lo[by] + out[by]) if by.size else np.zeros(0, dtype=np.int64)
        starts = np.concatenate(([0], reach))  # each stretch from the highest byte below it...
        ends = np.minimum(np.concatenate((lo[by], [target])), target)  # ...to the next tensor, or the target
        room = (ends - starts) // align * align
        whole = np.flatnonzero(room >= out[f])
        best = int(whole[0]) if whole.size else int(np.argmax(room))
        stay = (target - lo[f]) // align * align if in_place else 0
        if not whole.size and stay >= max(room[best], min(floor, out[f])):  # cut at the target: the least cut
            out[f] = stay
        elif room[best] >= min(floor, out[f]):
            lo[f], out[f] = starts[best], min(out[f], room[best])
        else:
            out[f] = min(floor, out[f])
            gaps = np.concatenate((lo[by], [np.iinfo(np.int64).max])) - starts
            lo[f] = starts[int(np.flatnonzero(gaps >= out[f])[0])]
        done[f] = True
    return lo + out, lo, out
