"""Policies compile plans that always hold: within capacity, every touched tensor resident, steady."""

from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import AUTOVM_OPTIONS, manual_moves

from vmexplorer.graph import Kind, Phase, build_graph
from vmexplorer.plan import Direction, Mode, Move, Origin, PlanError
from vmexplorer.plan.moves import load_moves
from vmexplorer.plan.residency import next_use
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import POLICIES, compile_plan

SMALL = [("alexnet", 96), ("vgg11", 32), ("vgg16", 32), ("resnet18", 32), ("resnet50", 32)]


@cache
def graph(model: str, batch: int, size: int):
    return build_graph(model, batch, size)


@st.composite
def setups(draw):
    model, size = draw(st.sampled_from(SMALL))
    g = graph(model, draw(st.integers(1, 4)), size)
    low, high = g.min_capacity[0], int(g.footprint * 1.1)
    return g, draw(st.integers(low, high))


HYP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYP
@given(setups(), AUTOVM_OPTIONS)
def test_uvm_and_autovm_plans_validate_and_stay_within_capacity(setup, options):
    g, capacity = setup
    for policy, opts in (("uvm", {}), ("autovm", options)):
        plan = compile_plan(g, capacity, policy, opts)
        validate_plan(g, plan)
        assert plan.peak_resident <= capacity


@HYP
@given(setups(), st.data())
def test_any_sensible_manual_plan_is_repaired_into_a_valid_one(setup, data):
    g, capacity = setup
    moves = data.draw(manual_moves(g))
    plan = compile_plan(g, capacity, "manual", moves=moves)
    validate_plan(g, plan)
    assert {(m.tensor, m.offload_after) for m in plan.moves} == {(m.tensor, m.offload_after) for m in moves}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups(), st.sampled_from(["uvm", "swap"]), st.data())
def test_a_manual_plan_is_the_same_whatever_the_order_its_moves_are_given_in(setup, mechanism, data):
    # a link's edits come back with the edited tensors' trips last: the link must reopen the plan shown
    g, capacity = setup
    moves = data.draw(manual_moves(g))
    shuffled = data.draw(st.permutations(moves))
    try:
        plan = compile_plan(g, capacity, "manual", moves=moves, mechanism=mechanism)
    except PlanError:
        return
    assert compile_plan(g, capacity, "manual", moves=shuffled, mechanism=mechanism) == plan


def test_a_link_s_edited_swap_plan_is_the_plan_the_page_showed():
    # the app's case: belady's moves through swap with one prefetch dragged, the edited trip kept in its
    # place (the page) or put last (the link); the pool's placement, and so the room, once told them apart
    g = graph("vgg19", 64, 224)
    capacity = g.min_capacity[0] + (g.footprint - g.min_capacity[0]) // 3
    moves = list(compile_plan(g, capacity, "belady", mechanism="swap").moves)
    i = next(i for i, mv in enumerate(moves) if mv.tensor == 105)
    edited = replace(moves[i], prefetch_after=90)
    in_place = [*moves[:i], edited, *moves[i + 1:]]
    last = [*moves[:i], *moves[i + 1:], edited]
    assert compile_plan(g, capacity, "manual", moves=last, mechanism="swap") == \
        compile_plan(g, capacity, "manual", moves=in_place, mechanism="swap")


@HYP
@given(setups())
def test_under_uvm_what_the_driver_evicts_comes_back_by_faults(setup):
    g, capacity = setup
    plan = compile_plan(g, capacity, "uvm")
    out = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
    back = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE)
    assert out == back
    assert all(m.origin is Origin.DRIVER for m in plan.memops)
    assert all((m.mode is Mode.SYNC) == (m.direction is Direction.TO_HOST) for m in plan.memops)


@HYP
@given(setups())
def test_autovm_offloads_feature_maps_after_their_last_forward_use_and_prefetches_before_backward(setup):
    g, capacity = setup
    plan = compile_plan(g, capacity, "autovm", {"prefetch_distance": 2})
    for mv in plan.moves:
        tensor = g.tensors[mv.tensor]
        assert tensor.kind is Kind.ACTIVATION
        forward = [k for k in g.uses[mv.tensor] if g.ops[k].phase is not Phase.BACKWARD]
        backward = [k for k in g.uses[mv.tensor] if g.ops[k].phase is Phase.BACKWARD]
        assert mv.offload_after == max(forward)
        assert mv.prefetch_after is not None and mv.offload_after < mv.prefetch_after < min(backward)


