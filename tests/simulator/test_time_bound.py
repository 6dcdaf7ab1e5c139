"""The time bound: no plan simulates faster, and it says what sets it."""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import manual_moves

from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import PlanError
from vmexplorer.plan.bound import min_traffic
from vmexplorer.policies import POLICIES, compile_plan
from vmexplorer.simulator import simulate
from vmexplorer.simulator.bound import (
    COMPUTE,
    EVICTION,
    MIGRATION,
    PREFETCH,
    SET_BY,
    TRADE,
    WINDOWS,
    Bound,
    cheapest_split,
    lower_bound,
)
from vmexplorer.simulator.costmodel import H100_DEFAULT, CostModel

BOTH_WAYS = replace(H100_DEFAULT, serialises_directions=False)


@cache
def graph(model: str, batch: int, size: int = 224) -> Graph:
    return build_graph(model, batch, size)


def compute_ns(g: Graph, cost: CostModel) -> float:
    return sum(cost.compute_ns(op.name, op.flops, op.bytes_touched) for op in g.ops)


@pytest.mark.parametrize("cost", [H100_DEFAULT, BOTH_WAYS], ids=["one way at a time", "both ways at once"])
@pytest.mark.parametrize("model,batch,size", [("vgg19", 64, 224), ("resnet50", 16, 224), ("alexnet", 64, 224),
                                              ("vgg11", 4, 64)])
@pytest.mark.parametrize("share", [0.5, 0.6, 0.75, 0.9, 1.0])
def test_no_policys_plan_simulates_faster_than_the_bound(cost: CostModel, model: str, batch: int, size: int,
                                                         share: float) -> None:
    g = graph(model, batch, size)
    capacity = max(int(g.footprint * share), g.min_capacity[0])
    bound, joint = lower_bound(g, capacity, cost), lower_bound(g, capacity, cost, recompute=True)
    for policy in POLICIES:
        if policy == "device" and capacity < g.footprint or POLICIES[policy].searches:  # a search's: test_tuned.py
            continue
        plan = compile_plan(g, capacity, policy)
        simulated = float(np.median(simulate(g, plan, cost).iteration_ns()))
        # a plan that recomputes is held against the joint bound: moving alone is not a bound on it
        held = joint if plan.recomputes else bound
        assert held.lower_bound_ns <= simulated, (policy, held, simulated)
        assert joint.lower_bound_ns <= bound.lower_bound_ns


@pytest.mark.parametrize("cost", [H100_DEFAULT, BOTH_WAYS], ids=["one way at a time", "both ways at once"])
@pytest.mark.parametrize("mechanism", ["uvm", "swap"])
@pytest.mark.parametrize("model,batch,size", [("vgg19", 64, 224), ("resnet50", 16, 224), ("alexnet", 64, 224)])
def test_no_plan_that_recomputes_simulates_faster_than_the_joint_bound(cost: CostModel, mechanism: str, model: str,
                                                                        batch: int, size: int) -> None:
    g, checked = graph(model, batch, size), 0
    for share in (0.5, 0.75):
        capacity = max(int(g.footprint * share), g.min_capacity[0])
        joint = lower_bound(g, capacity, cost, mechanism, recompute=True)
        for segments, then in itertools.product((2, 4, 8), ("none", "belady")):
            try:
                plan = compile_plan(g, capacity, "checkpoint", {"segments": segments, "then": then},
                                    mechanism=mechanism)
            except PlanError:  # under swap a pool that no placement fits is refused, saying so
                continue
            checked += 1
            simulated = float(simulate(g, plan, cost).iteration_ns().max())
            assert joint.lower_bound_ns <= simulated, (share, segments, then, joint, simulated)
    assert checked >= 8


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([("vgg11", 4, 64), ("alexnet", 8, 96), ("resnet18", 2, 64)]), st.floats(0.0, 1.0),
       st.sampled_from(["uvm", "swap"]), st.sampled_from(["autovm", "belady", "vdnn", "manual"]), st.data())
def test_no_plan_of_any_moves_simulates_faster_than_the_bound_with_its_windows(setup, share, mechanism, policy,
                                                                              data) -> None:
    g = graph(*setup)
    low = g.min_capacity[0]
    capacity = low + int((g.footprint - low) * share)
    moves = data.draw(manual_moves(g)) if policy == "manual" else []
    try:
        plan = compile_plan(g, capacity, policy, moves=moves, mechanism=mechanism)
    except PlanError:
        return  # vdnn refuses capacities its moves cannot fit
    for cost in (H100_DEFAULT, BOTH_WAYS, replace(BOTH_WAYS, swap_to_host_bytes_per_ns=9.0)):
        simulated = float(np.median(simulate(g, plan, cost).iteration_ns()))
        bound = lower_bound(g, capacity, cost, mechanism)
        assert bound.lower_bound_ns <= simulated, (cost.name, bound, simulated)
        assert bound.lower_bound_ns >= lower_bound(g, capacity, cost, mechanism, windows=False).lower_bound_ns


