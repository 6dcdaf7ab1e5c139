"""`device`: plain device memory, no paging: the ideal reference every paging policy is measured against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..graph import Graph
from ..plan import Move, PlanError
from ..units import format_bytes
from .spec import PolicySpec


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    """Nothing moves, so the whole footprint must fit: a smaller capacity is refused, not paged."""
    if graph.footprint > capacity:
        raise PlanError(f"the device policy needs the whole footprint, {format_bytes(graph.footprint)}, but the "
                        f"capacity is {format_bytes(capacity)}; use uvm or autovm, or a capacity of at least that")
    return []


SPEC = PolicySpec("device", "plain device memory, no paging: the ideal reference; refuses when the footprint "
                            "exceeds the capacity", plan_moves,
                  uvm_only="it moves nothing, so there is nothing for a mechanism to move; it is the reference "
                           "both mechanisms are measured against")
