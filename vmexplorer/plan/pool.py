"""The swap mechanism's device pool, planned with no CUDA: where each stay of a swap plan sits in it.

Under `swap` no driver pages anything: a tensor is in the pool or on the host whole, and moves by
cudaMemcpyAsync. It takes pool bytes for a stay: from the moment its copy in starts (or the op creating
it runs) until its copy out completes (or its last op has run). A tensor brought back may land at another
offset, so offsets belong to stays, not tensors; they are planned here, with no CUDA, so that no two
stays that hold the pool at the same op share a byte. The iteration repeats, so a stay that crosses its
end (a weight brought in late for the next iteration's first ops) holds its bytes on both sides of it.

Where a stay takes over bytes another held earlier in the iteration, its first step waits for that
stay's end (`SwapPool.waits`): the copy out reading them, or the op they died at. Across iterations the
executor synchronises every stream, so these waits stay within one. A tensor copied in and straight back
out before any op touches it (the repair making room with a copy still arriving) holds no bytes at any op:
its host copy is already what it would bring and take back, so neither copy moves anything (`elided`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from ..graph import WORKSPACE_FLOOR, Graph, Kind
from ..units import format_bytes
from .mechanisms import managed, mechanism_of
from .placement import DEVICE_ALIGN, IMPROVE_PLACEMENTS, MANAGED_ALIGN, Span, aligned, fit_stretches, plan_offsets, top
from .plan import Plan
from .stays import Event, Stay, stays

KEPT_SUFFIXES = (".weight.grad", ".bias.grad", ".mask")  # what keep_weights returns beside persistent tensors

# What the engine takes of the device beside its pool, so that the memory a run takes keeps to its capacity
# (measured on the H200 in a second run of one process, bench/results/h200/probe_taken.jsonl): device memory
# comes in pages of `GRANULE` (cudaMemGetInfo reads it so); the kernels' temporaries in CuPy's pool (cuBLAS's
# workspace and reductions, up to 2.9 MiB for AlexNet b256) take `KERNEL_TEMPORARIES`; and under swap the
# GPU maps the pinned host copies with page tables of about 8 bytes a 4 KiB page (VGG-19 b64: 11 MiB).
GRANULE = 2 << 20
KERNEL_TEMPORARIES = 2 * GRANULE
PINNED_PAGE_TABLES = 512  # host bytes per byte of page tables


def pool_limit(capacity: int, pinned_host_bytes: int = 0) -> int:
    """The most bytes a run's pool may have for the run to keep to `capacity`: the capacity less what the
    engine takes beside the pool (see `GRANULE`), in whole pages. The memory a run takes is what the tool
    must not bend: a pool over this is a run over its capacity."""
    reserve = KERNEL_TEMPORARIES + -(-pinned_host_bytes // PINNED_PAGE_TABLES)
    return max((capacity - reserve) // GRANULE * GRANULE, 0)


def kept_tensors(graph: Graph, keep_weights: bool) -> frozenset[int]:
    """Tensors an op creates that the host reads after the iteration, so no later tensor may take their
    bytes in the pool: the loss, and with `keep_weights` the weight gradients and dropout masks."""
    return frozenset(t for t, tensor in enumerate(graph.tensors) if not tensor.persistent and (
        tensor.name == "loss.value" or keep_weights and tensor.name.endswith(KEPT_SUFFIXES)))


def spans(graph: Graph, keep: Collection[int] = ()) -> tuple[Span, ...]:
    """Each tensor's lifetime in ops: persistent tensors live across iterations; a tensor in `keep` (one
    the host reads after the iteration, such as the loss) lives from its producer to the iteration's end."""
    n = len(graph.ops)
    return tuple((-1, n) if t.persistent else (t.producer, n if i in keep else graph.last_use[i])
                 for i, t in enumerate(graph.tensors))


def fitted_workspaces(graph: Graph) -> list[int]:
    """The workspace tensors a pool may cut to the stretch it has for them: convolutions' (a fixed
    scratch, such as a max pool's argmax, stays whole)."""
    return [t for t, tensor in enumerate(graph.tensors)
            if tensor.kind is Kind.WORKSPACE and dict(graph.ops[tensor.producer].attrs).get("workspace")]


