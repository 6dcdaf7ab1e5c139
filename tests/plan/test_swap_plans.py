"""The swap mechanism in plans: the same moves as under uvm, with what the replay forces made explicit
copies (a missing tensor copied in whole before its op, room made by copying whole tensors out), held by
the validator and by the independent ledger (tests/plan_checker.py) to the capacity and to residency."""


import pytest
from hypothesis import HealthCheck, given, settings
from plan_checker import check_plan
from strategies import graph, swap_cases, swap_plan

from vmexplorer.graph import Graph
from vmexplorer.plan import Direction, Mechanism, MemOp, Mode, Origin, PlanError
from vmexplorer.plan.mechanisms import mechanism_of
from vmexplorer.plan.residency import check
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import POLICIES, compile_plan

SMALL = [("alexnet", 96), ("vgg11", 32), ("vgg16", 32), ("resnet18", 32), ("resnet50", 32)]
HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def paging() -> tuple[Graph, int]:
    """A graph and a capacity between the least any plan needs and its footprint: something pages."""
    g = graph("resnet18", 4, 32)
    return g, (g.min_capacity[0] + g.footprint) // 2


@HYP
@given(swap_cases(SMALL, 4))
def test_a_swap_plan_stays_within_capacity_and_has_every_tensor_whole_on_the_device_when_used(case):
    g, capacity, policy, options, moves = case
    plan = swap_plan(g, capacity, policy, options, moves)
    capacity = plan.capacity
    validate_plan(g, plan)
    ledger = check_plan(g, plan)  # step 5: every tensor an op touches is wholly there, nothing under way
    assert ledger.problems == ()
    assert ledger.peak == plan.peak_resident <= plan.planned_with <= capacity
    fitted = g.sized_for(plan.planned_with)  # the workspaces of the room it was made in
    assert ledger.bytes_per_op == check(fitted, capacity, plan.memops, plan.resident_at_start,
                                        Mechanism.SWAP).occupied_bytes


@HYP
@given(swap_cases(SMALL, 4))
def test_under_swap_nothing_faults_and_what_the_replay_forces_moves_whole_tensors_synchronously(case):
    g, capacity, policy, options, moves = case
    plan = swap_plan(g, capacity, policy, options, moves)
    assert all(m.mode is not Mode.FAULT for m in plan.memops)
    forced = [m for m in plan.memops if m.origin is Origin.DRIVER]
    assert all(m.mode is Mode.SYNC and m.complete_before == m.issue_after + 1 for m in forced)
    assert all(m.nbytes == g.tensors[m.tensor].nbytes for m in forced)
    assert all(nbytes == g.tensors[t].nbytes for t, nbytes in plan.resident_at_start)


@HYP
@given(swap_cases(SMALL, 4))
def test_a_schedule_keeps_its_planned_trips_under_either_mechanism(case):
    g, capacity, policy, options, moves = case
    swap = swap_plan(g, capacity, policy, options, moves)
    uvm = compile_plan(g, swap.planned_with, policy, options, moves=moves)  # the room swap's plan was made in
    assert (uvm.mechanism, swap.mechanism) == (Mechanism.UVM, Mechanism.SWAP)
    assert {(m.tensor, m.offload_after) for m in swap.moves} == {(m.tensor, m.offload_after) for m in uvm.moves}


def test_a_plan_with_no_trips_under_swap_copies_in_on_demand_what_uvm_faults_in():
    g, capacity = paging()
    swap = compile_plan(g, capacity, "manual", mechanism="swap")
    ins = [m for m in swap.memops if m.direction is Direction.TO_DEVICE]
    assert ins and all(m.mode is Mode.SYNC and m.origin is Origin.DRIVER for m in ins)
    assert mechanism_of(swap).transfer_kind(ins[0]) == "copied in on demand (synchronous)"
    outs = [m for m in swap.memops if m.direction is Direction.TO_HOST]
    assert outs and mechanism_of(swap).transfer_kind(outs[0]) == "copied out to make room (synchronous)"
    uvm = compile_plan(g, capacity, "manual")
    assert {m.mode for m in uvm.memops if m.direction is Direction.TO_DEVICE} == {Mode.FAULT}