def test_autovm_at_half_the_footprint_replaces_most_demand_faults_with_prefetches():
    g = graph("vgg16", 32, 224)
    uvm = compile_plan(g, g.footprint // 2, "uvm")
    autovm = compile_plan(g, g.footprint // 2, "autovm", {"tensors": "all"})
    faulted = lambda plan: sum(m.nbytes for m in plan.memops if m.mode is Mode.FAULT)  # noqa: E731
    assert faulted(autovm) < 0.2 * faulted(uvm)


@pytest.mark.parametrize("policy", ["uvm", "autovm", "device"])
def test_nothing_pages_when_the_capacity_holds_the_footprint(policy):
    g = graph("resnet18", 2, 32)
    plan = compile_plan(g, g.footprint, policy)
    assert plan.memops == () and plan.peak_resident == g.footprint


def test_device_policy_refuses_a_capacity_below_the_footprint():
    g = graph("resnet18", 2, 32)
    with pytest.raises(PlanError, match="device policy needs the whole footprint"):
        compile_plan(g, g.footprint - 1, "device")


def test_a_capacity_below_the_largest_op_working_set_is_refused_naming_the_op():
    g = graph("vgg11", 2, 32)
    need, op = g.min_capacity
    with pytest.raises(PlanError, match=f"{g.ops[op].name} alone touches .*{need} bytes"):
        compile_plan(g, need - 1, "uvm")
    compile_plan(g, need, "uvm")


@pytest.mark.parametrize("policy,options,message", [
    ("lru", {}, "unknown policy 'lru'"),
    ("autovm", {"distance": 3}, "has no option 'distance'"),
    ("autovm", {"offload": "some"}, "offload has to be one of 'needed', 'all', not 'some'"),
    ("autovm", {"prefetch_distance": 0}, "prefetch_distance must be at least 1"),
    ("autovm", {"prefetch_distance": "x"}, "prefetch_distance must be int"),
    ("uvm", {"tensors": "all"}, "the uvm policy has no option 'tensors'"),
    ("autovm", {"prefetch_distance": 10**50}, "prefetch_distance must be at most 10000"),
    ("tuned", {"search_seconds": float("nan")}, "search_seconds must be a finite number"),
    ("tuned", {"search_seconds": "inf"}, "search_seconds must be a finite number"),
    ("tuned", {"search_seconds": 1e9}, "search_seconds must be at most 60"),
    ("tuned", {"search_steps": 10**9}, "search_steps must be at most 100000"),
])
def test_bad_policies_and_options_are_refused(policy, options, message):
    g = graph("resnet18", 2, 32)
    with pytest.raises(PlanError, match=message):
        compile_plan(g, g.footprint, policy, options)


def test_every_number_a_policy_takes_has_an_upper_bound():
    from vmexplorer.policies import POLICIES

    unbounded = [f"{name}.{option}" for name, spec in POLICIES.items() for option, opt in spec.options.items()
                 if opt.type in (int, float) and opt.maximum is None]
    assert not unbounded, f"options a visitor could set to any size: {unbounded}"


def _manual_error(g, doc):
    with pytest.raises(PlanError) as e:
        compile_plan(g, g.footprint // 2, "manual", moves=load_moves(g, doc)[0])
    return str(e.value)


def test_a_manual_prefetch_after_the_use_is_refused():
    g = graph("vgg11", 2, 32)
    t = g.tensor_id("features.1.out")
    first_backward = min(k for k in g.uses[t] if g.ops[k].phase is Phase.BACKWARD)
    message = _manual_error(g, {"moves": [{"tensor": "features.1.out", "offload_after": "features.2",
                                            "prefetch_after": first_backward}]})
    assert "the prefetch comes after the use" in message


def test_a_manual_offload_before_the_producer_is_refused():
    g = graph("vgg11", 2, 32)
    message = _manual_error(g, {"moves": [{"tensor": "features.3.out", "offload_after": "features.0",
                                            "prefetch_after": None}]})
    assert "before its producer features.3 runs" in message


@pytest.mark.parametrize("doc,message", [
    ({"moves": [{"tensor": "nope", "offload_after": 0}]}, "no tensor named 'nope'"),
    ({"moves": [{"tensor": "features.0.out", "offload_after": "conv9"}]}, "no op named 'conv9'"),
    ({"moves": [{"tensor": 10**6, "offload_after": 1}]}, "the graph has"),
    ({"moves": [{"offload_after": 1}]}, "needs 'tensor' and 'offload_after'"),
    ({"steps": []}, "a manual plan is"),
    ([1, 2], "needs 'tensor'"),
])
def test_malformed_manual_plans_are_refused(doc, message):
    g = graph("vgg11", 2, 32)
    with pytest.raises(PlanError, match=message):
        load_moves(g, doc)


def test_overlapping_manual_moves_of_one_tensor_are_refused():
    g = graph("vgg11", 2, 32)
    t = g.tensor_id("features.1.out")
    a = g.uses[t][-2]
    with pytest.raises(PlanError, match="overlapping moves"):
        compile_plan(g, g.footprint, "manual", moves=[Move(t, 2, a - 1), Move(t, 2, None)])


def test_only_persistent_tensors_may_wrap_into_the_next_iteration():
    g = graph("vgg11", 2, 32)
    act = g.tensor_id("features.1.out")
    with pytest.raises(PlanError, match="only persistent tensors can wrap"):
        compile_plan(g, g.footprint, "manual", moves=[Move(act, 20, 5)])
    w = g.tensor_id("features.0.weight.momentum")
    (use,) = g.uses[w]
    plan = compile_plan(g, g.footprint, "manual", moves=[Move(w, use, use - 3)])
    validate_plan(g, plan)
    assert w not in dict(plan.resident_at_start)


def test_a_manual_plan_that_overfills_the_device_gets_forced_evictions_marked_as_driver():
    g = graph("vgg11", 2, 32)
    plan = compile_plan(g, g.min_capacity[0], "manual", moves=[])
    assert any(m.origin is Origin.DRIVER and m.direction is Direction.TO_HOST for m in plan.memops)


def test_validation_catches_a_plan_with_a_missing_fault():
    g = graph("resnet18", 16, 64)
    plan = compile_plan(g, g.footprint // 2, "uvm")
    broken = replace(plan, memops=tuple(m for m in plan.memops if m.mode is not Mode.FAULT))
    with pytest.raises(PlanError, match="invalid plan: .* which is host there"):
        validate_plan(g, broken)


def test_validation_catches_a_plan_over_capacity():
    g = graph("resnet18", 16, 64)
    plan = compile_plan(g, g.footprint // 2, "uvm")
    with pytest.raises(PlanError, match="above the capacity"):
        validate_plan(g, replace(plan, config=replace(plan.config, capacity=plan.capacity // 2)))


def test_validation_refuses_a_plan_of_another_model_or_batch():
    plan = compile_plan(graph("vgg11", 2, 32), 10**10, "uvm")
    with pytest.raises(PlanError, match="the plan is for vgg11 batch 2 at 32x32, not vgg11 batch 3"):
        validate_plan(graph("vgg11", 3, 32), plan)


def test_prefetch_distance_moves_prefetches_earlier():
    g = graph("vgg16", 16, 224)
    near = compile_plan(g, g.footprint // 2, "autovm", {"prefetch_distance": 1, "offload": "all"})
    far = compile_plan(g, g.footprint // 2, "autovm", {"prefetch_distance": 6, "offload": "all"})
    lead = lambda plan: sum(next_use(g, m.tensor, m.prefetch_after) - m.prefetch_after  # noqa: E731
                            for m in plan.moves)
    assert lead(far) > lead(near)


def test_every_policy_is_described():
    assert set(POLICIES) == {"device", "uvm", "autovm", "belady", "vdnn", "tuned", "checkpoint", "joint", "exact",
                             "manual"}
    assert all(spec.summary for spec in POLICIES.values())


@pytest.mark.parametrize("options", [{"tensors": "all", "offload": "all"}, {}])
def test_a_plans_moves_are_exactly_the_round_trips_it_was_compiled_from(options):
    g = graph("resnet18", 64, 224)
    plan = compile_plan(g, g.footprint // 2, "autovm", options)
    again = compile_plan(g, g.footprint // 2, "manual", moves=plan.moves)
    assert again.memops == plan.memops
    if options:
        assert any(mv.prefetch_after is not None and mv.prefetch_after < mv.offload_after for mv in plan.moves)
    assert all(mv.prefetch_after is not None for mv in plan.moves)


def test_a_too_early_prefetch_at_the_minimum_capacity_is_thrashed_not_refused():
    g = graph("alexnet", 64, 128)
    capacity = g.min_capacity[0]
    autovm = compile_plan(g, capacity, "autovm", {"tensors": "all"})
    earlier = [Move(mv.tensor, mv.offload_after, max(mv.offload_after, mv.prefetch_after - 2))
               if mv.prefetch_after is not None and mv.prefetch_after > mv.offload_after else mv
               for mv in autovm.moves]
    plan = compile_plan(g, capacity, "manual", moves=earlier)
    validate_plan(g, plan)
    assert plan.peak_resident <= capacity
