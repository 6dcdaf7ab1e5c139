"""A plan: every memory operation of one steady-state iteration, as data.

Policies write plans, the validator checks them, the simulator and the executor run them. Op indices
refer to `Graph.ops`; `issue_after == -1` means at the start of the iteration and
`complete_before == len(graph.ops)` means by its end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from ..config import Config, Mechanism, Option
from ..graph import Graph
from ..graph.recompute import Recompute, recomputed


class PlanError(ValueError):
    """A plan that cannot run: the message names the op, the tensor and the bytes involved."""


class Direction(StrEnum):
    TO_HOST = "to_host"  # offload / eviction
    TO_DEVICE = "to_device"  # prefetch / fault-in


class Mode(StrEnum):
    """How a transfer runs beside the ops. Under `uvm` a tensor comes in by ASYNC prefetch or FAULT and
    leaves by ASYNC offload or SYNC eviction; under `swap`, with no driver to fault pages in, one an op
    needs and does not have is copied in SYNC (on demand), so FAULT never appears there."""

    ASYNC = "async"  # on a copy stream, ordered by CUDA events (uvm: cudaMemPrefetchAsync; swap: cudaMemcpyAsync)
    SYNC = "sync"  # on the compute stream: the next op waits for it (an eviction; under swap also a demand copy in)
    FAULT = "fault"  # the op's kernels demand-fault the pages in (uvm only)


class Origin(StrEnum):
    PLAN = "plan"  # decided by the policy or by a person
    # forced by the replay, not planned: under uvm what the driver does on its own (LRU evictions, demand
    # faults); under swap the synchronous copies the executor must make for the same reasons
    DRIVER = "driver"


@dataclass(frozen=True)
class MemOp:
    tensor: int
    direction: Direction
    mode: Mode
    issue_after: int
    complete_before: int
    origin: Origin
    nbytes: int  # what moves: a tensor can be partly resident, as the driver evicts page by page


@dataclass(frozen=True)
class Move:
    """A tensor's planned round trip: offloaded after op `offload_after`, prefetched after op
    `prefetch_after` (None: left on the host until something touches it). What a person edits."""

    tensor: int
    offload_after: int
    prefetch_after: int | None


@dataclass(frozen=True)
class Plan:
    config: Config  # what it was compiled for; the properties below read it
    memops: tuple[MemOp, ...]
    resident_at_start: tuple[tuple[int, int], ...]  # (tensor, bytes on the device) as an iteration begins
    peak_resident: int  # the most bytes occupying the device at any op
    # under swap, the asynchronous copies (memop indices) in the order the host calls them, each stream
    # taking its own in turn (`copies.py`); empty: each called just before the op that waits for it
    copy_order: tuple[int, ...] = ()
    # under swap, the room the policy planned with so that the pool placing its tensors fits the capacity
    # (`policies.fit_pool`): less than the capacity where a placement needs more bytes than the plan's
    # peak; 0: the capacity
    room_bytes: int = 0
    # the activations made again by re-running their forward ops (`graph.recompute`), numbered as in the
    # graph without recomputation; the plan's op and tensor numbers are those of `graph_of`'s graph
    recomputes: tuple[Recompute, ...] = ()

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def batch(self) -> int:
        return self.config.batch

    @property
    def image_size(self) -> int:
        return self.config.image_size

    @property
    def policy(self) -> str:
        return self.config.policy

    @property
    def capacity(self) -> int:
        return self.config.capacity

    @property
    def options(self) -> Mapping[str, Option]:
        return self.config.options

    @property
    def mechanism(self) -> Mechanism:
        return self.config.mechanism

    @property
    def key(self) -> tuple[str, int, int]:
        return self.config.key

    def graph_of(self, graph: Graph) -> Graph:
        """The graph this plan runs: `graph` fitted to the room it was made with, its recomputations as ops
        (`graph` itself where it is that graph already)."""
        return recomputed(graph.sized_for(self.planned_with), self.recomputes)

    @property
    def planned_with(self) -> int:
        """The bytes of room the policy planned with."""
        return self.room_bytes or self.capacity

    @property
    def moves(self) -> tuple[Move, ...]:
        """The plan-origin round trips, recovered from the memops (what the app draws as markers).
        An offload pairs with the next prefetch of its tensor; one left open at the end of the
        iteration pairs with a prefetch before the tensor's first offload (a trip that wraps)."""
        by_tensor: dict[int, list[MemOp]] = {}
        for m in self.memops:
            if m.origin is Origin.PLAN:
                by_tensor.setdefault(m.tensor, []).append(m)
        out = []
        for t, ms in by_tensor.items():
            ms.sort(key=lambda m: (m.issue_after, m.direction is not Direction.TO_HOST))
            leading = []  # prefetches before any offload: the ends of wrapped trips
            pending: int | None = None
            for m in ms:
                if m.direction is Direction.TO_HOST:
                    if pending is not None:
                        out.append(Move(t, pending, None))
                    pending = m.issue_after
                elif pending is not None:
                    out.append(Move(t, pending, m.issue_after))
                    pending = None
                else:
                    leading.append(m.issue_after)
            if pending is not None:
                out.append(Move(t, pending, leading[0] if leading else None))
        return tuple(sorted(out, key=lambda mv: (mv.offload_after, mv.tensor)))

