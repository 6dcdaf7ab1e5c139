"""The simulator, the bound and calibration under the swap mechanism: pinned copies at their own rates,
both directions at once, what the replay forced waited for by its op, and never faster than the bound."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from strategies import swap_plan

from vmexplorer.config import Config, Mechanism
from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import Direction, MemOp, Mode, Origin, Plan
from vmexplorer.plan.bound import min_traffic
from vmexplorer.plan.stays import stays
from vmexplorer.policies import POLICIES, compile_plan
from vmexplorer.simulator import calibrate, simulate
from vmexplorer.simulator.bound import COMPUTE, EVICTION, PREFETCH, lower_bound
from vmexplorer.simulator.costmodel import H100_DEFAULT, CostModel

# copies slow enough that moving, not compute, sets the bound: the comparisons below then mean something
SLOW_COPIES = replace(H100_DEFAULT, swap_to_device_bytes_per_ns=20.0, swap_to_host_bytes_per_ns=15.0)


@cache
def graph(model: str, batch: int, size: int = 224) -> Graph:
    return build_graph(model, batch, size)


@pytest.mark.parametrize("cost", [H100_DEFAULT, SLOW_COPIES], ids=["default", "slow copies"])
@pytest.mark.parametrize("model,batch,size", [("vgg19", 64, 224), ("resnet50", 16, 224), ("alexnet", 64, 224),
                                              ("vgg11", 4, 64)])
@pytest.mark.parametrize("share", [0.5, 0.6, 0.75, 0.9])
def test_no_swap_plan_simulates_faster_than_the_swap_bound(cost: CostModel, model: str, batch: int, size: int,
                                                           share: float) -> None:
    g = graph(model, batch, size)
    capacity = max(int(g.footprint * share), g.min_capacity[0])
    for policy, spec in POLICIES.items():
        if spec.uvm_only or spec.searches:  # a search needs a simulation (tests/policies/test_tuned.py)
            continue
        plan = swap_plan(g, capacity, policy)
        simulated = float(np.median(simulate(g, plan, cost).iteration_ns()))
        # a plan that recomputes is held against the joint bound: moving alone is not a bound on it
        bound = lower_bound(g, plan.capacity, cost, Mechanism.SWAP, recompute=bool(plan.recomputes))
        assert bound.lower_bound_ns <= simulated, (policy, bound, simulated)


def test_the_swap_bound_is_the_slower_direction_at_the_copy_rates_over_the_same_least_traffic() -> None:
    g = graph("vgg19", 64)
    capacity = g.footprint // 2
    traffic = min_traffic(g, capacity)
    swap = lower_bound(g, capacity, SLOW_COPIES, "swap", windows=False)
    assert (swap.min_bytes_to_host, swap.min_bytes_to_device) == (traffic.min_bytes_to_host,
                                                                  traffic.min_bytes_to_device)
    out_ns = traffic.min_bytes_to_host / SLOW_COPIES.swap_to_host_bytes_per_ns
    in_ns = traffic.min_bytes_to_device / SLOW_COPIES.swap_to_device_bytes_per_ns
    assert swap.lower_bound_ns == int(max(out_ns, in_ns)) and swap.set_by == (EVICTION if out_ns > in_ns else PREFETCH)
    uvm = lower_bound(g, capacity, SLOW_COPIES, windows=False)
    assert uvm.lower_bound_ns > swap.lower_bound_ns > 0  # the driver: one way at a time, evicting at 8.5 GB/s
    assert lower_bound(g, capacity, H100_DEFAULT, "swap", windows=False).set_by == COMPUTE  # 54 GB/s each way hides it


def two_copies_at_once(mechanism: Mechanism) -> tuple[Graph, Plan, CostModel]:
    """An offload and a prefetch of equal size issued together after op 0, both due before op 2, on a
    cost model whose ops take no time and whose every rate is 1 byte/ns under both mechanisms."""
    g = graph("vgg11", 4, 64)
    out_t = g.ops[0].writes[0]
    in_t = next(t for t, x in enumerate(g.tensors) if x.persistent)
    nbytes = 10**6  # what the simulator times; it does not hold a plan to its tensors' sizes
    memops = (MemOp(out_t, Direction.TO_HOST, Mode.ASYNC, 0, 2, Origin.PLAN, nbytes),
              MemOp(in_t, Direction.TO_DEVICE, Mode.ASYNC, 0, 2, Origin.PLAN, nbytes))
    plan = Plan(Config(g.model, g.batch, g.image_size, g.footprint, "manual", {}, mechanism), memops, (), 0)
    cost = CostModel("unit", 1.0, 1.0, 0.0, prefetch_bytes_per_ns=1.0, evict_bytes_per_ns=1.0,
                     fault_bytes_per_ns=1.0, host_block=0.0, op_ns={op.name: 0.0 for op in g.ops},
                     swap_to_device_bytes_per_ns=1.0, swap_to_host_bytes_per_ns=1.0)
    return g, plan, cost


def test_under_swap_an_eviction_and_a_prefetch_issued_together_take_the_longer() -> None:
    g, plan, cost = two_copies_at_once(Mechanism.SWAP)
    tl = simulate(g, plan, cost)
    assert list(tl.memop_start_ns) == [0, 0]
    assert tl.op_start_ns[2] == 10**6


def test_under_uvm_an_eviction_and_a_prefetch_issued_together_take_their_sum() -> None:
    g, plan, cost = two_copies_at_once(Mechanism.UVM)
    tl = simulate(g, plan, cost)
    assert sorted(tl.memop_start_ns) == [0, 10**6]
    assert tl.op_start_ns[2] == 2 * 10**6


def test_a_copy_in_on_demand_stalls_its_op_for_the_copy_at_the_swap_rate() -> None:
    g = graph("resnet18", 4, 32)
    capacity = (g.min_capacity[0] + g.footprint) // 2
    plan = compile_plan(g, capacity, "manual", mechanism="swap")
    cost = replace(H100_DEFAULT, swap_to_device_bytes_per_ns=2.0, swap_call_ns=500.0)
    tl = simulate(g, plan, cost)
    copies = [i for i, m in enumerate(plan.memops) if m.direction is Direction.TO_DEVICE and m.mode is Mode.SYNC]
    assert copies
    for i in copies:
        m = plan.memops[i]
        assert tl.memop_end_ns[i] - tl.memop_start_ns[i] == pytest.approx(500 + m.nbytes / 2.0, abs=1)
        assert tl.memop_end_ns[i] <= tl.op_start_ns[m.complete_before]  # the op waits for it
    assert tl.op_fault_bytes.sum() == 0


def test_calibrating_a_swap_timeline_fits_the_swap_rates_and_keeps_the_uvm_ones() -> None:
    g = graph("resnet18", 4, 32)
    capacity = (g.min_capacity[0] + g.footprint) // 2
    plan = compile_plan(g, capacity, "belady", mechanism="swap")
    truth = replace(H100_DEFAULT, swap_to_device_bytes_per_ns=31.0, swap_to_host_bytes_per_ns=23.0,
                    swap_call_ns=4_000.0)
    fitted = calibrate(g, plan, simulate(g, plan, truth))
    assert fitted.swap_to_host_bytes_per_ns == pytest.approx(23.0, rel=1e-3)
    assert fitted.swap_call_ns == pytest.approx(4_000.0, rel=1e-2, abs=50)
    assert fitted.swap_to_device_bytes_per_ns == pytest.approx(31.0, rel=1e-2)
    for uvm_rate in ("prefetch_bytes_per_ns", "evict_bytes_per_ns", "fault_bytes_per_ns", "host_block", "call_ns"):
        assert getattr(fitted, uvm_rate) == getattr(H100_DEFAULT, uvm_rate)


def test_the_swap_view_of_a_cost_model_runs_both_ways_at_once_at_the_copy_rates_with_no_host_blocking() -> None:
    swap = SLOW_COPIES.for_mechanism("swap")
    assert (swap.prefetch_bytes_per_ns, swap.evict_bytes_per_ns, swap.fault_bytes_per_ns) == (20.0, 15.0, 20.0)
    assert (swap.host_block, swap.serialises_directions, swap.fault_bytes_per_ns_by_kind) == (0.0, False, {})
    assert SLOW_COPIES.for_mechanism("uvm") is SLOW_COPIES


def test_a_copy_in_taken_straight_back_out_before_any_op_moves_nothing_and_takes_no_time() -> None:
    g = graph("vgg19", 64)
    plan = compile_plan(g, g.footprint // 2, "vdnn", mechanism="swap")
    elided = stays(g, plan)[1]
    assert elided, "the repair should make room here while a copy in is still arriving"
    tl = simulate(g, plan, SLOW_COPIES)
    spans = tl.memop_end_ns - tl.memop_start_ns
    assert all(spans[i] == 0 for i in elided)
    assert all(spans[i] > 0 for i, m in enumerate(plan.memops) if m.nbytes and i not in elided)


def test_calibrating_a_swap_run_fits_its_copy_rates_to_the_copies_that_moved_bytes() -> None:
    g = graph("vgg19", 64)
    truth = replace(SLOW_COPIES, swap_call_ns=20_000.0)
    device = compile_plan(g, g.footprint, "device")
    on_device = calibrate(g, device, simulate(g, device, truth))
    plan = compile_plan(g, g.footprint // 2, "vdnn", mechanism="swap")  # with copies that move nothing
    fitted = calibrate(g, plan, simulate(g, plan, truth), base=on_device)
    assert fitted.swap_to_host_bytes_per_ns == pytest.approx(truth.swap_to_host_bytes_per_ns, rel=1e-3)
    assert fitted.swap_to_device_bytes_per_ns == pytest.approx(truth.swap_to_device_bytes_per_ns, rel=1e-3)
    assert fitted.swap_call_ns == pytest.approx(truth.swap_call_ns, rel=1e-2)
