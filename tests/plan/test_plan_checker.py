"""Every plan a policy compiles holds by an independent ledger (tests/plan_checker.py), which shares no code
with the replay that builds and validates plans; the ledger finds the plan's own peak, agrees with the
validator on broken plans, and refuses plans that overflow, miss a prefetch, or move what is not there."""

from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from plan_checker import check_memops, check_plan
from strategies import AUTOVM_OPTIONS, manual_moves

from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import Direction, MemOp, Mode, Origin, Plan, PlanError
from vmexplorer.plan.residency import check
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import compile_plan

SMALL = [("alexnet", 96), ("vgg11", 32), ("vgg16", 32), ("resnet18", 32), ("resnet50", 32)]
HYP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def graph(model: str, batch: int, size: int) -> Graph:
    return build_graph(model, batch, size)


@st.composite
def compiled(draw: st.DrawFn, paging: bool = False) -> tuple[Graph, Plan]:
    """A plan of any policy at any capacity it takes; with `paging`, one that has to page."""
    model, size = draw(st.sampled_from(SMALL))
    g = graph(model, draw(st.integers(1, 4)), size)
    policy = draw(st.sampled_from(["uvm", "autovm", "manual"] if paging else ["device", "uvm", "autovm", "manual"]))
    low = g.footprint if policy == "device" else g.min_capacity[0]
    capacity = draw(st.integers(low, g.footprint - 1 if paging else int(g.footprint * 1.1)))
    options = draw(AUTOVM_OPTIONS) if policy == "autovm" else {}
    moves = draw(manual_moves(g)) if policy == "manual" else []
    return g, compile_plan(g, capacity, policy, options, moves=moves)


@HYP
@given(compiled())
def test_every_compiled_plan_holds_by_the_independent_ledger_with_the_same_bytes_at_every_op(case):
    g, plan = case
    ledger = check_plan(g, plan)
    assert ledger.problems == ()
    assert ledger.peak == plan.peak_resident <= plan.capacity
    replayed = check(g, plan.capacity, plan.memops, plan.resident_at_start)
    assert ledger.bytes_per_op == replayed.occupied_bytes


@HYP
@given(compiled(), st.data())
def test_the_ledger_refuses_a_capacity_exactly_when_it_is_below_the_plans_peak(case, data):
    g, plan = case
    capacity = data.draw(st.integers(plan.peak_resident - 2**20, plan.peak_resident + 2**20))
    assert (check_plan(g, plan, capacity).problems == ()) == (capacity >= plan.peak_resident)


def broken(data: st.DataObject, g: Graph, plan: Plan) -> tuple[MemOp, ...]:
    """The plan's memops with one of them dropped, moved by an op or two, resized or retargeted."""
    memops = list(plan.memops)
    i = data.draw(st.integers(0, len(memops) - 1), label="memop")
    m = memops[i]
    change = data.draw(st.sampled_from(["drop", "shift", "resize", "deadline", "tensor"]), label="change")
    if change == "drop":
        return tuple(memops[:i] + memops[i + 1:])
    if change == "shift":
        d = data.draw(st.sampled_from([-2, -1, 1, 2]), label="by")
        m = replace(m, issue_after=m.issue_after + d, complete_before=m.complete_before + d)
    elif change == "resize":
        m = replace(m, nbytes=data.draw(st.integers(0, g.tensors[m.tensor].nbytes), label="nbytes"))
    elif change == "deadline":
        assume(m.mode is Mode.ASYNC)
        m = replace(m, complete_before=data.draw(st.integers(m.issue_after + 1, len(g.ops)), label="due"))
    else:
        t = data.draw(st.integers(0, len(g.tensors) - 1), label="tensor")
        m = replace(m, tensor=t, nbytes=min(m.nbytes, g.tensors[t].nbytes))
    assume(m != memops[i])
    return tuple(memops[:i] + [m] + memops[i + 1:])


def _planned_faults_are_distinct(memops: tuple[MemOp, ...]) -> bool:
    """The replay keys a plan's faults at an op by tensor, so it reads a fault listed twice as one; the
    ledger counts both, and refuses the second (there is nothing left to bring in)."""
    faults = [(m.tensor, m.issue_after) for m in memops if m.mode is Mode.FAULT]
    return len(faults) == len(set(faults))


