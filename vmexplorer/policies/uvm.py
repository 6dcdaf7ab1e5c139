"""`uvm`: NVIDIA's default managed memory. It plans nothing: the demand faults and LRU evictions it pays
are what the replay (`plan.residency.repair`) adds to an empty plan, as the driver would."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..graph import Graph
from ..plan import Move
from .spec import PolicySpec


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    """No planned trips: every byte that moves, the driver moves on demand."""
    return []


SPEC = PolicySpec("uvm", "NVIDIA's default managed memory: demand faults, LRU eviction at capacity", plan_moves,
                  uvm_only="it is the UVM driver's demand paging, by definition")
