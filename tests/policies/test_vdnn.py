"""`vdnn`: vDNN-conv. Every convolution's input feature map leaves after its last forward use and comes
back `prefetch_distance` ops before its first backward use, whatever the capacity; the driver evicts
what still does not fit.

The oracle for "the conv inputs" is the convolution's own declaration (conv2d reads (x, W[, b])),
not the policy's filter on tensor kinds.
"""

from __future__ import annotations

import json
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmexplorer.cli import main
from vmexplorer.graph import MODELS, Graph, Phase, build_graph
from vmexplorer.plan import Direction, Origin, PlanError
from vmexplorer.plan.moves import check_moves
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import compile_plan
from vmexplorer.policies.vdnn import vdnn_moves

SIZES = {"alexnet": 96, "vgg11": 32, "vgg16": 32, "vgg19": 32, "resnet18": 32, "resnet50": 32, "resnet152": 32}
HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def graph(model: str, batch: int, size: int) -> Graph:
    return build_graph(model, batch, size)


def conv_inputs(g: Graph) -> set[int]:
    return {op.reads[0] for op in g.ops if op.kind == "conv2d"}


@st.composite
def setups(draw: st.DrawFn) -> tuple[str, int, int]:
    """(model, batch, capacity): any model of the registry at a small batch, from its minimum capacity
    to its footprint."""
    model, batch = draw(st.sampled_from(sorted(MODELS))), draw(st.integers(1, 4))
    g = graph(model, batch, SIZES[model])
    return model, batch, draw(st.integers(g.min_capacity[0], g.footprint))


def test_every_model_in_the_registry_is_covered() -> None:
    assert set(SIZES) == set(MODELS)


@HYP
@given(setups(), st.integers(1, 8))
def test_vdnn_plans_validate_and_stay_within_capacity(setup: tuple[str, int, int], distance: int) -> None:
    model, batch, capacity = setup
    g = graph(model, batch, SIZES[model])
    plan = compile_plan(g, capacity, "vdnn", {"prefetch_distance": distance})
    validate_plan(g, plan)
    check_moves(g, plan.moves)
    assert plan.peak_resident <= capacity


@pytest.mark.parametrize("model", sorted(MODELS))
def test_vdnn_offloads_exactly_the_input_feature_maps_of_the_convolutions(model: str) -> None:
    g = graph(model, 2, SIZES[model])
    for capacity in (g.min_capacity[0], g.footprint):
        plan = compile_plan(g, capacity, "vdnn")
        assert {mv.tensor for mv in plan.moves} == conv_inputs(g)
        assert len(plan.moves) == len(conv_inputs(g))


@HYP
@given(st.sampled_from(sorted(MODELS)), st.integers(1, 8))
def test_each_leaves_after_its_last_forward_use_and_returns_distance_ops_before_its_first_backward_use(
        model: str, distance: int) -> None:
    g = graph(model, 2, SIZES[model])
    for mv in vdnn_moves(g, distance):
        forward = [k for k in g.uses[mv.tensor] if g.ops[k].phase is not Phase.BACKWARD]
        backward = [k for k in g.uses[mv.tensor] if g.ops[k].phase is Phase.BACKWARD]
        assert mv.offload_after == max(forward)
        assert mv.prefetch_after == max(min(backward) - distance, mv.offload_after + 1)


def test_by_default_a_prefetch_overlaps_the_one_op_before_its_use() -> None:
    """vDNN prefetches one layer ahead: issued after op use-2, so the transfer runs beside op use-1."""
    g = graph("vgg16", 2, 32)
    plan = compile_plan(g, g.footprint, "vdnn")
    assert plan.options == {"prefetch_distance": 2}
    for mv in plan.moves:
        first_backward = min(k for k in g.uses[mv.tensor] if g.ops[k].phase is Phase.BACKWARD)
        assert mv.prefetch_after == first_backward - 2


def test_vdnn_ignores_the_capacity_and_the_driver_evicts_what_still_does_not_fit() -> None:
    g = graph("vgg19", 8, 224)
    roomy, tight = compile_plan(g, g.footprint, "vdnn"), compile_plan(g, g.min_capacity[0], "vdnn")
    assert roomy.moves == tight.moves
    assert not [m for m in roomy.memops if m.origin is Origin.DRIVER]
    assert [m for m in tight.memops if m.origin is Origin.DRIVER and m.direction is Direction.TO_HOST]


def test_vdnn_is_deterministic() -> None:
    a, b = build_graph("resnet50", 4, 64), build_graph("resnet50", 4, 64)
    first = compile_plan(a, a.footprint // 2, "vdnn")
    assert first.memops == compile_plan(b, b.footprint // 2, "vdnn").memops
    assert vdnn_moves(a, 3) == vdnn_moves(b, 3) == sorted(vdnn_moves(a, 3), key=lambda mv: (mv.offload_after,
                                                                                               mv.tensor))


def test_a_prefetch_distance_below_one_is_refused() -> None:
    g = graph("vgg11", 2, 32)
    with pytest.raises(PlanError, match="prefetch_distance must be at least 1"):
        compile_plan(g, g.footprint, "vdnn", {"prefetch_distance": 0})


def test_the_command_line_plans_vdnn_with_its_prefetch_distance(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "resnet18", "--batch", "8", "--image-size", "64", "--capacity", "50%",
                 "--policy", "vdnn", "--prefetch-distance", "3", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["config"]["policy"], doc["config"]["options"]) == ("vdnn", {"prefetch_distance": 3})
    g = build_graph("resnet18", 8, 64)
    assert {mv["tensor"] for mv in doc["plan"]["moves"]} == {g.tensors[t].name for t in conv_inputs(g)}
