"""The one validator every plan is held to, whoever made it: a policy, a person, or a session file."""

from __future__ import annotations

from ..config import Mechanism
from ..graph import Graph
from .copies import check_copy_order
from .plan import Direction, MemOp, Mode, Plan, PlanError
from .residency import check


def validate_plan(graph: Graph, plan: Plan) -> None:
    """Raise PlanError if the plan breaks a rule anywhere: capacity, residency, ordering, steady state."""
    if plan.key != graph.key:
        raise PlanError(f"the plan is for {_key(plan.key)}, not {_key(graph.key)}")
    if graph.workspaces != plan.config.workspaces:
        raise PlanError(f"the plan is for a graph {'with' if plan.config.workspaces else 'without'} workspace "
                        "tensors, this graph has " + ("them" if graph.workspaces else "none"))
    graph = graph.sized_for(plan.planned_with)
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
        _check_mode(i, m, plan.mechanism)
    swap = plan.mechanism is Mechanism.SWAP
    for t, nbytes in plan.resident_at_start:
        if not (0 <= t < t_count and graph.tensors[t].persistent and 0 < nbytes <= graph.tensors[t].nbytes):
            raise PlanError(f"resident_at_start has {nbytes} bytes of tensor {t}: not a persistent "
                            "tensor or not that many bytes")
        if swap and nbytes != graph.tensors[t].nbytes:
            raise PlanError(f"resident_at_start has {nbytes} of the {graph.tensors[t].nbytes} bytes of tensor {t}; "
                            "under swap a tensor is on the device whole or not at all")
    check_copy_order(graph, plan)
    problems = check(graph, plan.capacity, plan.memops, plan.resident_at_start, plan.mechanism).problems
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PlanError(f"invalid plan: {problems[0]}{more}")


def _check_mode(i: int, m: MemOp, mechanism: Mechanism) -> None:
    """Under uvm a tensor comes in by prefetch or fault and a synchronous transfer is an eviction; under
    swap nothing faults, and a synchronous transfer to the device is a copy in on demand."""
    if mechanism is Mechanism.SWAP and m.mode is Mode.FAULT:
        raise PlanError(f"memory operation {i} is a demand fault, but the plan is swap: with no driver nothing "
                        "faults in; a tensor an op needs is copied in (sync)")
    if mechanism is Mechanism.UVM and m.mode is Mode.SYNC and m.direction is Direction.TO_DEVICE:
        raise PlanError(f"memory operation {i} is a synchronous copy to the device, but the plan is uvm: "
                        "there the driver faults a missing tensor in (fault)")


def _key(key: tuple[str, int, int]) -> str:
    return f"{key[0]} batch {key[1]} at {key[2]}x{key[2]}"
