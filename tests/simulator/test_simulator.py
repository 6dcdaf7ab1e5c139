"""The simulator: timelines that obey the streams' rules, and the effects the design is about."""

from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmexplorer.graph import build_graph
from vmexplorer.plan import Direction, MemOp, Mode, Origin, PlanError
from vmexplorer.policies import compile_plan
from vmexplorer.records import summarize
from vmexplorer.simulator import simulate
from vmexplorer.simulator.calibrate import KIND_FAULT_BYTES, calibrate
from vmexplorer.simulator.costmodel import H100_DEFAULT, pooled

SMALL = [("alexnet", 96), ("vgg11", 64), ("resnet18", 64), ("resnet50", 32)]
HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def graph(model, batch, size=224):
    return build_graph(model, batch, size)


@st.composite
def plans(draw):
    model, size = draw(st.sampled_from(SMALL))
    g = graph(model, draw(st.integers(2, 16)), size)
    capacity = draw(st.integers(g.min_capacity[0], int(g.footprint * 1.05)))
    policy, options = draw(st.sampled_from([("uvm", {}), ("autovm", {}), ("autovm", {"tensors": "all"}),
                                            ("autovm", {"offload": "all", "prefetch_distance": 1})]))
    return g, compile_plan(g, capacity, policy, options)


def iteration_ms(model, batch, policy, share=0.5, options=None):
    g = graph(model, batch)
    capacity = g.footprint if policy == "device" else int(g.footprint * share)
    plan = compile_plan(g, capacity, policy, options)
    return simulate(g, plan).iteration_ns()[0] / 1e6


@HYP
@given(plans())
def test_a_simulated_timeline_obeys_the_rules_of_its_streams(setup):
    g, plan = setup
    tl = simulate(g, plan)
    start, end = tl.op_start_ns, tl.op_end_ns
    assert np.all(start[1:] >= end[:-1]), "ops on the compute stream never overlap"
    assert np.all(end - start >= 0) and np.all(tl.op_stall_ns >= 0)
    for row, i in enumerate(tl.memop_index):
        m = plan.memops[i]
        if m.mode is Mode.FAULT:
            assert (tl.memop_start_ns[row], tl.memop_end_ns[row]) == (start[m.complete_before], end[m.complete_before])
            continue
        if m.complete_before < len(g.ops):
            assert start[m.complete_before] >= tl.memop_end_ns[row], "an op waits for what it is due"
        if m.issue_after >= 0:
            assert tl.memop_start_ns[row] >= end[m.issue_after], "a copy waits for the op it follows"
    for direction in Direction:
        rows = [r for r, i in enumerate(tl.memop_index)
                if plan.memops[i].direction is direction and plan.memops[i].mode is Mode.ASYNC]
        spans = sorted((tl.memop_start_ns[r], tl.memop_end_ns[r]) for r in rows)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "one copy at a time per direction"
    calls = sorted((tl.memop_start_ns[r], tl.memop_end_ns[r]) for r, i in enumerate(tl.memop_index)
                   if plan.memops[i].mode is not Mode.FAULT)
    assert all(a[1] <= b[0] for a, b in zip(calls, calls[1:])), "through the driver, one migration call at a time"
    assert tl.resident_bytes.min() >= 0
    assert tl.resident_bytes.max() <= plan.capacity


@HYP
@given(plans())
def test_the_summary_counts_every_byte_the_plan_moves(setup):
    g, plan = setup
    s = summarize(g, plan, simulate(g, plan))
    assert s["bytes_to_host"] == sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
    assert s["bytes_to_device"] == sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE)
    assert s["iteration_ns"] >= s["busy_ns"]


def test_with_no_paging_the_iteration_is_the_sum_of_op_times_with_no_stall():
    g = graph("resnet50", 8)
    tl = simulate(g, compile_plan(g, g.footprint, "device"))
    compute = sum(H100_DEFAULT.compute_ns(op.name, op.flops, op.bytes_touched) for op in g.ops)
    assert tl.iteration_ns()[0] == pytest.approx(compute, rel=1e-6)
    assert tl.op_stall_ns.sum() == 0


