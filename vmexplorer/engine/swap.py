"""The swap mechanism's memory: a device pool of the capacity, pinned host memory behind it.

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
from typing import Any

import numpy as np

from ..graph import Graph
from ..plan import Direction, Plan
from ..plan.stays import Event, Stay, stays
from ..units import format_bytes
from .memory import (
    DEVICE_ALIGN,
    DEVICE_SHARE,
    HOST_SHARE,
    Layout,
    ResourceError,
    _by_breadth,
    _place,
    aligned,
    available_host_bytes,
    layout,
)


@dataclass(frozen=True)
class SwapPool:
    """Where each stay is in the device pool, and what placing them there costs."""

    stays: tuple[Stay, ...]
    offsets: tuple[int, ...]  # per stay, bytes from the pool's start
    sizes: tuple[int, ...]  # per stay: its tensor's bytes, aligned
    total: int  # the pool's bytes
    peak: int  # the most (aligned) bytes in the pool at any op: no placement can do with less
    capacity: int
    kept_bytes: int  # tensors the host reads after the iteration, kept to its end: they may raise the peak so much
    elided: frozenset[int]  # memory operations that move nothing
    waits: dict[Event, tuple[Event, ...]]  # a step's waits for the ends of the stays whose bytes it takes

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
        return max(self.total - self.capacity, 0)

    def describe(self) -> str:
        """One line for the run's environment."""
        over = (f"{format_bytes(self.over_capacity)} over the capacity {format_bytes(self.capacity)}"
                if self.over_capacity else f"within the capacity {format_bytes(self.capacity)}")
        return (f"{self.total} bytes ({format_bytes(self.total)}), {over}; the plan's peak {self.peak} bytes, "
                f"fragmentation {self.total - self.peak} bytes; kept to the iteration's end {self.kept_bytes} bytes")


def plan_pool(graph: Graph, plan: Plan, kept: Collection[int] = (), align: int = DEVICE_ALIGN,
              improve: int | None = None) -> SwapPool:
    """Offsets for a swap plan's stays: the smallest pool `_offsets` finds, improving for `improve` stay
    placements (default `IMPROVE_PLACEMENTS`)."""
    all_stays, elided = stays(graph, plan, kept)
    n = len(graph.ops)
    sizes = tuple(aligned(graph.tensors[s.tensor].nbytes, align) for s in all_stays)
    spans = [(s.first, s.last) for s in all_stays]
    peak, kept_bytes = _peak(all_stays, sizes, n, kept)
    offsets = _offsets(sizes, spans, n, [i for i, s in enumerate(all_stays) if s.begin is None and s.end is None],
                       max(plan.capacity, peak), IMPROVE_PLACEMENTS if improve is None else improve)
    total = _top(offsets, sizes)
    return SwapPool(all_stays, offsets, sizes, total, peak, plan.capacity, kept_bytes, elided,
                    pool_waits(all_stays, offsets, sizes))


IMPROVE_PLACEMENTS = 20_000  # stays placed in all while improving a pool that outgrows its target (about 1 s)


def _top(offsets: Sequence[int], sizes: Sequence[int]) -> int:
    return max((o + s for o, s in zip(offsets, sizes)), default=0)


