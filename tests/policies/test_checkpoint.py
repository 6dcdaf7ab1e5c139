"""`checkpoint`: PyTorch's checkpoint_sequential over the graph's modules. Each segment but the last keeps
its input, and its forward runs again, in one go, as the backward pass reaches it; less is kept at the
peak the more segments there are, as in PyTorch; moves, where asked, are planned on the recomputed graph."""

from __future__ import annotations

from functools import cache

import pytest

from vmexplorer.graph import Graph, Kind, Phase, build_graph
from vmexplorer.plan import Origin, PlanError
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import compile_plan
from vmexplorer.policies.checkpoint import checkpoint_sequential, modules


@cache
def graph(model: str, batch: int = 4, size: int = 64) -> Graph:
    return build_graph(model, batch, size)


def test_a_chain_s_modules_are_its_layers_and_a_residual_network_s_are_its_blocks() -> None:
    vgg = graph("vgg11")
    assert [{vgg.ops[k].layer for k in m} for m in modules(vgg)] == [
        {op.layer} for op in vgg.ops if op.phase is Phase.FORWARD]
    resnet = graph("resnet18")
    module_of = {k: i for i, m in enumerate(modules(resnet)) for k in m}
    adds = [k for k, op in enumerate(resnet.ops) if op.kind == "add" and op.phase is Phase.FORWARD]
    assert len(adds) == 8  # ResNet-18's basic blocks
    for k in adds:  # a block's first convolution, its shortcut and its sum are one module
        block = resnet.ops[k].layer.rsplit(".", 1)[0]
        first = min(j for j, op in enumerate(resnet.ops) if op.layer.startswith(block + "."))
        assert module_of[first] == module_of[k]


@pytest.mark.parametrize("model", ["vgg11", "resnet18", "alexnet"])
def test_one_segment_recomputes_nothing_and_the_last_segment_is_never_recomputed(model: str) -> None:
    g = graph(model)
    assert checkpoint_sequential(g, 1) == []
    assert checkpoint_sequential(g, len(modules(g)) + 1) == []  # more segments than modules: as PyTorch's
    mods = modules(g)
    for segments in (2, 3, 5):
        size = len(mods) // segments
        last = {k for m in mods[size * (segments - 1):] for k in m}
        steps = checkpoint_sequential(g, segments)
        assert steps and all(g.tensors[s.tensor].producer not in last for s in steps)


def test_a_segment_runs_again_in_one_go_before_the_first_backward_op_that_reads_what_it_made() -> None:
    g = graph("resnet18")
    steps = checkpoint_sequential(g, 4)
    by_before: dict[int, list[int]] = {}
    for s in steps:
        by_before.setdefault(s.before, []).append(s.tensor)
    assert len(by_before) == 3  # one point per recomputed segment
    for before, tensors in by_before.items():
        backward = [k for t in tensors for k in g.uses[t] if g.ops[k].phase is Phase.BACKWARD]
        assert before == min(backward)
        # what the segment's backward reads is made again; its input is not (the last forward op before it)
        assert all(g.tensors[t].kind is Kind.ACTIVATION for t in tensors)


def test_more_segments_keep_less_at_the_peak_as_pytorch_s_do() -> None:
    g = graph("resnet50", 64, 224)  # PyTorch's: 5.54, 4.41, 3.22, 2.26 GiB (issue 34's table)
    peaks = [compile_plan(g, g.footprint, "checkpoint", {"segments": k}).peak_resident for k in (1, 2, 4, 8)]
    assert peaks[0] == g.footprint
    assert peaks == sorted(peaks, reverse=True) and peaks[-1] < 0.6 * peaks[0]


@pytest.mark.parametrize("mechanism", ["uvm", "swap"])
def test_a_checkpointed_plan_runs_on_its_recomputed_graph_and_is_valid(mechanism: str) -> None:
    g = graph("resnet18", 8)
    capacity = int(g.footprint * 0.6)
    plan = compile_plan(g, capacity, "checkpoint", {"segments": 4}, mechanism=mechanism)
    ran = plan.graph_of(g)
    assert plan.recomputes and len(ran.ops) == len(g.ops) + sum(op.phase is Phase.RECOMPUTE for op in ran.ops)
    validate_plan(g, plan)
    assert not any(m.origin is Origin.PLAN for m in plan.memops)  # it plans no moves of its own


def test_then_belady_plans_its_moves_on_the_recomputed_graph() -> None:
    g = graph("resnet18", 32, 224)
    capacity = int(g.footprint * 0.5)
    alone = compile_plan(g, capacity, "checkpoint", {"segments": 2})
    joint = compile_plan(g, capacity, "checkpoint", {"segments": 2, "then": "belady"})
    assert joint.recomputes == alone.recomputes and joint.moves
    validate_plan(g, joint)
    ran = joint.graph_of(g)
    assert all(0 <= m.tensor < len(ran.tensors) for m in joint.memops)


def test_an_unknown_follow_up_policy_is_refused_with_its_choices() -> None:
    g = graph("vgg11")
    with pytest.raises(PlanError, match="then has to be one of 'none', 'belady'"):
        compile_plan(g, g.footprint, "checkpoint", {"then": "tuned"})
