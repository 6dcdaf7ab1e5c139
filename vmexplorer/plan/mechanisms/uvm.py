"""`uvm`: managed memory through the CUDA driver. cudaMemPrefetchAsync moves a tensor either way; a
kernel touching pages on the host faults them in; the driver evicts page by page, only the bytes needed,
one direction at a time, and a prefetch's call blocks the host for about its transfer."""

from __future__ import annotations

from collections.abc import Sequence

from ...config import Mechanism
from ..plan import Direction, MemOp, Mode
from .spec import C, MechanismSpec


class Uvm(MechanismSpec):
    name = Mechanism.UVM
    summary = "managed memory: cudaMemPrefetchAsync each way, the driver's demand faults and evictions"
    demand = Mode.FAULT
    whole_tensors = False
    managed = True
    ordered_copies = False
    arriving_lands_first = False
    waits_for_sync_room = True
    calls_block_host = True
    copies_in = (Mode.ASYNC,)
    fitted = {name: name for name in ("evict_bytes_per_ns", "call_ns", "prefetch_bytes_per_ns",
                                      "evict_fastest_bytes_per_ns")}
    forced = ("demand fault", "driver eviction")
    forced_by = "the UVM driver"
    forced_verbs = ("fault", "evict")
    legend: dict[str, str] = {}

    def check_memop(self, i: int, m: MemOp) -> str | None:
        if m.mode is Mode.SYNC and m.direction is Direction.TO_DEVICE:
            return (f"memory operation {i} is a synchronous copy to the device, but the plan is uvm: there the "
                    "driver faults a missing tensor in (fault)")
        return None

    def evicted_bytes(self, held: int, over: int) -> int:
        return min(held, over)

    def rates(self, cost: C) -> C:
        return cost

    def sync_stream(self, direction: Direction) -> Direction | None:
        return None

    def order_due(self, memops: Sequence[MemOp], due: Sequence[int], k: int) -> list[int]:
        # evictions first, then offloads: a prefetch landing before op k waits for the room they make, or
        # the device would briefly hold more than the emulated capacity
        return sorted(due, key=lambda i: (memops[i].mode is not Mode.SYNC, memops[i].direction is Direction.TO_DEVICE,
                                          memops[i].issue_after, i))


SPEC = Uvm()
