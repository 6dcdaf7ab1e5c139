"""bench/optimizer_in_backward.py: the update moved into the backward is the same step in another order, so
what it reports (and what its GPU probe runs) is the same training, not a cheaper one."""

from __future__ import annotations

import pytest
from scripts import bench_script
from strategies import graph, swap_plan

from vmexplorer.graph.graph import Phase
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import compile_plan
from vmexplorer.simulator import simulate

oib = bench_script("optimizer_in_backward")
MODELS = (("alexnet", 4, 64), ("vgg11", 2, 32), ("resnet18", 2, 32))


@pytest.mark.parametrize(("model", "batch", "size"), MODELS)
def test_the_reordered_graph_holds_the_same_ops_and_tensors_in_a_valid_order(model: str, batch: int,
                                                                             size: int) -> None:
    g = graph(model, batch, size)
    r = oib.in_backward(g)
    assert sorted(r.ops, key=lambda op: op.name) == sorted(g.ops, key=lambda op: op.name)
    assert [t.name for t in r.tensors] == [t.name for t in g.tensors]
    for k, op in enumerate(r.ops):
        for t in op.reads:
            assert r.tensors[t].producer < k, f"{op.name} reads {r.tensors[t].name} before it is made"
        for t in op.writes:
            assert r.tensors[t].persistent or r.tensors[t].producer <= k
    for t, tensor in enumerate(r.tensors):
        assert tensor.consumers == tuple(k for k, op in enumerate(r.ops) if t in op.reads)


@pytest.mark.parametrize(("model", "batch", "size"), MODELS)
def test_each_update_follows_the_backward_that_completes_it_and_nothing_after_touches_its_tensors(
        model: str, batch: int, size: int) -> None:
    g = graph(model, batch, size)
    r = oib.in_backward(g)
    update = [k for k, op in enumerate(r.ops) if op.phase is Phase.UPDATE]
    assert len(update) == sum(op.phase is Phase.UPDATE for op in g.ops) > 0
    last_backward = max(k for k, op in enumerate(r.ops) if op.phase is Phase.BACKWARD)
    assert min(update) < last_backward  # not all left after the backward, as in the graph's own order
    for u in update:
        touched = set(r.ops[u].touches)
        others = [k for k, op in enumerate(r.ops) if op.phase is not Phase.UPDATE and touched & set(op.touches)]
        assert max(others) < u, f"{r.ops[u].name} runs before an op touching its tensors"
        between = r.ops[max(others) + 1:u]
        assert all(op.phase is Phase.UPDATE for op in between), f"{r.ops[u].name} is not right after its backward"


@pytest.mark.parametrize(("model", "batch", "size"), MODELS)
def test_the_reordered_graph_computes_as_much_and_plans_through_swap(model: str, batch: int, size: int) -> None:
    g = graph(model, batch, size)
    r = oib.in_backward(g)
    device = [simulate(x, compile_plan(x, x.footprint, "device")).op_end_ns.max() for x in (g, r)]
    assert device[0] == device[1]
    capacity = max(g.footprint // 2, *r.min_capacity[:1])
    plan = swap_plan(r, capacity, "belady")  # where no pool holds a plan at half the footprint, a larger one
    validate_plan(r, plan)