@HYP
@given(compiled(paging=True), st.data())
def test_a_broken_plan_is_refused_by_the_ledger_exactly_when_the_validator_refuses_it(case, data):
    g, plan = case
    assume(plan.memops)
    memops = broken(data, g, plan)
    assume(_planned_faults_are_distinct(memops))
    bad = replace(plan, memops=memops)
    ledger = check_plan(g, bad)
    event("refused" if ledger.problems else "still valid")
    try:
        validate_plan(g, bad)
    except PlanError as e:
        assert ledger.problems, f"the validator refuses it ({e}), the ledger does not"
    else:
        assert ledger.problems == (), "the validator accepts it"


@pytest.mark.parametrize("model,size", SMALL)
def test_with_nothing_paged_the_ledger_is_the_graphs_live_bytes(model, size):
    g = graph(model, 2, size)
    plan = compile_plan(g, g.footprint, "device")
    assert check_plan(g, plan).bytes_per_op == g.live_bytes


def test_a_plan_over_the_capacity_is_refused_at_the_op_that_overflows():
    g = graph("vgg11", 2, 32)
    plan = compile_plan(g, g.footprint, "device")
    first_peak = g.live_bytes.index(g.footprint)
    problems = check_plan(g, plan, g.footprint - 1).problems
    assert problems[0] == (f"at op {first_peak}: {g.ops[first_peak].name} runs with {g.footprint} bytes on the "
                           f"device, over the capacity {g.footprint - 1}")


