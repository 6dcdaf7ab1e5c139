"""The joint bound's trade: what must be away at the most crowded ops, and what making each again is charged."""

from __future__ import annotations

import pytest

from vmexplorer.graph import Phase, build_graph
from vmexplorer.plan.bound import recomputable
from vmexplorer.plan.crowded import crowded_ops


@pytest.mark.parametrize("model,batch,size", [("vgg11", 8, 64), ("resnet18", 4, 64), ("alexnet", 8, 96)])
def test_every_op_is_charged_at_most_its_time_once_over_all_it_makes_again(model: str, batch: int, size: int) -> None:
    g = build_graph(model, batch, size)
    crowded = crowded_ops(g, g.footprint // 2)
    assert crowded
    for c in crowded:
        charged: dict[int, float] = {}
        for ops in c.remade_by:
            assert ops, "a re-run runs its maker at least"
            for o, share in ops:
                charged[o] = charged.get(o, 0.0) + share
        assert all(total <= 1.0 + 1e-12 for total in charged.values())


def test_crowded_ops_come_after_the_forward_and_what_they_may_make_again_lives_across_them() -> None:
    g = build_graph("vgg11", 8, 64)
    capacity = g.footprint // 2
    free = set(recomputable(g))
    for c in crowded_ops(g, capacity):
        assert g.ops[c.op].phase is not Phase.FORWARD and c.over_bytes > 0
        assert len(c.remade_bytes) == len(c.remade_by)
        # the ops charged are forward ops: a re-run is its forward op's kernels again
        assert all(g.ops[o].phase is Phase.FORWARD for ops in c.remade_by for o, _ in ops)
        assert sum(c.remade_bytes) <= sum(g.tensors[t].nbytes for t in free)
    assert crowded_ops(g, g.footprint) == []  # where everything fits nothing must be away
