"""Where a run's tensors live: one pool, each tensor at an offset planned from its lifetime.

Tensors alive at the same op never share a byte, and a tensor that has died leaves its bytes to those
created later (`plan.placement`), so the pool is the graph's footprint plus alignment (and, rarely, a
little fragmentation), not the sum of every tensor.

Managed memory for the paging policies, each tensor on its own 2 MiB blocks: the driver migrates managed
memory in 2 MiB blocks, and no two tensors alive at once share one, so moving a tensor never drags a live
neighbour's pages (a block may hold a dead tensor's bytes: `dead_bytes`). Plain device
memory for `device`, aligned as CuPy aligns its own allocations. Before anything is allocated the run is
checked against the free GPU memory and host RAM: the capacity is emulated, so the real card is never
over-subscribed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph import Graph
from ..plan.pool import Layout
from ..units import format_bytes

MANAGED_SHARE = 0.5  # managed memory stays well under the free device memory (docs/design.md's safety rule)
DEVICE_SHARE = 0.9
HOST_SHARE = 0.8


class ResourceError(RuntimeError):
    """The machine cannot hold this run; the message says what is short and by how much."""


Range = tuple[int, int]  # [start, end) bytes in the pool


@dataclass(frozen=True)
class DeadBytes:
    """Which bytes of the pool the executor discards and populates, op by op, in the steady state.

    The bytes a dead tensor leaves are either taken over in place by the next tensor placed on them
    (nothing moves, nothing is called) or discarded after its last op and populated on the device just
    before the next one's producer runs (discard and prefetch: nothing migrates, where a kernel touching
    discarded pages would fault each one in, far slower). Dead bytes wait on the device for their next
    tensor only within the room the device has beyond its live tensors while each op runs, the shortest
    waits first: the device never holds more than the capacity, and no dead byte ever moves. With no
    room, they stay only where the very next op's new tensors take them over. Planned in `align` blocks."""

    at_start: tuple[Range, ...]  # discarded as an iteration begins
    kept: tuple[int, ...]  # tensors the host reads after the iteration: they never die within it
    kept_ranges: tuple[Range, ...]  # their bytes to discard as the next iteration begins (the host has read them)
    discard_after: tuple[tuple[Range, ...], ...]  # per op
    populate_before: tuple[tuple[tuple[int, int, int], ...], ...]  # per op: (start, end, op that discarded it;
    # -1: as the iteration began)
    dying: tuple[tuple[int, ...], ...]  # per op: the tensors whose last op it is (kept ones never die)
    held: tuple[int, ...]  # per op: dead bytes waiting on the device for their next tensor while it runs

    def discarded_bytes(self) -> int:
        """Per iteration, the kept tensors' bytes included."""
        return sum(e - s for ranges in (*self.discard_after, self.kept_ranges) for s, e in ranges)


def dead_bytes(pool: Layout, n_ops: int, room: Sequence[int] | None = None) -> DeadBytes:
    """`room[k]`: the bytes the device may hold while op k runs beyond its live tensors (the capacity less
    what the executor's ledger holds then); None: none."""
    free = np.zeros(n_ops, dtype=np.int64) if room is None else np.array(room, dtype=np.int64)
    held = np.zeros(n_ops, dtype=np.int64)
    discard: list[list[Range]] = [[] for _ in range(n_ops)]
    populate: list[list[tuple[int, int, int]]] = [[] for _ in range(n_ops)]
    start: list[Range] = []
    kept_ranges: list[Range] = []
    for died, reborn, block, kept in sorted(_waits(pool, n_ops), key=lambda w: (w[1] - w[0], w[2])):
        ops = np.arange(died + 1, reborn) % n_ops
        if (free[ops] >= pool.align).all():  # it waits on the device
            free[ops] -= pool.align
            held[ops] += pool.align
            continue
        r = (block * pool.align, (block + 1) * pool.align)
        (kept_ranges if kept else discard[died]).append(r)
        if reborn >= n_ops and not kept:  # discarded in the iteration before: so as this one begins
            start.append(r)
        populate[reborn % n_ops].append((*r, died if reborn < n_ops else -1))
    temporaries = [t for t, (first, last) in enumerate(pool.spans) if first >= 0]
    dying: list[list[int]] = [[] for _ in range(n_ops)]
    for t in temporaries:
        if pool.spans[t][1] < n_ops:
            dying[pool.spans[t][1]].append(t)
    return DeadBytes(tuple(_union(start)), tuple(t for t in temporaries if pool.spans[t][1] >= n_ops),
                     tuple(_union(kept_ranges)), tuple(tuple(_union(d)) for d in discard),
                     tuple(tuple(_merge(p)) for p in populate), tuple(tuple(d) for d in dying),
                     tuple(int(h) for h in held))


