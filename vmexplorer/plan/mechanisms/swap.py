"""`swap`: a device pool of the capacity and pinned host memory behind it, tensors moved whole by
cudaMemcpyAsync on a copy stream each way (both directions at once). No driver: a tensor an op needs and
does not have is copied in on the compute stream before the op, and room is made by copying whole
tensors out (`engine.swap`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from ...config import Mechanism
from ..plan import Direction, MemOp, Mode
from .spec import C, MechanismSpec


class Swap(MechanismSpec):
    name = Mechanism.SWAP
    summary = "a device pool of the capacity, pinned host memory, cudaMemcpyAsync each way; no driver"
    demand = Mode.SYNC
    whole_tensors = True
    managed = False
    ordered_copies = True
    arriving_lands_first = True
    waits_for_sync_room = False
    calls_block_host = False
    copies_in = (Mode.ASYNC, Mode.SYNC)  # a copy in on demand is a copy like a prefetch
    # the copies fit the swap rates; the driver's (and the bound's fastest eviction) stay the base's
    fitted = {"evict_bytes_per_ns": "swap_to_host_bytes_per_ns", "call_ns": "swap_call_ns",
              "prefetch_bytes_per_ns": "swap_to_device_bytes_per_ns"}
    forced = ("copied in on demand (synchronous)", "copied out to make room (synchronous)")
    forced_by = "the executor, to keep within the capacity"
    forced_verbs = ("copy in on demand", "copy out")
    legend = {"demand fault": "copied in on demand", "driver eviction": "copied out to make room"}

    def check_memop(self, i: int, m: MemOp) -> str | None:
        if m.mode is Mode.FAULT:
            return (f"memory operation {i} is a demand fault, but the plan is swap: with no driver nothing faults "
                    "in; a tensor an op needs is copied in (sync)")
        return None

    def evicted_bytes(self, held: int, over: int) -> int:
        return held  # a pool frees whole tensors

    def rates(self, cost: C) -> C:
        # pinned copies: a copy in on demand moves at the copy rate as a prefetch does, no call blocks the
        # host (cudaMemcpyAsync from pinned memory returns at once) and the two directions overlap
        into, out = cost.swap_to_device_bytes_per_ns, cost.swap_to_host_bytes_per_ns
        copying: C = replace(cast(Any, cost), prefetch_bytes_per_ns=into, evict_bytes_per_ns=out,
                             fault_bytes_per_ns=into, fault_bytes_per_ns_by_kind={}, host_block=0.0,
                             call_ns=cost.swap_call_ns, serialises_directions=False, evict_fastest_bytes_per_ns=0.0)
        return copying

    def sync_stream(self, direction: Direction) -> Direction | None:
        return direction  # its direction's copy engine, in turn with the copies queued there

    def order_due(self, memops: Sequence[MemOp], due: Sequence[int], k: int) -> list[int]:
        # the order the pool's bytes change hands in before op k: copies out completing, copies in issued
        # earlier or taken straight back out (either lands before the repair copies its tensor out), copies
        # out making room, copies in issued just now, copies in on demand
        leaving = {memops[i].tensor for i in due
                   if memops[i].mode is Mode.SYNC and memops[i].direction is Direction.TO_HOST}

        def phase(i: int) -> int:
            m = memops[i]
            if m.direction is Direction.TO_HOST:
                return 0 if m.mode is Mode.ASYNC else 2
            if m.mode is Mode.SYNC:
                return 4
            return 1 if m.issue_after < k - 1 or m.tensor in leaving else 3

        return sorted(due, key=lambda i: (phase(i), memops[i].issue_after, i))


SPEC = Swap()