def _offsets(sizes: Sequence[int], spans: Sequence[tuple[int, int]], n: int, always: list[int],
             target: int, improve: int) -> tuple[int, ...]:
    """The smallest of `memory`'s greedy placements (stays that are always there first, then by size, by
    the busiest op, or by time; first or best fit), then, while it outgrows `target`, the stays sticking
    out above it moved earlier in the order, as far as a seeded draw says ("squeaky wheel"): the best
    pool found within a fixed number of placements, so a plan always gets the same offsets."""
    rest = sorted(set(range(len(sizes))) - set(always))
    orders = [always + sorted(rest, key=lambda i: (-sizes[i], spans[i][0], i)),
              _by_breadth(sizes, spans, n, always, period=n),
              always + sorted(rest, key=lambda i: (spans[i][0], -sizes[i], i))]
    tried = [(_place(order, sizes, spans, fit, period=n), order, fit) for order in orders for fit in (False, True)]
    offsets, order, fit = min(tried, key=lambda t: _top(t[0], sizes))
    rng = np.random.default_rng(0)
    best, order = offsets, list(order)
    for _ in range(improve // max(len(sizes), 1)):
        if _top(best, sizes) <= target:
            break
        out = [i for i in order if offsets[i] + sizes[i] > target and i not in always]
        position = {i: j for j, i in enumerate(order)}
        for i in sorted(out if len(out) <= 3 else rng.choice(out, len(out) // 2, replace=False).tolist(),
                        key=position.__getitem__):
            j = order.index(i)
            order.insert(max(len(always), j - int(rng.integers(1, j + 2))), order.pop(j))
        offsets = _place(order, sizes, spans, fit, period=n)
        if _top(offsets, sizes) < _top(best, sizes):
            best = offsets
    return best


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


def check_swap_resources(pool: int, host: int, free_device: int, available_host: int) -> None:
    """Refuse a swap run the machine cannot hold, before anything is allocated: the pool is real device
    memory, and the host copies pinned RAM."""
    if pool > DEVICE_SHARE * free_device:
        raise ResourceError(f"this run's pool needs {format_bytes(pool)} of device memory, but the GPU has "
                            f"{format_bytes(free_device)} free and a run may take at most {DEVICE_SHARE:.0%} of it")
    if host > HOST_SHARE * available_host:
        raise ResourceError(f"this run needs {format_bytes(host)} of pinned host RAM for its host copies, but only "
                            f"{format_bytes(available_host)} is available; use a smaller batch")


class SwapArena:
    """A swap run's memory (GPU only): the pool, allocated outside CuPy's memory pool as `memory.Arena`
    allocates `device`'s, and pinned host memory with a slot per tensor placed by lifetime (a host copy
    holds data only within its tensor's lifetime). `views` are where the host reads each tensor after an
    iteration."""

    managed = False

    def __init__(self, graph: Graph, plan: Plan, keep: Collection[int] = ()) -> None:
        import cupy as cp

        self.graph = graph
        self.pool = plan_pool(graph, plan, keep)
        self.host_layout: Layout = layout(graph, DEVICE_ALIGN, keep)
        self.free_before, _ = cp.cuda.runtime.memGetInfo()
        check_swap_resources(self.pool.total, self.host_layout.total, self.free_before, available_host_bytes())
        self.memory = cp.cuda.MemoryPointer(cp.cuda.Memory(max(self.pool.total, 1)), 0)
        # outside CuPy's pinned pool too, which would keep it cached after the run
        self.host = cp.cuda.PinnedMemoryPointer(cp.cuda.PinnedMemory(max(self.host_layout.total, 1)), 0)
        self.resident = {t for t, _ in plan.resident_at_start}
        self._copies = self._plan_copies(plan)

    @property
    def pool_bytes(self) -> int:
        return self.pool.total

    def _view(self, t: int, offset: int) -> Any:
        import cupy as cp

        tensor = self.graph.tensors[t]
        return cp.ndarray(tensor.shape, cp.dtype(tensor.dtype), memptr=self.memory + offset)

    def _host_view(self, t: int) -> np.ndarray:
        tensor = self.graph.tensors[t]
        raw = np.frombuffer(self.host, dtype=np.uint8, count=tensor.nbytes, offset=self.host_layout.offsets[t])
        return raw.view(np.dtype(tensor.dtype)).reshape(tensor.shape)

    def operands(self) -> list[tuple[list[Any], list[Any]]]:
        """Per op, its reads and writes as views where their stays put them while it runs."""
        at_op = self.pool.offsets_at_ops(len(self.graph.ops))
        return [([self._view(t, at_op[k][t]) for t in op.reads], [self._view(t, at_op[k][t]) for t in op.writes])
                for k, op in enumerate(self.graph.ops)]

    def _carried_offset(self, t: int) -> int | None:
        return next((o for s, o in zip(self.pool.stays, self.pool.offsets) if s.tensor == t and s.carried), None)

    def write(self, t: int, value: np.ndarray) -> None:
        """A persistent tensor's starting value, where the plan's iteration starts it: its stay, or its host slot."""
        offset = self._carried_offset(t) if t in self.resident else None
        if offset is None:
            self._host_view(t)[...] = value
        else:
            self._view(t, offset).set(value)

    def read(self, t: int) -> np.ndarray:
        """A tensor's value after an iteration: from its stay if one lasts to the end, else its host slot."""
        last = [(s, o) for s, o in zip(self.pool.stays, self.pool.offsets)
                if s.tensor == t and (s.carried or s.end is None)]
        if last:
            return self._view(t, last[0][1]).get()
        return self._host_view(t).copy()

    def start_bytes(self) -> list[int]:
        """Bytes each tensor has in the pool as an iteration begins, as the executor's ledger starts; the
        starting values written (`write`) have landed by then."""
        import cupy as cp

        cp.cuda.runtime.deviceSynchronize()
        return [t.nbytes if i in self.resident else 0 for i, t in enumerate(self.graph.tensors)]

    def _plan_copies(self, plan: Plan) -> list[tuple[int, int, int, int] | None]:
        """Per memory operation, cudaMemcpyAsync's (destination, source, bytes, kind); None: it moves nothing."""
        import cupy as cp

        begins = {s.begin: o for s, o in zip(self.pool.stays, self.pool.offsets) if s.begin is not None}
        ends = {s.end: o for s, o in zip(self.pool.stays, self.pool.offsets) if s.end is not None}
        device, host = int(self.memory.ptr), int(self.host.ptr)
        out: list[tuple[int, int, int, int] | None] = []
        for i, m in enumerate(plan.memops):
            nbytes = self.graph.tensors[m.tensor].nbytes
            slot = host + self.host_layout.offsets[m.tensor]
            if i in self.pool.elided:
                out.append(None)
            elif m.direction is Direction.TO_DEVICE:
                out.append((device + begins[("memop", i)], slot, nbytes, cp.cuda.runtime.memcpyHostToDevice))
            else:
                out.append((slot, device + ends[("memop", i)], nbytes, cp.cuda.runtime.memcpyDeviceToHost))
        return out

    def copy(self, memop: int, stream: Any) -> None:
        """cudaMemcpyAsync of one memory operation on `stream` (nothing for one that moves nothing)."""
        import cupy as cp

        call = self._copies[memop]
        if call is not None:
            dst, src, nbytes, kind = call
            cp.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)

    def device_bytes_taken(self) -> int:
        import cupy as cp

        return self.free_before - int(cp.cuda.runtime.memGetInfo()[0])