def _waits(pool: Layout, n_ops: int) -> list[tuple[int, int, int, bool]]:
    """(op after which a block's tensor dies, op whose tensor next takes the block, the block, whether the
    dead one is kept) for each time a block lies dead across at least one op. The iteration repeats, so
    the op after which the last tensor on a block dies is followed by the op (+ n_ops) whose tensor is
    first on it; a kept tensor dies as the next iteration begins."""
    on: dict[int, list[tuple[int, int, bool]]] = {}
    for t, (first, last) in enumerate(pool.spans):
        if first < 0:
            continue
        start, end = pool.range(t)
        for block in range(start // pool.align, end // pool.align):
            on.setdefault(block, []).append((first, min(last, n_ops - 1), last >= n_ops))
    out = []
    for block, tenants in on.items():
        tenants.sort()
        for i, (_, died, kept) in enumerate(tenants):
            reborn = tenants[i + 1][0] if i + 1 < len(tenants) else tenants[0][0] + n_ops
            if reborn > died + 1:
                out.append((died, reborn, block, kept))
    return out


def _union(ranges: Sequence[Range]) -> list[Range]:
    out: list[list[int]] = []
    for s, e in sorted(ranges):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _merge(pieces: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Adjacent pieces discarded after the same op, as one."""
    out: list[list[int]] = []
    for s, e, op in sorted(pieces, key=lambda p: (p[2], p[0])):
        if out and out[-1][2] == op and out[-1][1] == s:
            out[-1][1] = e
        else:
            out.append([s, e, op])
    return [(s, e, op) for s, e, op in out]


def check_resources(total: int, capacity: int, managed: bool, free_device: int, available_host: int) -> None:
    """Refuse a run the machine cannot hold safely, before anything is allocated."""
    share = MANAGED_SHARE if managed else DEVICE_SHARE
    kind = "managed" if managed else "device"
    if total > share * free_device:
        raise ResourceError(f"this run needs {format_bytes(total)} of {kind} memory, but the GPU has "
                            f"{format_bytes(free_device)} free and a run may take at most {share:.0%} of "
                            "it; use a smaller batch or model")
    if managed and capacity > share * free_device:
        raise ResourceError(f"capacity {format_bytes(capacity)} is not well under the GPU's free memory "
                            f"({format_bytes(free_device)}); the capacity is emulated and must stay below "
                            f"{share:.0%} of it")
    if managed and total > HOST_SHARE * available_host:
        raise ResourceError(f"this run needs {format_bytes(total)} of host RAM to page into, but only "
                            f"{format_bytes(available_host)} is available; use a smaller batch")


def available_host_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Arena:
    """The run's tensors as CuPy arrays over one pool (GPU only).

    The pool is allocated outside CuPy's memory pool, so what CuPy's pool holds afterwards is the kernels'
    temporaries (and the convolutions' workspaces in a graph without them); `device_bytes_taken` reads
    cudaMemGetInfo against the reading taken just before the pool was allocated. For managed memory that
    reading says little: the driver keeps the physical chunks of pages once touched, wherever the pages
    are now."""

    def __init__(self, graph: Graph, pool: Layout, managed: bool, capacity: int) -> None:
        """`pool`: where `graph`'s tensors go (`plan.pool.run_pool`); this run executes `pool.executed(graph)`."""
        import cupy as cp

        self.layout = pool
        self.free_before, _ = cp.cuda.runtime.memGetInfo()
        check_resources(self.layout.total, capacity, managed, self.free_before, available_host_bytes())
        self.managed = managed
        self.graph = pool.executed(graph)
        size = max(self.layout.total, 1)
        self.memory = (cp.cuda.malloc_managed(size) if managed
                       else cp.cuda.MemoryPointer(cp.cuda.Memory(size), 0))
        self.views: list[Any] = [
            cp.ndarray(t.shape, cp.dtype(t.dtype), memptr=self.memory + off)
            for t, off in zip(self.graph.tensors, self.layout.offsets)
        ]

    @property
    def pool_bytes(self) -> int:
        return self.layout.total

    def operands(self) -> list[tuple[list[Any], list[Any]]]:
        """Per op, its reads and writes as views into the pool."""
        return [([self.views[t] for t in op.reads], [self.views[t] for t in op.writes]) for op in self.graph.ops]

    def write(self, tensor: int, value: Any) -> None:
        self.views[tensor].set(value)

    def read(self, tensor: int) -> Any:
        """The tensor's value, on the host."""
        return self.views[tensor].get()

    def ptr(self, tensor: int) -> int:
        return int(self.memory.ptr) + self.layout.offsets[tensor]

    def at(self, offset: int) -> int:
        return int(self.memory.ptr) + offset

    def device_bytes_taken(self) -> int:
        import cupy as cp

        return self.free_before - int(cp.cuda.runtime.memGetInfo()[0])