@pytest.mark.parametrize("policy", ["uvm", "device"])
def test_the_policies_that_move_nothing_of_their_own_refuse_swap_in_one_error(policy):
    g = graph("alexnet", 1, 96)
    movers = ", ".join(name for name, spec in POLICIES.items() if not spec.uvm_only)
    assert movers.startswith("autovm, belady, vdnn, tuned")
    with pytest.raises(PlanError, match=rf"the {policy} policy runs under uvm only: .*; under swap choose a "
                                        rf"policy that plans its moves \({movers}\)"):
        compile_plan(g, g.footprint, policy, mechanism="swap")


def test_every_moving_policy_takes_swap_and_only_uvm_and_device_do_not():
    assert [name for name, spec in POLICIES.items() if spec.uvm_only] == ["device", "uvm"]
    with pytest.raises(PlanError, match="unknown mechanism 'paging'; choose one of: uvm, swap"):
        compile_plan(graph("alexnet", 1, 96), 10**9, "belady", mechanism="paging")


def test_the_validator_refuses_a_fault_in_a_swap_plan_and_a_copy_in_in_a_uvm_plan():
    g, capacity = paging()
    uvm = compile_plan(g, capacity, "manual")
    fault = next(m for m in uvm.memops if m.mode is Mode.FAULT)
    swap_with_fault = compile_plan(g, capacity, "manual", mechanism="swap")
    bad = swap_with_fault.__class__(swap_with_fault.config, (*swap_with_fault.memops, fault),
                                    swap_with_fault.resident_at_start, swap_with_fault.peak_resident)
    with pytest.raises(PlanError, match="is a demand fault, but the plan is swap"):
        validate_plan(g, bad)
    copy_in = MemOp(fault.tensor, Direction.TO_DEVICE, Mode.SYNC, fault.issue_after, fault.complete_before,
                    Origin.DRIVER, fault.nbytes)
    bad = uvm.__class__(uvm.config, tuple(copy_in if m is fault else m for m in uvm.memops),
                        uvm.resident_at_start, uvm.peak_resident)
    with pytest.raises(PlanError, match="is a synchronous copy to the device, but the plan is uvm"):
        validate_plan(g, bad)


def test_a_partial_eviction_is_refused_under_swap():
    g, capacity = paging()
    plan = compile_plan(g, capacity, "manual", mechanism="swap")
    i, out = next((i, m) for i, m in enumerate(plan.memops) if m.direction is Direction.TO_HOST)
    half = MemOp(out.tensor, out.direction, out.mode, out.issue_after, out.complete_before, out.origin,
                 out.nbytes // 2)
    memops = (*plan.memops[:i], half, *plan.memops[i + 1:])
    assert check(g, plan.capacity, memops, plan.resident_at_start, Mechanism.SWAP).problems
    assert check_plan(g, plan.__class__(plan.config, memops, plan.resident_at_start, plan.peak_resident)).problems


def test_a_planned_copy_out_of_a_tensor_already_on_the_host_moves_nothing_and_the_plan_still_places():
    # found by hypothesis: `tuned`'s search offloads a momentum the replay had left on the host (0 bytes to
    # move), then brings it in; the pool's stays took the copy out for a second one and refused the plan
    from vmexplorer.plan.pool import kept_tensors, plan_pool
    from vmexplorer.plan.stays import stays
    from vmexplorer.policies import Simulation
    from vmexplorer.simulator import H100_DEFAULT, simulate
    from vmexplorer.simulator.bound import lower_bound

    g, capacity = graph("resnet18", 3, 32), 47818240
    plan = compile_plan(g, capacity, "tuned", {"search_steps": 40, "search_seconds": 60.0},
                        simulation=Simulation(simulate, lower_bound, H100_DEFAULT), mechanism="swap")
    run = g.fitted(plan.planned_with)
    empty = {i for i, m in enumerate(plan.memops) if m.direction is Direction.TO_HOST and m.nbytes == 0}
    assert empty, "the plan holds such a copy, so the test says something"
    assert empty <= stays(run, plan)[1]
    assert plan_pool(run, plan, kept_tensors(run, False)).total <= capacity