def test_what_the_forward_sends_out_and_the_backward_brings_back_cannot_share_time_through_copies() -> None:
    g = graph("vgg19", 64)
    capacity = g.footprint // 2
    whole = lower_bound(g, capacity, H100_DEFAULT, "swap", windows=False)
    windowed = lower_bound(g, capacity, H100_DEFAULT, "swap")
    assert windowed.set_by == WINDOWS and windowed.lower_bound_ns > 1.2 * whole.lower_bound_ns
    assert (windowed.min_bytes_to_host, windowed.min_bytes_to_device) == (whole.min_bytes_to_host,
                                                                          whole.min_bytes_to_device)


def test_at_the_footprint_compute_sets_the_bound_and_nothing_moves() -> None:
    g = graph("vgg19", 64)
    bound = lower_bound(g, g.footprint, H100_DEFAULT)
    assert bound == Bound(0, 0, int(compute_ns(g, H100_DEFAULT)), COMPUTE)


def test_through_uvm_the_two_directions_add_up_and_with_copies_each_way_the_slower_counts() -> None:
    g = graph("vgg19", 64)
    capacity = g.footprint // 2
    traffic = min_traffic(g, capacity)
    out_ns = traffic.min_bytes_to_host / H100_DEFAULT.evict_bytes_per_ns
    in_ns = traffic.min_bytes_to_device / H100_DEFAULT.prefetch_bytes_per_ns
    assert compute_ns(g, H100_DEFAULT) < out_ns  # the default's eviction rate is the slow one
    one_way = lower_bound(g, capacity, H100_DEFAULT, windows=False)
    assert (one_way.lower_bound_ns, one_way.set_by) == (int(out_ns + in_ns), MIGRATION)
    assert (one_way.min_bytes_to_host, one_way.min_bytes_to_device) == (traffic.min_bytes_to_host,
                                                                        traffic.min_bytes_to_device)
    both = lower_bound(g, capacity, BOTH_WAYS, windows=False)
    assert (both.lower_bound_ns, both.set_by) == (int(out_ns), EVICTION)
    slow_in = replace(BOTH_WAYS, prefetch_bytes_per_ns=1.0, fault_bytes_per_ns=0.5)
    assert lower_bound(g, capacity, slow_in, windows=False).set_by == PREFETCH


def test_data_comes_in_at_the_fastest_rate_the_cost_model_knows() -> None:
    g = graph("alexnet", 256)
    capacity = g.footprint // 2
    traffic = min_traffic(g, capacity)
    fast_faults = replace(H100_DEFAULT, fault_bytes_per_ns_by_kind={"conv2d_backward": 90.0})
    expected = traffic.min_bytes_to_host / H100_DEFAULT.evict_bytes_per_ns + traffic.min_bytes_to_device / 90.0
    assert lower_bound(g, capacity, fast_faults, windows=False).lower_bound_ns == int(expected)


@pytest.mark.parametrize("windows", [False, True])
def test_data_goes_out_at_the_fastest_eviction_rate_the_gpu_showed_not_the_fitted_average(windows: bool) -> None:
    g = graph("alexnet", 256)
    capacity = g.footprint // 2
    traffic = min_traffic(g, capacity)
    fitted = lower_bound(g, capacity, H100_DEFAULT, windows=windows)
    fast = replace(H100_DEFAULT, evict_fastest_bytes_per_ns=2 * H100_DEFAULT.evict_bytes_per_ns)
    bound = lower_bound(g, capacity, fast, windows=windows)
    assert bound.lower_bound_ns < fitted.lower_bound_ns
    if not windows:
        expected = (traffic.min_bytes_to_host / (2 * H100_DEFAULT.evict_bytes_per_ns)
                    + traffic.min_bytes_to_device / H100_DEFAULT.prefetch_bytes_per_ns)
        assert bound.lower_bound_ns == int(expected)
    # a "fastest" rate below the fitted one changes nothing, and swap's copies have rates of their own
    slower = replace(H100_DEFAULT, evict_fastest_bytes_per_ns=H100_DEFAULT.evict_bytes_per_ns / 2)
    assert lower_bound(g, capacity, slower, windows=windows) == fitted
    assert lower_bound(g, capacity, fast, "swap", windows=windows) == lower_bound(g, capacity, H100_DEFAULT, "swap",
                                                                                  windows=windows)


