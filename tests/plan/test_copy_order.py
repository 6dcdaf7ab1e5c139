"""A swap plan's copy order (`plan.copies`): what a valid one is, where each call lands, how the
earliest-deadline order picks, and that the simulator and the executor's program both follow it."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from strategies import swap_plan

from vmexplorer.engine.schedule import StepKind, Stream, schedule
from vmexplorer.graph import build_graph
from vmexplorer.plan import Direction, MemOp, Mode, Origin, Plan, PlanError
from vmexplorer.plan.copies import asynchronous, call_before, check_copy_order, earliest_deadline
from vmexplorer.plan.pool import plan_pool
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import Simulation, compile_plan, order_copies
from vmexplorer.session import load_session
from vmexplorer.simulator import simulate
from vmexplorer.simulator.bound import lower_bound

SAMPLES = Path(__file__).resolve().parents[2] / "sample_sessions"
# a plan whose copy streams run faster in earliest-deadline order under its own cost model (and one that is not)
FASTER = ("h200-vgg19-b64-tuned-swap-50pct", "h200-vgg19-b64-tuned-swap-60pct", "h200-vgg19-b64-vdnn-swap-50pct")


@cache
def sample(name: str):  # noqa: ANN201
    s = load_session(SAMPLES / f"{name}.measured.vms")
    return s.graph, replace(s.plan, copy_order=()), s.cost_model


@cache
def ordered(name: str) -> Plan:
    graph, plan, cost = sample(name)
    timeline = simulate(graph, plan, cost)
    return replace(plan, copy_order=earliest_deadline(plan, timeline.op_end_ns,
                                                      timeline.memop_end_ns - timeline.memop_start_ns))


def small_swap_plan() -> tuple:
    graph = build_graph("resnet18", 16, 64)
    return graph, swap_plan(graph, graph.footprint // 2, "vdnn")


def test_with_no_order_each_copy_is_called_just_before_the_op_that_waits_for_it() -> None:
    _, plan = small_swap_plan()
    assert call_before(plan) == {i: m.complete_before for i, m in enumerate(plan.memops) if m.mode is Mode.ASYNC}


def test_in_an_order_each_copy_is_called_after_its_issue_op_or_after_the_call_before_it_on_its_stream() -> None:
    plan = ordered(FASTER[0])
    calls = call_before(plan)
    for d in Direction:
        latest = 0
        for i in asynchronous(plan, d):
            latest = max(latest, plan.memops[i].issue_after + 1)
            assert calls[i] == latest <= plan.memops[i].complete_before


def test_earliest_deadline_takes_a_copy_that_is_ready_before_one_due_sooner_whose_issue_op_has_not_ended() -> None:
    graph, plan = small_swap_plan()
    copy = lambda issue, due: MemOp(0, Direction.TO_DEVICE, Mode.ASYNC, issue, due, Origin.PLAN, 1)  # noqa: E731
    # 0 is due first but issued after op 5; 1 and 2 are ready at once, 2 due before 1
    toy = replace(plan, memops=(copy(5, 7), copy(-1, 9), copy(-1, 8)))
    ends = np.arange(1.0, 11.0)  # op k ends at k + 1
    assert earliest_deadline(toy, ends, [1.0, 1.0, 1.0]) == (2, 1, 0)
    # with the stream busy past op 5's end, 0 is ready too when it frees, and due before 1
    assert earliest_deadline(toy, ends, [1.0, 1.0, 10.0]) == (2, 0, 1)


def test_an_order_naming_a_copy_twice_leaving_one_out_or_naming_another_operation_is_refused() -> None:
    graph, plan = small_swap_plan()
    copies = [i for i, m in enumerate(plan.memops) if m.mode is Mode.ASYNC]
    other = next(i for i, m in enumerate(plan.memops) if m.mode is not Mode.ASYNC)
    for order, says in (((*copies, copies[0]), "twice"), (tuple(copies[1:]), "leaves out memory operation"),
                        ((*copies, other), "not an asynchronous copy"), ((*copies, 10**6), "the plan has")):
        with pytest.raises(PlanError, match=says):
            validate_plan(graph, replace(plan, copy_order=order))


def test_an_order_calling_a_copy_after_the_op_that_waits_for_it_is_refused() -> None:
    graph, plan = small_swap_plan()
    out = sorted(asynchronous(plan, Direction.TO_DEVICE), key=lambda i: -plan.memops[i].issue_after)
    late = out[0]
    waiting = next(i for i in out if plan.memops[i].complete_before <= plan.memops[late].issue_after)
    with pytest.raises(PlanError, match=f"after memory operation {late}, issued after op"):
        check_copy_order(graph, replace(plan, copy_order=(*asynchronous(plan, Direction.TO_HOST), *out)))
    assert waiting in out


def test_a_uvm_plan_has_no_copy_order() -> None:
    graph = build_graph("vgg11", 16, 64)
    plan = compile_plan(graph, max(graph.footprint // 2, graph.min_capacity[0]), "belady")
    copies = tuple(i for i, m in enumerate(plan.memops) if m.mode is Mode.ASYNC)
    with pytest.raises(PlanError, match="the plan is uvm but has a copy order"):
        validate_plan(graph, replace(plan, copy_order=copies))


@pytest.mark.parametrize("name", FASTER)
def test_the_simulator_runs_each_stream_in_the_order_each_copy_after_its_issue_op_and_each_op_after_its_copies(
        name: str) -> None:
    graph, _, cost = sample(name)
    plan = ordered(name)
    tl = simulate(graph, plan, cost)
    start, end, memops = tl.memop_start_ns, tl.memop_end_ns, plan.memops
    for d in Direction:
        queue = asynchronous(plan, d)
        assert np.all(np.diff(start[queue]) >= 0), f"{d} ran its copies out of the order"
        assert np.all(start[queue][1:] >= end[queue][:-1]), f"{d} ran two copies at once"
    for i in range(len(memops)):
        m = memops[i]
        if m.mode is Mode.ASYNC and m.issue_after >= 0:
            assert start[i] >= tl.op_end_ns[m.issue_after]
        if m.complete_before < len(graph.ops):
            assert tl.op_start_ns[m.complete_before] >= end[i]


@pytest.mark.parametrize("name", FASTER)
def test_the_program_calls_each_stream_in_the_order_and_every_step_comes_after_what_it_waits_for(name: str) -> None:
    graph, executor, _ = sample(name)
    plan = ordered(name)
    pool = plan_pool(graph, plan).waits
    steps = schedule(graph, plan, None, pool)
    every = sorted((x.kind, x.index) for x in schedule(graph, executor, None, pool))
    assert sorted((x.kind, x.index) for x in steps) == every
    for stream, d in ((Stream.TO_HOST, Direction.TO_HOST), (Stream.TO_DEVICE, Direction.TO_DEVICE)):
        assert [x.index for x in steps if x.stream is stream] == asynchronous(plan, d)
    seen: set = set()
    for step in steps:
        assert set(step.waits) <= seen, f"{step} waits for a step after it"
        if step.kind is StepKind.COPY and plan.memops[step.index].issue_after >= 0:
            assert ("op", plan.memops[step.index].issue_after) in step.waits
        seen.add(step.done)


def test_compile_plan_under_swap_keeps_the_order_its_simulation_runs_fastest_in() -> None:
    graph, plan, cost = sample(FASTER[0])
    simulation = Simulation(simulate, lower_bound, cost)
    picked = order_copies(graph, plan, simulation)
    assert picked.copy_order and picked.memops == plan.memops
    assert simulate(graph, picked, cost).iteration_ns().max() < simulate(graph, plan, cost).iteration_ns().max()
    moves = list(plan.moves)
    through = compile_plan(graph, plan.capacity, "manual", moves=moves, mechanism="swap", simulation=simulation)
    # the order its simulation picks for the plan it made (none where the executor's own runs fastest)
    assert through.copy_order == order_copies(graph, replace(through, copy_order=()), simulation).copy_order
    assert not compile_plan(graph, plan.capacity, "manual", moves=moves, mechanism="swap").copy_order
    assert not compile_plan(graph, plan.capacity, "manual", moves=moves, simulation=simulation).copy_order
