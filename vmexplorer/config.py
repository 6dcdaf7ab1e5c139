"""What a person picks: a model at a batch and image size, the emulated capacity, a policy and its options,
and the mechanism that moves the policy's bytes.

One `Config` travels the whole contract: the plan carries the one it was compiled for, the session file
stores it, the command line prints it, the trace export and the GPU worker read it. The share of a
model's footprint that a capacity is (the `50%` people type and read) is derived here and only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

from .units import parse_bytes

Option = str | int | float


class Mechanism(StrEnum):
    """How bytes move between host and device; orthogonal to the policy, which decides when and what."""

    UVM = "uvm"  # managed memory: cudaMemPrefetchAsync each way, the driver's demand faults and evictions
    SWAP = "swap"  # a device pool of the capacity, pinned host memory, cudaMemcpyAsync each way; no driver


@dataclass(frozen=True)
class Config:
    model: str
    batch: int
    image_size: int
    capacity: int  # bytes of emulated device memory
    policy: str
    options: Mapping[str, Option] = field(default_factory=dict)  # every option of the policy, as used
    mechanism: Mechanism = Mechanism.UVM
    # the kernels' workspaces are graph tensors inside the capacity (False: sessions of schema 10 and older)
    workspaces: bool = True
    # the forward layers of a model that is not built in (`graph.Definition`, which config, below graph in
    # the import order, holds as an opaque value equal and hashed by its digest); None for a built-in
    definition: Any = None

    @property
    def key(self) -> tuple[str, int, int]:
        """What fixes the model: model, batch and image size (the graph is also fitted to the capacity)."""
        return (self.model, self.batch, self.image_size)

    def as_json(self) -> dict[str, Any]:
        """The config as the session file, the command line and the trace spell it."""
        return {"model": self.model, "batch": self.batch, "image_size": self.image_size, "policy": self.policy,
                "capacity_bytes": self.capacity, "options": dict(self.options), "mechanism": self.mechanism.value,
                "workspaces": self.workspaces}


def share_of_footprint(nbytes: int, footprint: int) -> float:
    """`nbytes` as a percentage of a model's footprint."""
    return 100 * nbytes / footprint


def capacity_text(capacity: int, footprint: int) -> str:
    """The capacity as a person would type it: a whole share of the footprint (`50%`) where that share
    gives exactly these bytes back, else the bytes."""
    share = round(share_of_footprint(capacity, footprint))
    if 0 < share <= 1000 and parse_bytes(f"{Decimal(share)}%", footprint) == capacity:
        return f"{share}%"
    return str(capacity)
