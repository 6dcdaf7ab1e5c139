"""What more than one policy (and the app's editor) reads off a graph."""

from __future__ import annotations

from ..graph import Graph, Phase
from ..plan import PlanError
from ..units import format_bytes


def check_capacity(graph: Graph, capacity: int) -> None:
    """No plan runs below the largest single op's working set: refuse naming that op."""
    need, op = graph.min_capacity
    if capacity < need:
        raise PlanError(f"capacity {format_bytes(capacity)} is below the minimum for {graph.model} batch "
                        f"{graph.batch}: {graph.ops[op].name} alone touches {format_bytes(need)} ({need} bytes)")


def reuse_gaps(graph: Graph, t: int, feature_maps_only: bool = False) -> list[tuple[int, int]]:
    """(last use, next use) pairs of a tensor; a use in the next iteration is numbered from n on (a
    persistent tensor's gap across the boundary). With feature_maps_only, AutoVM's one gap of a feature
    map: from its last forward use to its first backward use."""
    tensor, uses = graph.tensors[t], graph.uses[t]
    if feature_maps_only:
        if tensor.persistent:
            return []
        backward = [k for k in uses if graph.ops[k].phase is Phase.BACKWARD]
        forward = [k for k in uses if graph.ops[k].phase is not Phase.BACKWARD]
        return [(max(forward), min(backward))] if backward and forward else []
    pairs = list(zip(uses, uses[1:]))
    if tensor.persistent and uses:
        pairs.append((uses[-1], uses[0] + len(graph.ops)))
    return pairs
