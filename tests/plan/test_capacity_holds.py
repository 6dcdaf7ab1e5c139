"""The capacity holds at every instant, for every policy and mechanism: in the plan (the replay's peak), in
its simulation (the resident bytes over time), in the engine's schedule (the ledger the executor keeps as
it issues its steps) and, under swap, in the device pool that holds the plan's tensors. A plan that
cannot keep to the capacity is refused with its reason, never made over it. No GPU: every part checked
here is the planner's, the simulator's and the executor's program as data."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import AUTOVM_OPTIONS, POOL_REFUSED, graph, manual_moves

from vmexplorer.config import Mechanism
from vmexplorer.engine.schedule import Ledger, StepKind, schedule
from vmexplorer.graph import Graph, Kind
from vmexplorer.plan import Plan, PlanError
from vmexplorer.plan.placement import DEVICE_ALIGN, aligned
from vmexplorer.plan.pool import executed_graph, kept_tensors, plan_pool, run_pool
from vmexplorer.policies import POLICIES, Simulation, compile_plan
from vmexplorer.simulator import H100_DEFAULT, simulate
from vmexplorer.simulator.bound import lower_bound

SMALL = [("alexnet", 96), ("vgg11", 32), ("resnet18", 32), ("resnet50", 32)]
HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
QUICK_SEARCH = {"search_steps": 40, "search_seconds": 60.0}  # steps, not seconds, stop it: the same plan anywhere


def ledger_peak(g: Graph, plan: Plan) -> int:
    """The most bytes the executor's ledger holds while an op runs, its steps issued in the schedule's order
    (under swap a temporary leaves after its last op, as the pool takes its bytes back)."""
    g = plan.graph_of(g)  # the graph the executor runs: its workspaces fitted to the plan's room, its re-runs
    start = dict(plan.resident_at_start)
    swap = plan.mechanism is Mechanism.SWAP
    ledger = Ledger(g, [start.get(t, 0) if tensor.persistent else 0 for t, tensor in enumerate(g.tensors)],
                    release_dead=swap, kept=kept_tensors(g, keep_weights=False))
    for step in schedule(g, plan, pool=plan_pool(g, plan, kept_tensors(g, False)).waits if swap else None):
        ledger.apply(step, plan)
        if step.kind is StepKind.OP and not swap:  # under uvm a dead tensor holds nothing once its op is done
            for t in g.ops[step.index].touches:
                if not g.tensors[t].persistent and g.last_use[t] == step.index:
                    ledger.set(t, 0)
    return ledger.peak


@st.composite
def configurations(draw: st.DrawFn) -> tuple[Graph, int, str, dict, list, Mechanism]:
    model, size = draw(st.sampled_from(SMALL))
    g = graph(model, draw(st.integers(1, 3)), size)
    policy = draw(st.sampled_from(sorted(POLICIES)))
    mechanism = Mechanism.UVM if POLICIES[policy].uvm_only else draw(st.sampled_from(list(Mechanism)))
    capacity = draw(st.integers(g.min_capacity[0], int(g.footprint * 1.1)))
    options = draw(AUTOVM_OPTIONS) if policy == "autovm" else QUICK_SEARCH if policy == "tuned" else \
        {"search_seconds": 60.0} if policy == "joint" else {}
    moves = draw(manual_moves(g)) if policy == "manual" else []
    return g, capacity, policy, options, moves, mechanism


@settings(HYP)
@given(configurations())
def test_every_plan_keeps_to_its_capacity_in_plan_simulation_schedule_and_the_pool_the_engine_places(case) -> None:
    g, capacity, policy, options, moves, mechanism = case
    simulation = Simulation(simulate, lower_bound, H100_DEFAULT)
    try:
        plan = compile_plan(g, capacity, policy, options, moves, simulation=simulation, mechanism=mechanism)
    except PlanError as e:  # refused, with its reason: only `device` below its footprint, or a pool that cannot fit
        assert (policy == "device" and capacity < g.footprint) or POOL_REFUSED in str(e), str(e)
        return
    assert plan.peak_resident <= plan.planned_with <= capacity
    assert int(simulate(g, plan, H100_DEFAULT).resident_bytes.max()) <= capacity
    assert ledger_peak(g, plan) <= capacity
    run = plan.graph_of(g)
    pool = run_pool(run, plan, kept_tensors(run, False))  # what the engine allocates
    if mechanism is Mechanism.SWAP or policy == "device":
        assert pool.total <= capacity
    # the simulator times the graph that pool gives the engine (under managed memory, every workspace whole)
    assert pool.executed(run).workspace_bytes == executed_graph(g, plan).workspace_bytes


@pytest.mark.parametrize("model,batch,policy", [("vgg19", 64, "belady"), ("alexnet", 256, "vdnn")])
def test_a_swap_plan_whose_placement_outgrows_the_capacity_is_made_again_with_less_room(model, batch, policy) -> None:
    g = graph(model, batch)
    capacity = g.footprint // 2
    said: list[str] = []
    plan = compile_plan(g, capacity, policy, mechanism="swap",
                        simulation=Simulation(simulate, lower_bound, H100_DEFAULT, said.append))
    assert plan.capacity == capacity and plan.planned_with < capacity  # these two outgrow it at full room
    assert plan_pool(g, plan, kept_tensors(g, False)).total <= capacity
    assert any("planned with" in s and "so that the pool fits" in s for s in said)


def test_a_swap_pool_cuts_workspaces_to_the_stretches_left_for_them_so_that_more_room_plans() -> None:
    # ResNet-18 at 50%: with its workspaces whole no room the policy can plan with gives a pool that fits
    g = graph("resnet18", 64)
    capacity = g.footprint // 2
    plan = compile_plan(g, capacity, "belady", mechanism="swap")
    run = g.sized_for(plan.planned_with)
    pool = plan_pool(run, plan, kept_tensors(run, False))
    assert pool.total <= capacity
    whole = [aligned(run.tensors[s.tensor].nbytes, DEVICE_ALIGN) for s in pool.stays]
    cut = [i for i, (size, full) in enumerate(zip(pool.sizes, whole)) if size < full]
    assert cut and all(run.tensors[pool.stays[i].tensor].kind is Kind.WORKSPACE for i in cut)


def test_a_swap_plan_no_pool_can_hold_within_the_capacity_is_refused_saying_so() -> None:
    g = graph("alexnet", 256)
    with pytest.raises(PlanError, match=POOL_REFUSED):
        compile_plan(g, g.fitted(0).min_capacity[0], "belady", mechanism="swap")  # the least room, tiny workspaces
