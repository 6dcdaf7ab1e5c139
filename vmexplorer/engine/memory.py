"""Where a run's tensors live: one arena, each tensor its own 2 MiB-aligned range.

Managed memory for the paging policies (so moving one tensor never drags a neighbour's pages),
plain device memory for `device`. Before anything is allocated the run is checked against the free
GPU memory and host RAM: the capacity is emulated, so the real card is never over-subscribed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..graph import Graph
from ..units import format_bytes

ALIGN = 2 << 20  # the driver migrates managed memory in 2 MiB blocks
MANAGED_SHARE = 0.5  # managed memory stays well under the free device memory (DESIGN.md's safety rule)
DEVICE_SHARE = 0.9
HOST_SHARE = 0.8


class ResourceError(RuntimeError):
    """The machine cannot hold this run; the message says what is short and by how much."""


@dataclass(frozen=True)
class Layout:
    offsets: tuple[int, ...]
    total: int


def layout(graph: Graph) -> Layout:
    offsets, at = [], 0
    for t in graph.tensors:
        offsets.append(at)
        at += -(-max(t.nbytes, 1) // ALIGN) * ALIGN
    return Layout(tuple(offsets), at)


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
    """The run's tensors as CuPy arrays over one allocation (GPU only)."""

    def __init__(self, graph: Graph, managed: bool, capacity: int) -> None:
        import cupy as cp

        self.layout = layout(graph)
        free, _ = cp.cuda.runtime.memGetInfo()
        check_resources(self.layout.total, capacity, managed, free, available_host_bytes())
        self.managed = managed
        self.memory = cp.cuda.malloc_managed(self.layout.total) if managed else cp.cuda.alloc(self.layout.total)
        self.views: list[Any] = [
            cp.ndarray(t.shape, cp.dtype(t.dtype), memptr=self.memory + off)
            for t, off in zip(graph.tensors, self.layout.offsets)
        ]

    def ptr(self, tensor: int) -> int:
        return int(self.memory.ptr) + self.layout.offsets[tensor]