def device_pool(graph: Graph, align: int, keep: Collection[int] = (), capacity: int | None = None,
                cut: bool | None = None) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Span, ...]]:
    """(offsets, aligned sizes, lifetimes) of every tensor in the one pool a run without paging (and a
    managed run) allocates: no two alive at one op overlap. Placed within `capacity` where given, the
    convolutions' workspaces cut, where the others leave them less, to the stretches left for them
    (`fit_stretches`): such a size is less than its tensor's bytes (`shrunk_workspaces`). `cut` as
    `plan_pool`'s: False, cut where they stick out of a placement; True, the others placed anew and the
    workspaces cut to the stretches they leave; None, the first that fits."""
    lifetimes = spans(graph, keep)
    sizes = tuple(aligned(t.nbytes, align) for t in graph.tensors)
    n = len(graph.ops)
    fitting = fitted_workspaces(graph)
    if capacity is None or not fitting:
        return plan_offsets(sizes, lifetimes, n), sizes, lifetimes
    persistent = [t for t, (first, _) in enumerate(lifetimes) if first < 0]
    floor = aligned(WORKSPACE_FLOOR, align)
    for anew in (False, True) if cut is None else (cut,):  # as `plan_pool`: placed anew only where needed
        offsets, given = fit_stretches(sizes, lifetimes, n, persistent, fitting, capacity, floor, align,
                                       IMPROVE_PLACEMENTS, anew=anew)
        if top(offsets, given) <= capacity:
            break
    return offsets, given, lifetimes


def shrunk_workspaces(graph: Graph, tensors: Sequence[int], sizes: Sequence[int], align: int) -> Graph:
    """`graph` with each workspace among `tensors` that a pool gave less than its bytes (`sizes`, aligned,
    `tensors[i]`'s in `sizes[i]`) as large as what it was given: the graph its run executes."""
    cut = {t: size for t, size in zip(tensors, sizes)
           if graph.tensors[t].kind is Kind.WORKSPACE and size < aligned(graph.tensors[t].nbytes, align)}
    return graph.with_workspaces(cut) if cut else graph


@dataclass(frozen=True)
class Layout:
    """Where each tensor of a run without stays lives in its one pool (`device_pool`)."""

    offsets: tuple[int, ...]  # bytes from the pool's start, per tensor
    sizes: tuple[int, ...]  # each tensor's bytes rounded up to `align`: what it occupies (a workspace: what it got)
    spans: tuple[Span, ...]
    total: int  # the pool's size
    align: int

    def range(self, tensor: int) -> tuple[int, int]:
        """(start, end) of the tensor's bytes in the pool, padding included."""
        return self.offsets[tensor], self.offsets[tensor] + self.sizes[tensor]

    def executed(self, graph: Graph) -> Graph:
        """`graph` (the one placed) with its workspaces as large as this pool gives them."""
        return shrunk_workspaces(graph, range(len(graph.tensors)), self.sizes, self.align)


def layout(graph: Graph, align: int = MANAGED_ALIGN, keep: Collection[int] = (), capacity: int | None = None,
           cut: bool | None = None) -> Layout:
    """Where each tensor lives in a run's one pool (`device_pool`; within `capacity`, a workspace may have
    less than its tensor's bytes)."""
    offsets, sizes, lifetimes = device_pool(graph, align, keep, capacity, cut)
    return Layout(offsets, sizes, lifetimes, top(offsets, sizes), align)


