"""The executor's step program keeps every ordering rule of the plan, checked with no GPU."""

from functools import cache

import pytest

from vmexplorer.engine.schedule import StepKind, Stream, schedule
from vmexplorer.graph import build_graph
from vmexplorer.plan import Mode
from vmexplorer.policies import compile_plan


@cache
def plan_for(policy, options=()):
    g = build_graph("resnet18", 64)
    cap = g.footprint if policy == "device" else g.footprint // 2
    return g, compile_plan(g, cap, policy, dict(options))


CASES = [("device", ()), ("uvm", ()), ("autovm", ()), ("autovm", (("tensors", "all"), ("offload", "all")))]


@pytest.mark.parametrize("policy,options", CASES)
def test_every_op_and_memory_operation_is_one_step_in_order(policy, options):
    g, plan = plan_for(policy, options)
    steps = schedule(g, plan)
    assert [s.index for s in steps if s.kind is StepKind.OP] == list(range(len(g.ops)))
    assert sorted(s.index for s in steps if s.kind is not StepKind.OP) == list(range(len(plan.memops)))


@pytest.mark.parametrize("policy,options", CASES)
def test_a_step_only_waits_for_events_recorded_before_it(policy, options):
    g, plan = plan_for(policy, options)
    recorded = set()
    for s in schedule(g, plan):
        assert set(s.waits) <= recorded
        recorded.add(s.done)


@pytest.mark.parametrize("policy,options", CASES)
def test_each_op_waits_for_the_copies_due_before_it_and_copies_wait_for_their_op(policy, options):
    g, plan = plan_for(policy, options)
    steps = schedule(g, plan)
    op_waits = {s.index: set(s.waits) for s in steps if s.kind is StepKind.OP}
    for s in steps:
        if s.kind is StepKind.COPY:
            m = plan.memops[s.index]
            assert m.mode is Mode.ASYNC
            if m.complete_before < len(g.ops):
                assert ("memop", s.index) in op_waits[m.complete_before]
            if m.issue_after >= 0:
                assert ("op", m.issue_after) in s.waits
            assert s.stream in (Stream.TO_HOST, Stream.TO_DEVICE)


def test_a_prefetch_waits_for_the_offload_of_the_same_tensor():
    g, plan = plan_for("autovm", (("tensors", "all"), ("offload", "all")))
    last = {}
    for s in schedule(g, plan):
        if s.kind is StepKind.OP:
            continue
        t = plan.memops[s.index].tensor
        if t in last and s.kind is StepKind.COPY:
            assert last[t] in s.waits
        last[t] = s.done


def test_memory_calls_come_right_before_the_op_that_waits_for_them():
    g, plan = plan_for("autovm")
    steps = schedule(g, plan)
    position = {s.done: i for i, s in enumerate(steps)}
    for s in steps:
        if s.kind is StepKind.COPY and plan.memops[s.index].complete_before < len(g.ops):
            op = position[("op", plan.memops[s.index].complete_before)]
            between = steps[position[s.done] + 1:op]
            assert all(b.kind is not StepKind.OP for b in between)


@pytest.mark.parametrize("policy,options", CASES)
def test_a_prefetch_waits_for_the_evictions_that_make_its_room(policy, options):
    g, plan = plan_for(policy, options)
    for s in schedule(g, plan):
        m = plan.memops[s.index] if s.kind is not StepKind.OP else None
        if s.kind is StepKind.COPY and m.direction.value == "to_device":
            room = {("memop", j) for j, e in enumerate(plan.memops)
                    if e.mode is Mode.SYNC and e.complete_before == m.issue_after + 1}
            assert room <= set(s.waits)
