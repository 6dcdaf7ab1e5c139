"""The one validator every plan is held to, whoever made it: a policy, a person, or a session file."""

from __future__ import annotations

from ..graph import Graph, GraphError
from .copies import check_copy_order
from .mechanisms import mechanism_of
from .plan import Plan, PlanError
from .residency import check


def validate_plan(graph: Graph, plan: Plan) -> None:
    """Raise PlanError if the plan breaks a rule anywhere: capacity, residency, ordering, steady state."""
    if plan.key != graph.key:
        raise PlanError(f"the plan is for {_key(plan.key)}, not {_key(graph.key)}")
    if graph.workspaces != plan.config.workspaces:
        raise PlanError(f"the plan is for a graph {'with' if plan.config.workspaces else 'without'} workspace "
                        "tensors, this graph has " + ("them" if graph.workspaces else "none"))
    try:
        graph = plan.graph_of(graph)
    except GraphError as e:  # a recomputation that cannot run there
        raise PlanError(f"invalid plan: {e}") from None
    mechanism = mechanism_of(plan)
    n, t_count = len(graph.ops), len(graph.tensors)
    for i, m in enumerate(plan.memops):
        if not 0 <= m.tensor < t_count:
            raise PlanError(f"memory operation {i} names tensor {m.tensor}; the graph has {t_count}")
        if not (-1 <= m.issue_after < m.complete_before <= n):
            raise PlanError(f"memory operation {i} ({graph.tensors[m.tensor].name}) is issued after op "
                            f"{m.issue_after} and due before op {m.complete_before}: not in order")
        if m.mode.value != "async" and m.complete_before != m.issue_after + 1:
            raise PlanError(f"memory operation {i} is {m.mode.value}, so it must complete before the "
                            "next op")
        problem = mechanism.check_memop(i, m)
        if problem:
            raise PlanError(problem)
    for t, nbytes in plan.resident_at_start:
        if not (0 <= t < t_count and graph.tensors[t].persistent and 0 < nbytes <= graph.tensors[t].nbytes):
            raise PlanError(f"resident_at_start has {nbytes} bytes of tensor {t}: not a persistent "
                            "tensor or not that many bytes")
        if mechanism.whole_tensors and nbytes != graph.tensors[t].nbytes:
            raise PlanError(f"resident_at_start has {nbytes} of the {graph.tensors[t].nbytes} bytes of tensor {t}; "
                            f"under {mechanism.name.value} a tensor is on the device whole or not at all")
    check_copy_order(graph, plan)
    problems = check(graph, plan.capacity, plan.memops, plan.resident_at_start, plan.mechanism).problems
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PlanError(f"invalid plan: {problems[0]}{more}")


def _key(key: tuple[str, int, int]) -> str:
    return f"{key[0]} batch {key[1]} at {key[2]}x{key[2]}"