def run_pool(graph: Graph, plan: Plan, keep: Collection[int], cut: bool | None = None) -> Layout | SwapPool:
    """The pool a run of `plan` places `graph`'s tensors in (`engine.executor.execute` allocates it): swap
    the plan's stays (`plan_pool`); `device` one pool within what the capacity leaves it (`pool_limit`);
    managed memory every tensor whole, on blocks of its own (the driver evicts within it, so its size is
    not held to the capacity). `graph`: sized for the plan's room. `cut`: which way a pool cuts workspaces
    (`plan_pool`); None, as the engine does. The one rule for where a run's tensors are and what
    workspaces it has: the engine allocates this, and the simulator times `executed_graph`, its graph."""
    if mechanism_of(plan).whole_tensors:  # whole tensors moved in and out: the pool places their stays
        return plan_pool(graph, plan, keep, cut=cut)
    if managed(plan):
        return layout(graph, MANAGED_ALIGN, keep)
    return layout(graph, DEVICE_ALIGN, keep, pool_limit(plan.capacity), cut)


def executed_graph(graph: Graph, plan: Plan, keep: Collection[int] | None = None, cut: bool | None = None) -> Graph:
    """The graph a run of `plan` executes (`run_pool`'s): fitted to the plan's room, its convolutions'
    workspaces as large as its pool has room for. `keep`: the tensors the host reads after the iteration
    (a timed run's, if None). `cut`: as `run_pool`'s."""
    graph = plan.graph_of(graph)
    if managed(plan):
        return graph  # a managed pool holds every tensor whole (`run_pool`): nothing to place
    keep = kept_tensors(graph, keep_weights=False) if keep is None else keep
    return run_pool(graph, plan, keep, cut).executed(graph)


@dataclass(frozen=True)
class SwapPool:
    """Where each stay is in the device pool, and what placing them there costs."""

    stays: tuple[Stay, ...]
    offsets: tuple[int, ...]  # per stay, bytes from the pool's start
    sizes: tuple[int, ...]  # per stay: its tensor's bytes, aligned (a workspace's: what the pool had for it)
    total: int  # the pool's bytes
    peak: int  # the most (aligned) bytes in the pool at any op: no placement can do with less
    capacity: int
    limit: int  # what the capacity leaves the pool (`pool_limit`)
    kept_bytes: int  # tensors the host reads after the iteration, kept to its end: they may raise the peak so much
    elided: frozenset[int]  # memory operations that move nothing
    waits: dict[Event, tuple[Event, ...]]  # a step's waits for the ends of the stays whose bytes it takes
    align: int = DEVICE_ALIGN

    def executed(self, graph: Graph) -> Graph:
        """`graph` (the one placed) with its workspaces as large as this pool gives their stays."""
        return shrunk_workspaces(graph, [s.tensor for s in self.stays], self.sizes, self.align)

    def offsets_at_ops(self, n_ops: int) -> list[dict[int, int]]:
        """Per op, each tensor in the pool while it runs -> its stay's offset."""
        out: list[dict[int, int]] = [{} for _ in range(n_ops)]
        for s, offset in zip(self.stays, self.offsets):
            for k in range(s.first, s.last + 1):
                out[k % n_ops][s.tensor] = offset
        return out

    @property
    def fragmentation(self) -> int:
        """Pool bytes no stay can use: the pool less its peak."""
        return self.total - self.peak

    @property
    def over_capacity(self) -> int:
        """Bytes the pool has beyond what the capacity leaves it."""
        return max(self.total - self.limit, 0)

    def describe(self) -> str:
        """One line for the run's environment."""
        within = (f"the {format_bytes(self.limit)} the capacity {format_bytes(self.capacity)} leaves it beside the "
                  "kernels' temporaries and the pinned copies' page tables")
        over = f"{format_bytes(self.over_capacity)} over {within}" if self.over_capacity else f"within {within}"
        return (f"{self.total} bytes ({format_bytes(self.total)}), {over}; the plan's peak {self.peak} bytes, "
                f"fragmentation {self.total - self.peak} bytes; kept to the iteration's end {self.kept_bytes} bytes")


