"""A plan that recomputes (`Plan.recomputes`) runs on its graph with the re-runs as ops (`Plan.graph_of`):
validated, simulated and timed there, the re-runs at their ops' times (tests/session/test_recompute_sessions.py
keeps one through a session file)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from vmexplorer.graph import Kind, Phase, build_graph
from vmexplorer.graph.recompute import RERUN, Recompute, recomputed
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import compile_plan
from vmexplorer.simulator import H100_DEFAULT, simulate


def _checkpointed(model: str, batch: int, size: int, layers: tuple[str, ...]) -> tuple[object, list[Recompute]]:
    g = build_graph(model, batch, size)
    steps = [Recompute(t, min(k for k in g.uses[t] if g.ops[k].phase is Phase.BACKWARD))
             for t, tensor in enumerate(g.tensors) if tensor.kind is Kind.ACTIVATION and not tensor.persistent
             and g.ops[tensor.producer].layer in layers and g.ops[tensor.producer].phase is Phase.FORWARD
             and any(g.ops[k].phase is Phase.BACKWARD for k in g.uses[t])]
    return g, steps


@pytest.fixture(scope="module")
def planned() -> tuple[object, object, object]:
    g, steps = _checkpointed("vgg11", 8, 64, ("features.1", "features.4", "features.6"))
    rg = recomputed(g, steps)
    room = (g.least_workspaces().min_capacity[0] + g.footprint) // 2  # between the least and all
    plan = replace(compile_plan(rg, room, "belady"), recomputes=tuple(steps))
    return g, rg, plan


def test_a_plan_names_its_recomputations_and_runs_on_the_graph_that_holds_them(planned: tuple) -> None:
    g, rg, plan = planned
    ran = plan.graph_of(g)
    assert ran.full is rg and len(ran.ops) == len(g.ops) + len(plan.recomputes)
    assert plan.graph_of(ran) is ran  # asked again of the graph it runs: the same graph
    assert replace(plan, recomputes=()).graph_of(ran).ops == g.fitted(plan.planned_with).ops
    validate_plan(g, plan)


def test_a_re_run_takes_its_ops_time_in_the_simulator(planned: tuple) -> None:
    g, _, plan = planned
    named = {op.name: 1000.0 * (k + 1) for k, op in enumerate(g.ops)}
    cost = replace(H100_DEFAULT, op_ns=named)
    tl = simulate(g, plan, cost)
    ran = plan.graph_of(g)
    reruns = [r for r, i in enumerate(tl.op_index) if ran.ops[i].phase is Phase.RECOMPUTE]
    assert len(reruns) == len(plan.recomputes) and all(ran.ops[tl.op_index[r]].name.endswith(RERUN) for r in reruns)
    # what a re-run takes beyond its op's time is the pages it faults in
    faults = [cost.fault_ns(int(tl.op_fault_bytes[r]), ran.ops[tl.op_index[r]].kind) for r in reruns]
    took = (tl.op_end_ns - tl.op_start_ns)[reruns] - faults
    wanted = [named[ran.ops[tl.op_index[r]].name.removesuffix(RERUN)] for r in reruns]
    assert np.allclose(took, wanted, atol=1.0)


def test_a_recomputation_that_cannot_run_makes_the_plan_invalid(planned: tuple) -> None:
    from vmexplorer.plan import PlanError

    g, _, plan = planned
    weight = g.tensor_id("features.0.weight")
    with pytest.raises(PlanError, match="invalid plan: features.0.weight is not an activation"):
        validate_plan(g, replace(plan, recomputes=(Recompute(weight, 5),)))
