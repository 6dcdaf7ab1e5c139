"""What a mechanism declares: how bytes move between host and device, and so what every stage that
replays, checks, times or runs a plan must do differently. One object per mechanism (`uvm.py`,
`swap.py`), handed to the stages: they ask it, and hold no branches of their own on which it is."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol, TypeVar

from ...config import Mechanism
from ..plan import Direction, MemOp, Mode, Origin


class Rates(Protocol):
    """The rates of a cost model (`simulator.costmodel.CostModel`, a later stage) that a mechanism reads."""

    @property
    def swap_to_device_bytes_per_ns(self) -> float: ...

    @property
    def swap_to_host_bytes_per_ns(self) -> float: ...

    @property
    def swap_call_ns(self) -> float: ...


C = TypeVar("C", bound=Rates)


class MechanismSpec(ABC):
    """One way of moving bytes. The facts below are data the stages read; the methods are where the
    mechanisms differ in what they do."""

    name: Mechanism
    summary: str
    # how a tensor an op needs and does not have comes in before the op: the kernels fault it in
    # (FAULT) or the op waits for a copy on the compute stream (SYNC)
    demand: Mode
    # a tensor is on the device whole or not at all (a pool), rather than page by page
    whole_tensors: bool
    # the tensors of a paging policy live in managed memory (`Plan.managed`)
    managed: bool
    # a plan may fix the order each copy stream takes its copies in (`Plan.copy_order`)
    ordered_copies: bool
    # room taken from a tensor still arriving: its copy lands first and then goes back out (True), or
    # the driver takes its pages as they come (False)
    arriving_lands_first: bool
    # a copy in landing before an op waits for the synchronous transfers made before that op, their room
    # (False: a pool's own waits say which room it takes, `engine.swap.SwapPool.waits`)
    waits_for_sync_room: bool
    # a timeline's run took host time to make a transfer's call (the cost model's `host_block` fits it)
    calls_block_host: bool
    # the modes of the transfers to the device that move at the copy rate (calibration fits the prefetch
    # rate on them); the others are the kernels' faults
    copies_in: tuple[Mode, ...]
    # the cost model's fields a run of this mechanism fits, by the names calibration gives its rates
    # (`simulator.calibrate`): a rate it does not name, its runs do not show
    fitted: dict[str, str]
    # what the replay forces, in words a student reads: in, then out (`transfer_kind`)
    forced: tuple[str, str]
    # who forced them
    forced_by: str
    # the same in a trace's span names: in, then out
    forced_verbs: tuple[str, str]
    # the timeline legend's words for the forced transfers, by the legend's kind ("demand fault", ...)
    legend: dict[str, str]

    @abstractmethod
    def check_memop(self, i: int, m: MemOp) -> str | None:
        """Why memory operation `i` cannot be one of this mechanism's (None: it can)."""

    @abstractmethod
    def evicted_bytes(self, held: int, over: int) -> int:
        """What making room takes from a tensor holding `held` bytes on a device `over` its capacity."""

    @abstractmethod
    def rates(self, cost: C) -> C:
        """The cost model a plan of this mechanism runs at (`CostModel.for_mechanism`)."""

    @abstractmethod
    def sync_stream(self, direction: Direction) -> Direction | None:
        """Where a synchronous transfer runs: on its direction's copy engine, in turn with the copies
        queued there, or (None) on the compute stream, which orders it by itself."""

    @abstractmethod
    def order_due(self, memops: Sequence[MemOp], due: Sequence[int], k: int) -> list[int]:
        """The order the engine takes the memory operations due before op `k` in: each waits only for
        ones before it."""

    def __repr__(self) -> str:
        return f"<mechanism {self.name.value}>"

    def transfer_kind(self, m: MemOp) -> str:
        """What a memory operation is, in words a student reads: the plan's prefetches and offloads, or
        what the replay forced."""
        to_device = m.direction is Direction.TO_DEVICE
        if m.origin is Origin.PLAN:
            return "planned prefetch" if to_device else "planned offload"
        return self.forced[0] if to_device else self.forced[1]
