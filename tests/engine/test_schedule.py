"""The executor's step program keeps every ordering rule of the plan, checked with no GPU."""

from functools import cache

import pytest

from vmexplorer.engine.memory import dead_bytes
from vmexplorer.engine.schedule import PAGE, Ledger, StepKind, Stream, room_per_op, schedule
from vmexplorer.graph import build_graph
from vmexplorer.plan import Direction, Mode
from vmexplorer.plan.placement import MANAGED_ALIGN as ALIGN
from vmexplorer.plan.pool import layout
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


# --- dead bytes: discards after a tensor's last op, populates before its producer -----------------------
LIFETIME = (StepKind.DISCARD, StepKind.POPULATE)
PAGING = [("uvm", ()), ("autovm", ()), ("autovm", (("tensors", "all"), ("offload", "all"))), ("belady", ()),
          ("vdnn", ())]


@cache
def dead_for(policy, options=(), room=False):
    g, plan = plan_for(policy, options)
    kept = {g.tensor_id("loss.value")}
    return g, plan, dead_bytes(layout(g, ALIGN, kept), len(g.ops), room_per_op(g, plan, kept) if room else None)


@pytest.mark.parametrize("policy,options", PAGING)
def test_dead_bytes_add_steps_and_change_no_other(policy, options):
    g, plan, dead = dead_for(policy, options)
    steps = schedule(g, plan, dead)
    assert {s.kind for s in steps} >= set(LIFETIME)
    others = [(s.kind, s.index, s.stream, tuple(w for w in s.waits if w[0] == "op" or w[0] == "memop"))
              for s in steps if s.kind not in LIFETIME]
    assert others == [(s.kind, s.index, s.stream, s.waits) for s in schedule(g, plan)]
    recorded = set()
    for s in steps:
        assert set(s.waits) <= recorded
        recorded.add(s.done)


@pytest.mark.parametrize("policy,options", PAGING)
def test_a_discard_waits_for_the_last_op_and_last_move_of_each_tensor_it_frees(policy, options):
    g, plan, dead = dead_for(policy, options)
    last_move = {}
    for s in schedule(g, plan, dead):
        if s.kind in (StepKind.COPY, StepKind.EVICT, StepKind.FAULT):
            last_move[plan.memops[s.index].tensor] = s.done
        if s.kind is StepKind.DISCARD and s.index >= 0:
            assert s.stream is Stream.DISCARD and ("op", s.index) in s.waits
            assert all(g.last_use[t] == s.index for t in s.tensors)
            assert all(last_move[t] in s.waits for t in s.tensors if t in last_move)
    assert all(plan.memops[i].complete_before <= g.last_use[plan.memops[i].tensor]
               for i in range(len(plan.memops)) if not g.tensors[plan.memops[i].tensor].persistent)


@pytest.mark.parametrize("policy,options", PAGING)
def test_an_op_waits_for_its_populate_which_waits_for_the_discards_that_freed_its_bytes(policy, options):
    g, plan, dead = dead_for(policy, options)
    steps = schedule(g, plan, dead)
    op_waits = {s.index: set(s.waits) for s in steps if s.kind is StepKind.OP}
    for s in steps:
        if s.kind is StepKind.POPULATE:
            assert s.stream is Stream.POPULATE and ("populate", s.index) in op_waits[s.index]
            freed = {op for _, _, op in dead.populate_before[s.index]}
            assert {("discard", op) for op in freed} <= set(s.waits)
            # not earlier than while the op two before runs: the pages are not held long before they are live
            assert s.index < 2 or ("op", s.index - 2) in s.waits
            assert set(s.tensors) == {t for t, tensor in enumerate(g.tensors) if tensor.producer == s.index}


def ledger_after(g, plan, steps, dead, iterations=2):
    start = dict(plan.resident_at_start)
    ledger = Ledger(g, [start.get(t, 0) if tensor.persistent else 0 if dead else tensor.nbytes
                        for t, tensor in enumerate(g.tensors)])
    began = list(ledger.bytes)
    for _ in range(iterations):
        for s in steps:
            ledger.apply(s, plan)
    return ledger, began


@pytest.mark.parametrize("policy,options", PAGING)
def test_with_discards_the_ledger_never_holds_more_than_the_capacity_while_an_op_runs(policy, options):
    g, plan, dead = dead_for(policy, options)
    ledger, began = ledger_after(g, plan, schedule(g, plan, dead), dead)
    assert ledger.peak <= plan.capacity
    # where it began, but for the loss, which holds its bytes until the host has read it
    assert [b for t, b in enumerate(ledger.bytes) if t not in dead.kept] == \
        [b for t, b in enumerate(began) if t not in dead.kept]
    assert all(ledger.bytes[t] == g.tensors[t].nbytes for t in dead.kept)


@pytest.mark.parametrize("policy,options", PAGING)
def test_dead_bytes_waiting_in_the_room_never_take_the_device_past_its_capacity(policy, options):
    g, plan, dead = dead_for(policy, options, room=True)
    start = dict(plan.resident_at_start)
    ledger = Ledger(g, [start.get(t, 0) if tensor.persistent else 0 for t, tensor in enumerate(g.tensors)])
    for s in schedule(g, plan, dead):
        ledger.apply(s, plan)
        if s.kind is StepKind.OP:
            assert ledger.total + dead.held[s.index] <= plan.capacity, f"op {s.index}"
    assert dead.discarded_bytes() < dead_for(policy, options)[2].discarded_bytes() / 2, "the room must be used"


def test_without_discards_the_ledger_counts_dead_tensors_as_on_the_device():
    g, plan, dead = dead_for("autovm")
    ledger, _ = ledger_after(g, plan, schedule(g, plan), None)
    assert ledger.peak > 2 * plan.capacity


def test_the_ledger_evicts_a_tensor_from_its_end_on_page_boundaries_and_offloads_all_it_holds():
    g, plan, dead = dead_for("uvm")
    ledger, _ = ledger_after(g, plan, (), dead, iterations=0)
    for s in schedule(g, plan, dead):
        m = plan.memops[s.index] if s.kind in (StepKind.COPY, StepKind.EVICT) else None
        had = ledger.bytes[m.tensor] if m else 0
        offset, size = ledger.apply(s, plan)
        if m is None:
            assert (offset, size) == (0, 0)
        elif m.direction is Direction.TO_DEVICE:
            assert (offset, size, ledger.bytes[m.tensor]) == (0, g.tensors[m.tensor].nbytes, size)
        else:
            assert offset % PAGE == 0 and offset + size == had and ledger.bytes[m.tensor] == offset
            assert m.mode is Mode.SYNC or offset == 0
