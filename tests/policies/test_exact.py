"""`exact`: keep, recompute or move each activation, chosen by an integer program solved with HiGHS. Its plan
holds to the validator; where recomputing alone fits, it recomputes the cheapest set of units that fits, as an
enumeration of every set against the recomputed graph's own liveness finds; it never costs more than
checkpoint_sequential's choice where that fits; one configuration gives one plan; without scipy it refuses,
saying what to install; its options are bounded; without a cost model it costs ops as the simulator's
defaults do."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections import OrderedDict
from functools import cache

import numpy as np
import pytest

from vmexplorer.config import Mechanism
from vmexplorer.graph import Graph, Phase
from vmexplorer.graph.models import _begin
from vmexplorer.graph.ops.adaptive_avg_pool2d import adaptive_avg_pool2d
from vmexplorer.graph.ops.conv2d import conv2d
from vmexplorer.graph.ops.linear import linear
from vmexplorer.graph.ops.max_pool2d import max_pool2d
from vmexplorer.graph.ops.relu import relu
from vmexplorer.graph.recompute import recomputed
from vmexplorer.plan import PlanError
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import POLICIES, Simulation, compile_plan, exact
from vmexplorer.policies.checkpoint import checkpoint_sequential
from vmexplorer.policies.exact_model import units_of
from vmexplorer.policies.joint import _steps
from vmexplorer.policies.spec import MAX_SEARCH_SECONDS
from vmexplorer.simulator import H100_DEFAULT, simulate
from vmexplorer.simulator.bound import lower_bound

pytest.importorskip("scipy")

# copies so slow that sending anything away costs more than any re-run: the cheapest plan is the cheapest
# set of recomputations that fits, where one does
NO_COPIES = dataclasses.replace(H100_DEFAULT, prefetch_bytes_per_ns=1e-4, evict_bytes_per_ns=1e-4)
OPTIONS = {"choose": "recompute", "time_limit_seconds": 20.0}


@cache
def toy() -> Graph:
    """Five convolutions over 64x64 feature maps and a small classifier: activations dominate, as in a CNN
    at a large batch, and seven units make every set of them few enough to enumerate."""
    b, x, labels = _begin("toy", 32, 64)
    for i, channels in enumerate((16, 16, 32, 32, 32)):
        x = relu(b, conv2d(b, x, f"conv{i}", channels, 3, 1, 1), f"relu{i}")
        if i == 2:
            x = max_pool2d(b, x, "pool", 2, 2)
    return b.build(linear(b, adaptive_avg_pool2d(b, x, "avgpool", 1), "fc", 10), labels)


def _rerun_ns(g: Graph, steps: tuple) -> float:
    """The re-runs' compute, read off the recomputed graph's ops."""
    h = recomputed(g, steps)
    return sum(NO_COPIES.compute_ns(op.name, op.flops, op.bytes_touched, h.workspace_bytes[k])
               for k, op in enumerate(h.ops) if op.phase is Phase.RECOMPUTE)


def _fits(g: Graph, steps: tuple, capacity: int) -> bool:
    return max(recomputed(g, steps).live_bytes) <= capacity


@pytest.mark.parametrize("mechanism", ["uvm", "swap"])
def test_its_plan_holds_to_the_validator_under_both_mechanisms(mechanism: str) -> None:
    g = toy()
    said: list[str] = []
    plan = compile_plan(g, int(g.footprint * 0.85), "exact", {"time_limit_seconds": 10.0},
                        simulation=Simulation(simulate, lower_bound, H100_DEFAULT, said.append), mechanism=mechanism)
    validate_plan(g, plan)
    assert any(s.startswith("exact (recompute): ") for s in said)


@pytest.mark.parametrize("share", [0.85, 0.75, 0.7])
def test_where_recomputing_alone_fits_it_recomputes_the_cheapest_set_that_fits_as_enumeration_finds(
        share: float) -> None:
    capacity = int(toy().footprint * share)
    g = toy().fitted(capacity)
    units = units_of(g, lambda k: 0.0)
    best = min(_rerun_ns(g, steps) for r in range(len(units) + 1) for chosen in itertools.combinations(units, r)
               if _fits(g, steps := _steps(g, frozenset(t for u in chosen for t in u.tensors)), capacity))
    found = exact.solve(g, capacity, OPTIONS, NO_COPIES, Mechanism.UVM)
    assert found.optimal and found.over_bytes == 0 and _fits(g, found.steps, capacity)
    assert _rerun_ns(g, found.steps) == pytest.approx(best, rel=exact.MIP_REL_GAP)


@pytest.mark.parametrize("segments", [2, 3, 4])
def test_it_never_recomputes_at_more_cost_than_checkpoint_sequential_where_that_fits(segments: int) -> None:
    g0 = toy()
    steps = tuple(checkpoint_sequential(g0, segments))
    capacity = max(recomputed(g0.fitted(g0.footprint), steps).live_bytes)  # where checkpoint's choice just fits
    g = g0.fitted(capacity)
    steps = tuple(checkpoint_sequential(g, segments))
    if not _fits(g, steps, capacity):  # its workspaces shrank with the room: checkpoint's then fits less
        pytest.skip("checkpoint_sequential does not fit the room it was measured at")
    found = exact.solve(g, capacity, OPTIONS, NO_COPIES, Mechanism.UVM)
    assert _fits(g, found.steps, capacity)
    assert _rerun_ns(g, found.steps) <= _rerun_ns(g, steps) * (1 + exact.MIP_REL_GAP)


def test_one_configuration_gives_one_plan_and_its_report_says_how_sure_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    g = toy()
    capacity = int(g.footprint * 0.7)
    plans, said = [], []
    for _ in range(2):
        monkeypatch.setattr(exact, "_SOLVED", OrderedDict())  # solved again, not remembered
        plans.append(compile_plan(g, capacity, "exact", simulation=Simulation(simulate, lower_bound, H100_DEFAULT,
                                                                               said.append)))
    assert plans[0] == plans[1] and plans[0].recomputes
    assert said[0].rsplit(", solved in", 1)[0] == said[1].rsplit(", solved in", 1)[0]  # but for the seconds
    assert "optimal" in said[0]


def test_without_scipy_it_refuses_saying_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)  # `from scipy.optimize import ...` raises ImportError
    monkeypatch.setattr(exact, "_SOLVED", OrderedDict())
    g = toy()
    with pytest.raises(PlanError, match=r"pip install 'vmexplorer\[exact\]'"):
        compile_plan(g, int(g.footprint * 0.7), "exact", simulation=Simulation(simulate, lower_bound, H100_DEFAULT))


@pytest.mark.parametrize("options,refused", [
    ({"time_limit_seconds": MAX_SEARCH_SECONDS + 1}, "at most"),
    ({"time_limit_seconds": 0.5}, "at least"),
    ({"choose": "move"}, "has to be one of"),
])
def test_its_options_are_bounded(options: dict, refused: str) -> None:
    g = toy()
    with pytest.raises(PlanError, match=refused):
        compile_plan(g, int(g.footprint * 0.7), "exact", options)
    assert POLICIES["exact"].options["time_limit_seconds"].default <= 60


def test_without_a_cost_model_it_costs_ops_as_the_simulator_s_uncalibrated_defaults_do() -> None:
    g = toy()
    for op in g.ops:
        assert exact.PROXY.compute_ns(op.name, op.flops, op.bytes_touched) == pytest.approx(
            H100_DEFAULT.compute_ns(op.name, op.flops, op.bytes_touched))
    assert exact.PROXY.uvm_in_out == (H100_DEFAULT.prefetch_bytes_per_ns, H100_DEFAULT.evict_bytes_per_ns)
    assert exact.PROXY.swap_in_out == (H100_DEFAULT.swap_to_device_bytes_per_ns, H100_DEFAULT.swap_to_host_bytes_per_ns)


def test_copies_that_hide_behind_compute_are_chosen_when_it_may_move_and_cost_less_than_anything_else() -> None:
    capacity = int(toy().footprint * 0.7)
    g = toy().fitted(capacity)
    fast = dataclasses.replace(H100_DEFAULT, swap_to_device_bytes_per_ns=1e4, swap_to_host_bytes_per_ns=1e4)
    moving = exact.solve(g, capacity, {**OPTIONS, "choose": "recompute+move"}, fast, Mechanism.SWAP)
    recomputing = exact.solve(g, capacity, OPTIONS, fast, Mechanism.SWAP)
    assert moving.moved and moving.over_bytes == 0 and moving.objective_ns < recomputing.objective_ns


def test_given_a_simulator_its_plan_is_never_slower_than_checkpoint_sequential_s_or_none() -> None:
    g = toy()
    capacity = int(g.footprint * 0.7)
    simulation = Simulation(simulate, lower_bound, H100_DEFAULT)
    timed = lambda plan: float(np.median(simulate(g, plan, H100_DEFAULT).iteration_ns()))  # noqa: E731
    plan = compile_plan(g, capacity, "exact", simulation=simulation)
    starts = [compile_plan(g, capacity, "checkpoint", {"segments": k, "then": "belady"}) for k in (1, 2, 4, 8)]
    assert timed(plan) <= min(timed(s) for s in starts) * (1 + 1e-9)


def test_what_the_solver_prints_never_reaches_standard_output(monkeypatch: pytest.MonkeyPatch,
                                                              capfd: pytest.CaptureFixture[str]) -> None:
    # HiGHS writes a debug line of its own to the process's standard output now and then, whatever `disp`
    # says: `vmexplorer plan --json` writes its JSON there, so while it solves that goes to standard error
    import os

    solve = exact._run

    def chatty(*args: object) -> object:
        os.write(1, b"HighsMipSolverData::transformNewIntegerFeasibleSolution\n")
        return solve(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(exact, "_run", chatty)
    exact._SOLVED.clear()
    g = toy()
    exact.solve(g, int(g.footprint * 0.85), OPTIONS, NO_COPIES, Mechanism.UVM)
    print("after")
    out, err = capfd.readouterr()
    assert "HighsMipSolverData" not in out and "HighsMipSolverData" in err and out.endswith("after\n")
