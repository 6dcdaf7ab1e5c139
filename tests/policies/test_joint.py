"""`joint`: which activations to recompute, searched in the simulator from the best of none and
checkpoint_sequential, belady's trips for the rest. It is never slower than where it started, one
configuration gives one plan, each re-run reads the copies made with it, and without a simulator it is
refused (what it would recompute without a search is checkpoint_sequential in 4 segments)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from vmexplorer.config import Mechanism
from vmexplorer.graph import Graph, Phase, build_graph
from vmexplorer.plan import PlanError
from vmexplorer.plan.bound import recomputable
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import POLICIES, Simulation, compile_plan
from vmexplorer.policies.checkpoint import checkpoint_sequential
from vmexplorer.policies.joint import _steps, _units, search
from vmexplorer.simulator import H100_DEFAULT, simulate
from vmexplorer.simulator.bound import lower_bound

SIMULATION = Simulation(simulate, lower_bound, H100_DEFAULT)


@cache
def graph(model: str = "resnet18", batch: int = 32, size: int = 224) -> Graph:
    return build_graph(model, batch, size)


def _time(g: Graph, plan: object) -> float:
    return float(np.median(simulate(g, plan, H100_DEFAULT).iteration_ns()))  # type: ignore[arg-type]


@pytest.mark.parametrize("model,batch,size", [("resnet18", 32, 224), ("alexnet", 256, 224)])
def test_the_searched_plan_is_never_slower_than_any_start_it_had(model: str, batch: int, size: int) -> None:
    g = graph(model, batch, size)
    capacity = int(g.footprint * 0.5)
    plan = compile_plan(g, capacity, "joint", simulation=SIMULATION)
    validate_plan(g, plan)
    starts = [compile_plan(g, capacity, "checkpoint", {"segments": k, "then": "belady"}) for k in (1, 2, 4, 8)]
    assert _time(g, plan) <= min(_time(g, s) for s in starts) * (1 + 1e-9)


def test_one_configuration_gives_one_plan_and_says_how_the_search_went() -> None:
    g = graph()
    said: list[str] = []
    simulation = Simulation(simulate, lower_bound, H100_DEFAULT, said.append)
    a = compile_plan(g, int(g.footprint * 0.5), "joint", simulation=simulation)
    b = compile_plan(g, int(g.footprint * 0.5), "joint", simulation=SIMULATION)
    assert a == b and a.recomputes
    assert any(s.startswith("joint: from ") and "changes kept" in s for s in said)


def test_without_a_simulator_it_is_refused() -> None:
    g = graph()
    with pytest.raises(PlanError, match="the joint policy searches its plan in the simulator"):
        compile_plan(g, int(g.footprint * 0.5), "joint")


def test_what_it_recomputes_without_a_search_is_checkpoint_sequential_in_four_segments() -> None:
    g = graph()
    spec = POLICIES["joint"]
    assert spec.plan_recomputes is not None
    defaults = {name: opt.default for name, opt in spec.options.items()}
    steps = spec.plan_recomputes(g.fitted(int(g.footprint * 0.5)), int(g.footprint * 0.5), defaults, ())
    assert tuple(steps) == tuple(checkpoint_sequential(g, 4))


def test_a_unit_holds_the_chain_no_backward_op_reads_and_a_re_run_reads_the_copies_made_with_it() -> None:
    g = graph("vgg11", 4, 64)
    free = set(recomputable(g))
    for unit in _units(g, SIMULATION):
        backward = [t for t in unit if any(g.ops[k].phase is Phase.BACKWARD for k in g.uses[t])]
        assert len(backward) == 1 and unit <= free
    chosen = {t for unit in _units(g, SIMULATION) for t in unit}
    before = {s.tensor: s.before for s in _steps(g, chosen)}
    for t, k in before.items():  # what a chosen re-run reads, if chosen, is made no later than it
        for r in g.ops[g.tensors[t].producer].reads:
            assert r not in before or before[r] <= k


def test_a_search_stopped_by_its_time_cap_keeps_its_start_and_says_so() -> None:
    g = graph()
    capacity = int(g.footprint * 0.5)
    result = search(g.fitted(capacity), capacity, SIMULATION, Mechanism.UVM, seconds=0.0)
    assert result.stopped_by_time and result.tried == 0 and result.end_ns == result.start_ns
    assert "stopped by its time cap" in result.note()


def test_the_search_stops_after_its_steps_whatever_the_clock_so_one_configuration_gives_one_plan() -> None:
    g = graph()
    capacity = int(g.footprint * 0.5)
    fitted = g.fitted(capacity)
    first = search(fitted, capacity, SIMULATION, Mechanism.UVM, steps=5)
    again = search(fitted, capacity, SIMULATION, Mechanism.UVM, steps=5)
    assert first.tried == 5 and not first.stopped_by_time and first.steps == again.steps
    assert "of 5 changes kept" in first.note() and "time cap" not in first.note()
