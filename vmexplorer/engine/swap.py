"""The swap mechanism's memory on the GPU: the device pool `plan.pool` places a plan's stays in, and
pinned host memory behind it.

Under `swap` no driver pages anything: a tensor is in the pool or on the host whole, and moves by
cudaMemcpyAsync, to and from the offsets its stays were given.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from ..graph import Graph
from ..plan import Direction, Plan, PlanError
from ..plan.placement import DEVICE_ALIGN
from ..plan.pool import Layout, SwapPool, kept_tensors, layout
from ..units import format_bytes
from .memory import DEVICE_SHARE, HOST_SHARE, ResourceError, available_host_bytes


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

    def __init__(self, graph: Graph, plan: Plan, pool: SwapPool, keep: Collection[int] = ()) -> None:
        """`pool`: where `plan`'s stays go (`plan.pool.run_pool`); this run executes `pool.executed(graph)`."""
        import cupy as cp

        self.pool = pool
        self.graph = graph = pool.executed(graph)
        if self.pool.over_capacity and set(keep) <= kept_tensors(graph, keep_weights=False):
            # with weights kept for the host (a check of the numbers, not a timed run) the pool may grow
            raise PlanError(f"this swap plan's pool needs {format_bytes(self.pool.total)}, over its capacity "
                            f"{format_bytes(plan.capacity)}: it was made before plans were held to the pool that "
                            "places them (a session of schema 9 or older); plan it again")
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
