"""`manual`: a person's moves (a `--moves` file, or the app's edits), checked and planned as given; the
replay adds the evictions the driver would force where they would exceed the capacity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..graph import Graph
from ..plan import Move
from ..plan.moves import check_moves
from .spec import PolicySpec


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    """The moves, once they make sense on the graph (PlanError naming the move otherwise), in the order a
    plan lists them (`Plan.moves`): copies issued at one op queue in the order they are given, so the
    same moves in another order (a link's edits come back edited tensors last) must not make another plan."""
    check_moves(graph, moves)
    return sorted(moves, key=lambda mv: (mv.offload_after, mv.tensor))


SPEC = PolicySpec("manual", "a person's plan (moves), with the driver's evictions where it would exceed "
                            "the capacity", plan_moves, takes_moves=True)