def test_a_faster_gpu_has_a_lower_bound_and_more_capacity_never_raises_it() -> None:
    g = graph("resnet50", 32)
    faster = replace(H100_DEFAULT, evict_bytes_per_ns=17.5, prefetch_bytes_per_ns=51.0)
    shares = (0.5, 0.6, 0.75, 0.9, 1.0)
    times = [lower_bound(g, int(g.footprint * s), H100_DEFAULT).lower_bound_ns for s in shares]
    assert times == sorted(times, reverse=True)
    assert lower_bound(g, g.footprint // 2, faster).lower_bound_ns < times[0]


def test_the_wording_says_how_far_and_what_sets_it() -> None:
    bound = Bound(1 << 30, 1 << 30, 300_000_000, MIGRATION)
    assert bound.versus(420_000_000) == "1.4x the bound, set by migration bandwidth"
    assert Bound(0, 0, 0, COMPUTE).versus(5.0) == "the bound is 0, set by compute"
    assert set(bound.as_json()) == {"min_bytes_to_host", "min_bytes_to_device", "lower_bound_ns", "set_by"}
    assert {COMPUTE, MIGRATION, EVICTION, PREFETCH, WINDOWS, TRADE} == set(SET_BY)


# copies a hundred times slower than the default's: making again is then the cheap way to make room
SLOW_COPIES = replace(H100_DEFAULT, prefetch_bytes_per_ns=0.5, evict_bytes_per_ns=0.5, fault_bytes_per_ns=0.5,
                      swap_to_device_bytes_per_ns=0.5, swap_to_host_bytes_per_ns=0.5, serialises_directions=False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([("vgg11", 4, 64), ("alexnet", 8, 96), ("resnet18", 2, 64)]), st.floats(0.0, 0.6),
       st.sampled_from(["uvm", "swap"]), st.data())
def test_no_mix_of_recomputing_and_moving_simulates_faster_than_the_joint_bound(setup, share, mechanism, data) -> None:
    from vmexplorer.policies.joint import _steps, _units
    from vmexplorer.policies.spec import Simulation

    g = graph(*setup)
    low = g.min_capacity[0]
    capacity = low + int((g.footprint - low) * share)
    units = _units(g, Simulation(simulate, lower_bound, H100_DEFAULT))
    chosen = data.draw(st.lists(st.sampled_from(units), unique=True, max_size=len(units)))
    steps = _steps(g, frozenset().union(*chosen))
    then = data.draw(st.sampled_from(["manual", "belady"]))
    try:
        plan = compile_plan(g, capacity, "manual", recomputes=steps, mechanism=mechanism) if then == "manual" else \
            compile_plan(g, capacity, "checkpoint", {"segments": data.draw(st.sampled_from([2, 4, 8])),
                                                     "then": "belady"}, mechanism=mechanism)
    except PlanError:
        return  # under swap a pool that no placement fits is refused, saying so
    for cost in (H100_DEFAULT, BOTH_WAYS, SLOW_COPIES):
        simulated = float(simulate(g, plan, cost).iteration_ns().max())
        joint = lower_bound(g, capacity, cost, mechanism, recompute=True)
        assert joint.lower_bound_ns <= simulated, (cost.name, joint, simulated)


def test_where_copies_are_slow_the_joint_bound_charges_the_re_runs_that_make_room() -> None:
    g = graph("vgg19", 64)
    capacity = int(g.footprint * 0.75)
    joint = lower_bound(g, capacity, SLOW_COPIES, "swap", recompute=True)
    # made free, the activations would leave the compute the bound; made again, they take time of it
    assert joint.set_by == TRADE and joint.lower_bound_ns > 1.02 * compute_ns(g, SLOW_COPIES)
    # and no plan of recomputing and moving that the policies make beats it
    for segments in (2, 4, 8):
        plan = compile_plan(g, capacity, "checkpoint", {"segments": segments, "then": "belady"}, mechanism="swap")
        assert joint.lower_bound_ns <= float(simulate(g, plan, SLOW_COPIES).iteration_ns().max())


def test_the_split_makes_again_the_cheapest_bytes_first_until_the_compute_meets_the_copies() -> None:
    # 100 bytes must be away; copying costs 1 ns a byte; compute alone takes 10 ns
    assert cheapest_split(100, (), [], 10.0, 1.0) == 100.0  # nothing can be made again: every byte copied
    assert cheapest_split(100, (50,), [0.0], 10.0, 1.0) == 50.0  # free re-runs of 50 bytes, the other 50 copied
    # re-runs at 1 ns a byte: they meet the copies where 10 + y = 100 - y, at y = 45
    assert cheapest_split(100, (200,), [200.0], 10.0, 1.0) == 55.0
    assert cheapest_split(5, (200,), [200.0], 10.0, 1.0) == 10.0  # the copies hide behind the compute