def test_a_plan_without_the_prefetch_a_use_needs_is_refused_at_that_use():
    g = graph("resnet18", 16, 64)
    plan = compile_plan(g, g.footprint // 2, "autovm")
    prefetch = next(m for m in plan.memops if m.direction is Direction.TO_DEVICE and m.origin is Origin.PLAN)
    use, name = prefetch.complete_before, g.tensors[prefetch.tensor].name
    problems = check_plan(g, replace(plan, memops=tuple(m for m in plan.memops if m != prefetch))).problems
    assert f"at op {use}: {g.ops[use].name} touches {name} with 0 of its" in problems[0]


def _a_weight(g: Graph) -> int:
    return next(t for t, x in enumerate(g.tensors) if x.persistent and x.name.endswith(".weight"))


def _temporary(g: Graph) -> int:
    return next(t for t, x in enumerate(g.tensors) if not x.persistent and len(g.uses[t]) >= 3)


def _nothing_paged(g: Graph, memops: list[MemOp]) -> tuple[str, ...]:
    """Problems of `memops` on a device that holds the footprint, every persistent tensor on it."""
    start = tuple((t, x.nbytes) for t, x in enumerate(g.tensors) if x.persistent)
    return check_memops(g, memops, start, g.footprint).problems


def test_a_prefetch_of_a_tensor_already_on_the_device_is_refused():
    g = graph("vgg11", 2, 32)
    w = _a_weight(g)
    problems = _nothing_paged(g, [MemOp(w, Direction.TO_DEVICE, Mode.ASYNC, -1, g.uses[w][0], Origin.PLAN, 0)])
    assert problems == (f"at op 0: {g.tensors[w].name} is prefetched but is wholly on the device already",)


def test_an_offload_of_a_temporary_before_its_producer_runs_is_refused():
    g = graph("vgg11", 2, 32)
    t = _temporary(g)
    producer, nbytes = g.tensors[t].producer, g.tensors[t].nbytes
    problems = _nothing_paged(g, [MemOp(t, Direction.TO_HOST, Mode.ASYNC, producer - 1, producer, Origin.PLAN,
                                        nbytes)])
    assert problems[0] == f"at op {producer}: {g.tensors[t].name} is offloaded while it is not alive"


def test_an_offload_that_claims_other_bytes_than_the_tensor_has_is_refused():
    g = graph("vgg11", 2, 32)
    t = _temporary(g)
    a, b = g.uses[t][:2]
    problems = _nothing_paged(g, [MemOp(t, Direction.TO_HOST, Mode.ASYNC, a, b, Origin.PLAN, 1)])
    assert problems[0] == (f"at op {a + 1}: {g.tensors[t].name} is offloaded with 1 bytes, but "
                           f"{g.tensors[t].nbytes} would move")


def test_evicting_a_tensor_the_op_touches_is_refused():
    g = graph("vgg11", 2, 32)
    t = _temporary(g)
    use = g.uses[t][1]
    problems = _nothing_paged(g, [MemOp(t, Direction.TO_HOST, Mode.SYNC, use - 1, use, Origin.DRIVER, 4096)])
    assert "and the op touches it" in problems[0]


def test_an_offload_still_under_way_when_its_tensor_is_used_is_refused():
    g = graph("vgg11", 2, 32)
    t = _temporary(g)
    a, b = g.uses[t][:2]
    offload = MemOp(t, Direction.TO_HOST, Mode.ASYNC, a, b + 1, Origin.PLAN, g.tensors[t].nbytes)
    assert f"(its offload is under way, due before op {b + 1})" in _nothing_paged(g, [offload])[0]


def test_a_fault_for_an_op_that_does_not_touch_its_tensor_is_refused():
    g = graph("vgg11", 2, 32)
    w = _a_weight(g)
    elsewhere = next(k for k in range(len(g.ops) - 1) if w not in g.ops[k].touches + g.ops[k + 1].touches)
    evict = MemOp(w, Direction.TO_HOST, Mode.SYNC, elsewhere - 1, elsewhere, Origin.DRIVER, g.tensors[w].nbytes)
    fault = MemOp(w, Direction.TO_DEVICE, Mode.FAULT, elsewhere, elsewhere + 1, Origin.DRIVER, g.tensors[w].nbytes)
    problems = _nothing_paged(g, [evict, fault])
    assert f"{g.tensors[w].name} is faulted in for {g.ops[elsewhere + 1].name}, which does not touch it" \
        in problems[0]


def test_a_fault_listed_twice_is_refused():
    g = graph("resnet18", 2, 32)
    plan = compile_plan(g, g.min_capacity[0], "uvm")
    fault = next(m for m in plan.memops if m.mode is Mode.FAULT)
    problems = check_plan(g, replace(plan, memops=plan.memops + (fault,))).problems
    assert f"{g.tensors[fault.tensor].name} is faulted in but is wholly on the device already" in problems[0]


def test_an_iteration_that_ends_with_other_bytes_than_it_starts_with_is_refused():
    g = graph("vgg11", 2, 32)
    w = _a_weight(g)
    last = g.uses[w][-1]
    offload = MemOp(w, Direction.TO_HOST, Mode.ASYNC, last, len(g.ops), Origin.PLAN, g.tensors[w].nbytes)
    assert _nothing_paged(g, [offload]) == (
        f"at the iteration end: {g.tensors[w].name} ends the iteration with 0 bytes on the device, but starts "
        f"it with {g.tensors[w].nbytes}",)


def test_a_fault_after_the_last_op_is_refused():
    g = graph("vgg11", 2, 32)
    w, n = _a_weight(g), len(g.ops)
    evict = MemOp(w, Direction.TO_HOST, Mode.SYNC, n - 2, n - 1, Origin.DRIVER, g.tensors[w].nbytes)
    fault = MemOp(w, Direction.TO_DEVICE, Mode.FAULT, n - 1, n, Origin.DRIVER, g.tensors[w].nbytes)
    assert f"at the iteration end: {g.tensors[w].name} is faulted in after the last op, for no op" \
        in _nothing_paged(g, [evict, fault])


@pytest.mark.parametrize("memop,message", [
    (MemOp(10**6, Direction.TO_HOST, Mode.ASYNC, 0, 1, Origin.PLAN, 0), "which the graph does not have"),
    (MemOp(0, Direction.TO_HOST, Mode.ASYNC, 3, 3, Origin.PLAN, 0), "issued after op 3 and due before op 3"),
    (MemOp(0, Direction.TO_HOST, Mode.FAULT, 3, 4, Origin.PLAN, 0), "a fault transfer to_host: no such"),
    (MemOp(0, Direction.TO_HOST, Mode.SYNC, 3, 5, Origin.PLAN, 0), "does not complete before the next op"),
    (MemOp(0, Direction.TO_HOST, Mode.SYNC, 3, 4, Origin.PLAN, 2**60), "moves 1152921504606846976 bytes"),
])
def test_malformed_memops_are_refused_before_any_bytes_are_counted(memop, message):
    g = graph("vgg11", 2, 32)
    problems = _nothing_paged(g, [memop])
    assert len(problems) == 1 and message in problems[0]
