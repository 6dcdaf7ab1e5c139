"""Convolutions timed by the workspace they run in: cuDNN's heuristic takes the first of its plans that
fits, the simulator times each convolution in the workspace its run gives it, the bound in the one it
runs fastest in, and calibrating keeps the times relative to the workspaces the calibrating run had."""

from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmexplorer.graph import Kind, build_graph
from vmexplorer.plan.pool import executed_graph
from vmexplorer.policies import compile_plan
from vmexplorer.simulator import simulate
from vmexplorer.simulator.bound import lower_bound
from vmexplorer.simulator.calibrate import calibrate
from vmexplorer.simulator.costmodel import H100_DEFAULT
from vmexplorer.simulator.workspaces import held, heuristic_steps, relative, summed, workspace_ns

MiB = 1 << 20


@cache
def graph(model: str = "vgg11", batch: int = 16):
    return build_graph(model, batch, 224)


def problems(g, slow: float = 4.0):
    """A made-up table: every convolution's heuristic prefers a plan needing its whole workspace, then one
    needing none that is `slow` times slower."""
    out = []
    for k, nbytes in enumerate(g.workspace_bytes):
        if nbytes and g.ops[k].attrs and dict(g.ops[k].attrs).get("workspace"):
            out.append({"ops": [k], "plans": [{"index": 0, "workspace_bytes": nbytes, "ms": 1.0},
                                              {"index": 1, "workspace_bytes": 0, "ms": slow}]})
    return out


def test_the_heuristic_takes_the_first_plan_in_its_order_that_fits_and_ran():
    plans = [(0, 8 * MiB, 1.0), (1, 2 * MiB, float("nan")), (2, 2 * MiB, 3.0), (3, 0, 5.0), (4, 0, 2.0)]
    steps = heuristic_steps(plans)
    assert steps == ((0, 5.0), (2 * MiB, 3.0), (8 * MiB, 1.0))
    assert [held(steps, w) for w in (0, MiB, 2 * MiB, 7 * MiB, 8 * MiB, 1 << 40)] == [5.0, 5.0, 3.0, 3.0, 1.0, 1.0]
    assert relative(steps, 2 * MiB) == ((0, 2.0), (2 * MiB, 0.0), (8 * MiB, -2.0))


def test_a_backward_op_running_two_problems_in_one_workspace_takes_their_time_together():
    data, weights = ((0, 4.0), (2 * MiB, 1.0)), ((0, 3.0), (MiB, 2.0), (8 * MiB, 0.5))
    assert summed([data, weights]) == ((0, 7.0), (MiB, 6.0), (2 * MiB, 3.0), (8 * MiB, 1.5))
    g = graph()
    k = next(k for k, op in enumerate(g.ops) if op.name.endswith(".backward") and g.workspace_bytes[k])
    table = workspace_ns(g, [{"ops": [k], "plans": [{"index": 0, "workspace_bytes": 0, "ms": 2.0}]},
                             {"ops": [k], "plans": [{"index": 0, "workspace_bytes": 0, "ms": 3.0}]}])
    assert table == {g.ops[k].name: ((0, 0.0),)}  # relative to its own workspace: nothing more


def test_a_convolution_in_less_workspace_is_simulated_slower_and_one_with_none_timed_takes_no_notice():
    g = graph()
    cost = replace(H100_DEFAULT, workspace_ns=workspace_ns(g, problems(g)))
    plan = compile_plan(g, g.footprint, "device")
    whole = simulate(g, plan, cost).iteration_ns()[0]
    ws = [t for t, x in enumerate(g.tensors) if x.kind is Kind.WORKSPACE and g.workspace_bytes[x.producer]]
    starved = g.with_workspaces({t: 4096 for t in ws})
    slower = simulate(g, plan, cost, starved).iteration_ns()[0]
    convs = len(problems(g))
    assert slower == pytest.approx(whole + convs * 3e6, rel=1e-6)  # each 3 ms slower in no workspace
    assert simulate(g, plan, H100_DEFAULT, starved).iteration_ns()[0] == simulate(g, plan).iteration_ns()[0]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["device", "uvm", "autovm", "belady"]), st.floats(0.35, 1.0), st.floats(0.2, 6.0))
def test_no_plan_simulated_in_the_workspaces_its_run_gives_it_is_faster_than_the_bound(policy, share, slow):
    g = graph()
    cost = replace(H100_DEFAULT, workspace_ns=workspace_ns(g, problems(g, slow)))
    capacity = g.footprint if policy == "device" else max(int(g.footprint * share), g.min_capacity[0])
    for mechanism in (["uvm"] if policy in ("device", "uvm", "autovm") else ["uvm", "swap"]):
        try:
            plan = compile_plan(g, capacity, policy, mechanism=mechanism)
        except Exception:
            continue
        run = executed_graph(g, plan)
        simulated = float(simulate(g, plan, cost, run).iteration_ns().min())
        assert simulated >= lower_bound(g, capacity, cost, mechanism).lower_bound_ns * (1 - 1e-9)


def test_calibrating_on_a_run_keeps_its_op_times_relative_to_the_workspaces_that_run_had():
    g = graph()
    truth = replace(H100_DEFAULT, workspace_ns=workspace_ns(g, problems(g)))  # relative to whole workspaces
    plan = compile_plan(g, g.footprint, "device")
    run = executed_graph(g, plan)  # its pool gives some convolution less than its whole workspace
    cut = [k for k, (a, b) in enumerate(zip(run.workspace_bytes, g.workspace_bytes)) if a < b]
    assert cut, "the device pool cuts a workspace here, so the test says something"
    timeline = simulate(g, plan, truth, run)
    fitted = calibrate(g, plan, timeline, base=replace(H100_DEFAULT, workspace_ns=truth.workspace_ns))
    for k in cut:
        op = g.ops[k]
        assert fitted.compute_ns(op.name, op.flops, op.bytes_touched, run.workspace_bytes[k]) == \
            pytest.approx(truth.compute_ns(op.name, op.flops, op.bytes_touched, run.workspace_bytes[k]), rel=1e-6)
        assert fitted.compute_ns(op.name, op.flops, op.bytes_touched, g.workspace_bytes[k]) == \
            pytest.approx(truth.compute_ns(op.name, op.flops, op.bytes_touched, g.workspace_bytes[k]), rel=1e-6)
