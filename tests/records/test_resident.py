"""Resident bytes over time, split by tensor kind."""

from __future__ import annotations

import numpy as np
import pytest

from vmexplorer.graph import build_graph
from vmexplorer.policies import compile_plan
from vmexplorer.records.spans import resident_by_kind, resident_curve
from vmexplorer.simulator import H100_DEFAULT, simulate


@pytest.mark.parametrize("model, policy", [("vgg11", "uvm"), ("vgg11", "autovm"), ("resnet18", "autovm")])
def test_the_kinds_add_up_to_the_resident_curve_at_every_instant(model: str, policy: str) -> None:
    g = build_graph(model, 8, 64)
    plan = compile_plan(g, (g.min_capacity[0] + g.footprint) // 2, policy)
    tl = simulate(g, plan, H100_DEFAULT)
    spans = (tl.op_start_ns.astype(float), tl.op_end_ns.astype(float), tl.memop_start_ns.astype(float),
             tl.memop_end_ns.astype(float))
    t, total = resident_curve(g, plan, *spans)
    t_kind, levels = resident_by_kind(g, plan, *spans)
    assert np.array_equal(t, t_kind)
    assert np.array_equal(sum(levels.values()), total)
    assert levels["weight"].min() > 0 and levels["activation"].max() > 0
    assert min(v.min() for v in levels.values()) >= 0
