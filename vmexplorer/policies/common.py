"""What more than one policy (and the app's editor) reads off a graph."""

from __future__ import annotations

from dataclasses import replace

from ..graph import Graph, Phase
from ..plan import Plan, PlanError
from ..plan.copies import check_copy_order, earliest_deadline
from ..units import format_bytes, format_ns
from .spec import Simulation


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


ORDER_PASSES = 4  # earliest-deadline orders tried, each from the fastest timeline before it


def order_copies(graph: Graph, plan: Plan, simulation: Simulation) -> Plan:
    """The swap plan with the copy order (`plan.copies`) its simulation runs fastest in: the executor's
    own, or an earliest-deadline order read off the fastest timeline found so far, a few passes over."""
    graph = plan.graph_of(graph)
    best = plan
    timeline = simulation.simulate(graph, plan, simulation.cost_model)
    best_ns = first_ns = int(timeline.iteration_ns().max())
    tried = {plan.copy_order}
    for _ in range(ORDER_PASSES):
        order = earliest_deadline(plan, timeline.op_end_ns, timeline.memop_end_ns - timeline.memop_start_ns)
        if order in tried:
            break
        tried.add(order)
        candidate = replace(plan, copy_order=order)
        try:
            check_copy_order(graph, candidate)
        except PlanError:  # ties in the timeline can put a copy behind one issued after its op
            break
        again = simulation.simulate(graph, candidate, simulation.cost_model)
        if int(again.iteration_ns().max()) < best_ns:
            best, timeline, best_ns = candidate, again, int(again.iteration_ns().max())
    if simulation.report is not None and best is not plan:
        simulation.report(f"the copy streams in earliest-deadline order: {format_ns(first_ns)} -> "
                          f"{format_ns(best_ns)} an iteration")
    return best