def plan_pool(graph: Graph, plan: Plan, kept: Collection[int] = (), align: int = DEVICE_ALIGN,
              improve: int | None = None, cut: bool | None = None) -> SwapPool:
    """Offsets for a swap plan's stays within what its capacity leaves the pool (`pool_limit`), where
    `fit_stretches` finds a placement there, improving for `improve` stay placements (default
    `IMPROVE_PLACEMENTS`). The convolutions' workspaces are cut where they stick out of the placement
    (`cut` False); only where that does not fit are the others placed anew and the workspaces cut to the
    stretches they leave, which may be far smaller (`cut` True; None: the first that fits)."""
    graph = plan.graph_of(graph)
    all_stays, elided = stays(graph, plan, kept)
    n = len(graph.ops)
    sizes = tuple(aligned(graph.tensors[s.tensor].nbytes, align) for s in all_stays)
    spans = [(s.first, s.last) for s in all_stays]
    peak, kept_bytes = _peak(all_stays, sizes, n, kept)
    always = [i for i, s in enumerate(all_stays) if s.begin is None and s.end is None]
    fits = set(fitted_workspaces(graph))
    fitting = [i for i, s in enumerate(all_stays) if s.tensor in fits]
    limit = pool_limit(plan.capacity, graph.footprint)  # the pinned copies: about a footprint (`device_pool`)
    improve = IMPROVE_PLACEMENTS if improve is None else improve
    whole = sizes
    offsets, sizes = fit_stretches(whole, spans, n, always, fitting, max(limit, peak), aligned(WORKSPACE_FLOOR, align),
                                   align, improve, period=n, anew=bool(cut))
    if cut is None and fitting and top(offsets, sizes) > limit:
        offsets, sizes = fit_stretches(whole, spans, n, always, fitting, max(limit, peak),
                                       aligned(WORKSPACE_FLOOR, align), align, improve, period=n, anew=True)
    if fitting:
        peak, kept_bytes = _peak(all_stays, sizes, n, kept)
    total = top(offsets, sizes)
    return SwapPool(all_stays, offsets, sizes, total, peak, plan.capacity, limit, kept_bytes, elided,
                    pool_waits(all_stays, offsets, sizes), align)


def _peak(all_stays: Sequence[Stay], sizes: Sequence[int], n: int, kept: Collection[int]) -> tuple[int, int]:
    """The most bytes in the pool at one op, and the kept tensors' bytes (what keeping them to the
    iteration's end can add to the plan's peak at most)."""
    held = np.zeros(2 * n, dtype=np.int64)
    for s, size in zip(all_stays, sizes):
        held[s.first:s.last + 1] += size
    kept_bytes = sum({s.tensor: size for s, size in zip(all_stays, sizes) if s.tensor in kept}.values())
    return int((held[:n] + held[n:]).max(initial=0)), kept_bytes


def pool_waits(all_stays: Sequence[Stay], offsets: Sequence[int],
               sizes: Sequence[int]) -> dict[Event, tuple[Event, ...]]:
    """For each stay's begin, the ends of the stays that held any of its bytes earlier in the iteration;
    of those, only the latest for each byte (a later one has waited for the earlier itself)."""
    ends = np.array([i for i, s in enumerate(all_stays) if s.end is not None], dtype=np.int64)
    end_at = np.array([all_stays[j].end_at for j in ends], dtype=np.int64)
    lows = np.array(offsets, dtype=np.int64)[ends]
    highs = lows + np.array(sizes, dtype=np.int64)[ends]
    waits: dict[Event, list[Event]] = {}
    for i, s in enumerate(all_stays):
        if s.begin is None:
            continue
        lo, hi = offsets[i], offsets[i] + sizes[i]
        found = np.flatnonzero((end_at < s.begin_at) & (lows < hi) & (lo < highs))
        before = ends[found[np.argsort(-end_at[found], kind="stable")]].tolist()
        covered: list[tuple[int, int]] = []
        for j in before:
            piece = (max(lo, offsets[j]), min(hi, offsets[j] + sizes[j]))
            if not _covers(covered, piece):
                end = all_stays[j].end
                assert end is not None
                waits.setdefault(s.begin, []).append(end)
                covered.append(piece)
    return {k: tuple(dict.fromkeys(v)) for k, v in waits.items()}


def _covers(ranges: list[tuple[int, int]], piece: tuple[int, int]) -> bool:
    at = piece[0]
    for s, e in sorted(ranges):
        if s > at:
            break
        at = max(at, e)
    return at >= piece[1]