@pytest.mark.parametrize("model,batch", [("vgg19", 64), ("resnet50", 64), ("alexnet", 256), ("resnet18", 32)])
def test_more_capacity_never_makes_uvm_slower(model, batch):
    g = graph(model, batch)
    times = [simulate(g, compile_plan(g, int(c), "uvm")).iteration_ns()[0]
             for c in np.linspace(g.min_capacity[0], g.footprint, 25)]
    assert all(later <= earlier for earlier, later in zip(times, times[1:]))


@pytest.mark.parametrize("model,batch", [("vgg19", 64), ("resnet50", 64), ("alexnet", 256)])
@pytest.mark.parametrize("share", [0.45, 0.5, 0.6])
def test_autovm_beats_uvm_when_memory_is_scarce(model, batch, share):
    assert iteration_ms(model, batch, "autovm", share) < iteration_ms(model, batch, "uvm", share)


def test_paging_is_never_faster_than_the_device_policy():
    for policy in ("uvm", "autovm"):
        assert iteration_ms("vgg19", 64, policy) > iteration_ms("vgg19", 64, "device")


def test_slower_demand_paging_makes_uvm_slower_but_not_a_plan_without_faults():
    g = graph("resnet50", 32)
    uvm = compile_plan(g, g.footprint // 2, "uvm")
    autovm = compile_plan(g, g.footprint // 2, "autovm")
    slow = replace(H100_DEFAULT, fault_bytes_per_ns=H100_DEFAULT.fault_bytes_per_ns / 2)
    assert simulate(g, uvm, slow).iteration_ns()[0] > simulate(g, uvm).iteration_ns()[0]
    assert not any(m.mode is Mode.FAULT for m in autovm.memops)
    assert simulate(g, autovm, slow).iteration_ns()[0] == simulate(g, autovm).iteration_ns()[0]


def test_calibration_recovers_the_cost_model_that_made_a_timeline():
    g = graph("resnet18", 32, 112)
    truth = replace(H100_DEFAULT, flops_per_ns=50_000.0, prefetch_bytes_per_ns=30.0,
                    evict_bytes_per_ns=6.0, fault_bytes_per_ns=2.0, call_ns=40_000.0, host_block=0.5)
    device = compile_plan(g, g.footprint, "device")
    on_device = calibrate(g, device, simulate(g, device, truth))
    uvm = compile_plan(g, g.footprint // 2, "uvm")
    with_faults = calibrate(g, uvm, simulate(g, uvm, truth), base=on_device)
    autovm = compile_plan(g, g.footprint // 2, "autovm")
    fitted = calibrate(g, autovm, simulate(g, autovm, truth), base=with_faults)
    assert fitted.evict_bytes_per_ns == pytest.approx(6.0, rel=1e-4)
    assert fitted.fault_bytes_per_ns == pytest.approx(2.0, rel=1e-4)
    assert fitted.prefetch_bytes_per_ns == pytest.approx(30.0, rel=1e-3)
    assert fitted.call_ns == pytest.approx(40_000.0, rel=1e-3)
    assert set(fitted.op_ns) == {op.name for op in g.ops}
    predicted = simulate(g, autovm, fitted).iteration_ns()[0]
    assert predicted == pytest.approx(simulate(g, autovm, truth).iteration_ns()[0], rel=1e-6)


def test_calibration_fits_a_fault_rate_per_op_kind_that_faulted_enough_to_measure_one():
    g = graph("vgg11", 32)
    truth = replace(H100_DEFAULT, fault_bytes_per_ns=2.0, fault_bytes_per_ns_by_kind={"sgd_momentum": 6.0})
    device = compile_plan(g, g.footprint, "device")
    on_device = calibrate(g, device, simulate(g, device, truth))
    uvm = compile_plan(g, g.footprint // 2, "uvm")
    faulted: dict[str, int] = {}
    for op, nbytes in zip(g.ops, simulate(g, uvm, truth).op_fault_bytes):
        if nbytes:
            faulted[op.kind] = faulted.get(op.kind, 0) + int(nbytes)
    large = {k for k, b in faulted.items() if b >= KIND_FAULT_BYTES}
    assert "sgd_momentum" in large and large - {"sgd_momentum"} and set(faulted) - large
    fitted = calibrate(g, uvm, simulate(g, uvm, truth), base=on_device)
    assert set(fitted.fault_bytes_per_ns_by_kind) == large  # a few small faults measure latency, not a rate
    assert fitted.fault_bytes_per_ns_by_kind["sgd_momentum"] == pytest.approx(6.0, rel=1e-4)
    assert all(fitted.fault_bytes_per_ns_by_kind[k] == pytest.approx(2.0, rel=1e-4) for k in large - {"sgd_momentum"})
    other = compile_plan(g, int(g.footprint * 0.7), "uvm")
    expected = simulate(g, other, truth).iteration_ns()[0]
    one_rate = replace(fitted, fault_bytes_per_ns_by_kind={})
    miss = [abs(simulate(g, other, m).iteration_ns()[0] / expected - 1) for m in (fitted, one_rate)]
    assert miss[0] < miss[1] / 2


def test_pooling_calibrations_takes_each_figures_median_over_the_recordings_that_have_it():
    runs = [replace(H100_DEFAULT, evict_bytes_per_ns=e, call_ns=c, op_ns=ops, fault_bytes_per_ns_by_kind=kinds)
            for e, c, ops, kinds in [(8.0, 100.0, {"a": 1.0, "b": 5.0}, {"sgd_momentum": 9.0}),
                                     (12.0, 50.0, {"a": 3.0}, {}),
                                     (10.0, 70.0, {"a": 2.0, "b": 7.0}, {"sgd_momentum": 11.0})]]
    pool = pooled(runs, "three recordings")
    assert (pool.name, pool.evict_bytes_per_ns, pool.call_ns) == ("three recordings", 10.0, 70.0)
    assert pool.op_ns == {"a": 2.0, "b": 6.0}
    assert pool.fault_bytes_per_ns_by_kind == {"sgd_momentum": 10.0}
    # the bound's eviction rate is the fastest recording's, not a median
    assert pool.evict_fastest_bytes_per_ns == 12.0 and pool.fastest_evict_bytes_per_ns == 12.0
    with pytest.raises(ValueError):
        pooled([], "none")


def test_calibration_reads_only_the_timed_iterations():
    import numpy as np

    from vmexplorer.records import Timeline

    g = graph("resnet18", 32, 112)
    uvm = compile_plan(g, g.footprint // 2, "uvm")
    truth = replace(H100_DEFAULT, evict_bytes_per_ns=6.0, fault_bytes_per_ns=2.0)
    slow = replace(truth, evict_bytes_per_ns=3.0, fault_bytes_per_ns=1.0)  # as if counting slowed paging
    a, b = simulate(g, uvm, truth), simulate(g, uvm, slow)
    shift = int(max(a.op_end_ns.max(), a.memop_end_ns.max())) + 1

    def cat(x: np.ndarray, y: np.ndarray, add: int = 0) -> np.ndarray:
        return np.concatenate([x, y + add])

    both = Timeline("measured", cat(a.op_iteration, b.op_iteration, 1), cat(a.op_index, b.op_index),
                    cat(a.op_start_ns, b.op_start_ns, shift), cat(a.op_end_ns, b.op_end_ns, shift),
                    cat(a.op_stall_ns, b.op_stall_ns), cat(a.op_fault_bytes, b.op_fault_bytes),
                    cat(a.memop_iteration, b.memop_iteration, 1), cat(a.memop_index, b.memop_index),
                    cat(a.memop_start_ns, b.memop_start_ns, shift), cat(a.memop_end_ns, b.memop_end_ns, shift),
                    cat(a.resident_t_ns, b.resident_t_ns, shift), cat(a.resident_bytes, b.resident_bytes), counted=1)
    fitted = calibrate(g, uvm, both)
    assert fitted.evict_bytes_per_ns == pytest.approx(6.0, rel=1e-4)
    assert fitted.fault_bytes_per_ns == pytest.approx(calibrate(g, uvm, a).fault_bytes_per_ns)
    assert calibrate(g, uvm, replace(both, counted=0)).evict_bytes_per_ns < 5.0


def test_a_calibrated_op_time_replaces_the_formula():
    model = replace(H100_DEFAULT, op_ns={"conv1": 123.0})
    assert model.compute_ns("conv1", 10**12, 10**9) == 123.0
    assert model.compute_ns("conv2", 10**12, 10**9) > 123.0


def test_a_cost_model_too_slow_for_the_plan_is_one_plan_error_not_wrapped_times() -> None:
    graph = build_graph("vgg19", 64)
    plan = compile_plan(graph, graph.footprint // 2, "uvm")
    crawl = replace(H100_DEFAULT, fault_bytes_per_ns=1e-9)  # a byte a second
    with pytest.raises(PlanError, match=r"would last [\d.e+]+ days, beyond the 104 a timeline holds"):
        simulate(graph, plan, crawl)


# a migration call costs its bytes only and never holds up the host, so nothing but the engine orders them
BARE = replace(H100_DEFAULT, call_ns=0.0, host_block=0.0, prefetch_bytes_per_ns=50.0, evict_bytes_per_ns=20.0)
GIB2 = 2 << 30


def with_memops(g, *memops):
    """The device plan of `g` with these memory operations only (the simulator reads their bytes)."""
    return replace(compile_plan(g, g.footprint, "device"), memops=tuple(memops))


@pytest.mark.parametrize("serialised", [True, False], ids=["through the driver", "copies each way"])
def test_an_eviction_and_a_prefetch_issued_together_take_their_sum_when_serialised_and_the_longer_when_not(
        serialised):
    g = graph("alexnet", 64)
    last = len(g.ops) - 1
    plan = with_memops(g, MemOp(0, Direction.TO_HOST, Mode.ASYNC, 0, last, Origin.PLAN, GIB2),
                       MemOp(1, Direction.TO_DEVICE, Mode.ASYNC, 0, last, Origin.PLAN, GIB2))
    cost = replace(BARE, serialises_directions=serialised)
    tl = simulate(g, plan, cost)
    out_ns, in_ns = GIB2 / cost.evict_bytes_per_ns, GIB2 / cost.prefetch_bytes_per_ns
    both = tl.memop_end_ns.max() - tl.memop_start_ns.min()
    assert both == pytest.approx(out_ns + in_ns if serialised else max(out_ns, in_ns), abs=2)
    assert len(set(tl.memop_start_ns)) == (2 if serialised else 1)


@pytest.mark.parametrize("serialised", [True, False], ids=["through the driver", "copies each way"])
def test_a_prefetch_waits_for_the_driver_eviction_issued_before_it_only_when_serialised(serialised):
    g = graph("alexnet", 64)
    # issued after op 0, the prefetch is ready long before the eviction the driver makes before op 3 ends;
    # the host issues it after that eviction, as it waits for nothing before op 5
    eviction = MemOp(0, Direction.TO_HOST, Mode.SYNC, 2, 3, Origin.DRIVER, GIB2 // 8)
    prefetch = MemOp(1, Direction.TO_DEVICE, Mode.ASYNC, 0, 5, Origin.PLAN, 64 << 20)
    tl = simulate(g, with_memops(g, eviction, prefetch), replace(BARE, serialises_directions=serialised))
    eviction_end, prefetch_start = tl.memop_end_ns[0], tl.memop_start_ns[1]
    assert (prefetch_start == eviction_end) if serialised else (prefetch_start < tl.memop_start_ns[0])


def test_demand_faults_are_not_held_up_by_a_migration_in_flight():
    g = graph("alexnet", 64)
    last = len(g.ops) - 1
    fault = MemOp(2, Direction.TO_DEVICE, Mode.FAULT, 1, 2, Origin.DRIVER, 64 << 20)
    alone = simulate(g, with_memops(g, fault), BARE)
    beside = simulate(g, with_memops(g, fault, MemOp(0, Direction.TO_HOST, Mode.ASYNC, 0, last, Origin.PLAN, GIB2)),
                      BARE)
    assert beside.memop_end_ns[1] > beside.op_end_ns[2]  # the eviction was still running while op 2 faulted
    assert beside.op_end_ns[2] - beside.op_start_ns[2] == alone.op_end_ns[2] - alone.op_start_ns[2]


def test_each_eviction_says_who_issued_it_what_it_moves_how_its_pages_came_and_whether_faults_follow():
    from vmexplorer.simulator.calibrate import evictions

    g = graph("alexnet", 64)
    act, weight, other = (g.tensor_id(n) for n in ("features.1.out", "features.3.weight", "features.6.weight"))
    size = g.tensors[act].nbytes
    plan = with_memops(
        g,
        MemOp(weight, Direction.TO_HOST, Mode.SYNC, 0, 1, Origin.DRIVER, g.tensors[weight].nbytes),  # held from before
        MemOp(act, Direction.TO_HOST, Mode.ASYNC, 1, 3, Origin.PLAN, size),  # just written by its producer, op 1
        MemOp(weight, Direction.TO_DEVICE, Mode.FAULT, 2, 3, Origin.DRIVER, g.tensors[weight].nbytes),
        MemOp(act, Direction.TO_DEVICE, Mode.FAULT, 3, 4, Origin.DRIVER, size),
        MemOp(act, Direction.TO_HOST, Mode.SYNC, 5, 6, Origin.DRIVER, size // 2),  # the tail of what op 4 faulted in
        MemOp(other, Direction.TO_DEVICE, Mode.FAULT, 5, 6, Origin.DRIVER, g.tensors[other].nbytes))
    tl = simulate(g, plan, BARE)
    got = evictions(g, plan, tl)
    assert [(e.planned, e.whole, e.arrived_by, e.before_fault) for e in got] == [
        (False, True, "before", False), (True, True, "producer", True), (False, False, "fault", True)]
    assert [e.span_ns for e in got] == [int(tl.memop_end_ns[i] - tl.memop_start_ns[i]) for i in (0, 1, 4)]
    assert got[1].bytes_per_ns == pytest.approx(BARE.evict_bytes_per_ns, rel=1e-6)


def test_evictions_are_listed_once_per_timed_iteration_and_never_from_a_counted_one():
    import numpy as np

    from vmexplorer.records import Timeline
    from vmexplorer.simulator.calibrate import evictions

    g = graph("resnet18", 32, 112)
    uvm = compile_plan(g, g.footprint // 2, "uvm")
    a = simulate(g, uvm, BARE)
    out = sum(1 for m in uvm.memops if m.direction is Direction.TO_HOST and m.mode is not Mode.FAULT and m.nbytes)
    assert out and len(evictions(g, uvm, a)) == out
    assert not any(e.planned for e in evictions(g, uvm, a)), "under uvm every eviction is the replay's"
    shift = int(max(a.op_end_ns.max(), a.memop_end_ns.max())) + 1

    def three(x: np.ndarray, step: int = 0) -> np.ndarray:
        return np.concatenate([x, x + step, x + 2 * step])

    runs = Timeline("measured", three(a.op_iteration, 1), three(a.op_index), three(a.op_start_ns, shift),
                    three(a.op_end_ns, shift), three(a.op_stall_ns), three(a.op_fault_bytes),
                    three(a.memop_iteration, 1), three(a.memop_index), three(a.memop_start_ns, shift),
                    three(a.memop_end_ns, shift), three(a.resident_t_ns, shift), three(a.resident_bytes), counted=1)
    assert len(evictions(g, uvm, runs)) == 2 * out
