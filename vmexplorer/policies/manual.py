"""`manual`: a person's plan (a `--moves` file, or the app's edits), checked and planned as given: their
round trips (`Move`s) and the activations they have made again (`Recompute`s). The steps are numbered in the
graph without re-runs, the moves in the graph that runs them (what the timeline shows), as every plan
numbers them (`Plan.recomputes`, `Plan.graph_of`). The replay adds the evictions the driver would force
where they would exceed the capacity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..graph import Graph, Recompute
from ..plan import Move
from ..plan.moves import check_moves, check_recomputes
from .spec import PolicySpec


def plan_recomputes(graph: Graph, capacity: int, options: Mapping[str, Any],
                    recomputes: Sequence[Recompute]) -> list[Recompute]:
    """The person's steps, once each is one the graph can run (PlanError naming the step otherwise), in
    one order whatever order they came in: a link's edits and the app's clicks list them differently."""
    check_recomputes(graph, recomputes)
    return sorted(recomputes, key=lambda step: (step.before, step.tensor))


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    """The moves, once they make sense on the graph (PlanError naming the move otherwise), in the order a
    plan lists them (`Plan.moves`): copies issued at one op queue in the order they are given, so the
    same moves in another order (a link's edits come back edited tensors last) must not make another plan."""
    check_moves(graph, moves)
    return sorted(moves, key=lambda mv: (mv.offload_after, mv.tensor))


SPEC = PolicySpec("manual", "a person's plan (moves and recomputes), with the driver's evictions where it would "
                            "exceed the capacity", plan_moves, takes_moves=True, plan_recomputes=plan_recomputes)
