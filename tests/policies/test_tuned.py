"""`tuned`: a hill climb in the simulator from the best of the other policies' plans.

Every test simulates with the same functions the CLI does, passed in as a `Simulation`, and keeps the
searches short (a few dozen changes) so that the file runs in seconds; the time the defaults take
on VGG-19 b64 is measured in the report, not here.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import Plan, PlanError
from vmexplorer.plan.moves import check_moves
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import POLICIES, Simulation, compile_plan, non_default_options
from vmexplorer.policies.spec import MAX_SEARCH_SECONDS, MAX_SEARCH_STEPS
from vmexplorer.policies.tuned import STARTS
from vmexplorer.simulator import H100_DEFAULT, CostModel, simulate
from vmexplorer.simulator.bound import lower_bound

# copies each way at once (pinned copies): the simulator and the bound both let the directions overlap
BOTH_WAYS = replace(H100_DEFAULT, serialises_directions=False)
SETUPS = [("alexnet", 64, 224, 0.5), ("vgg11", 8, 64, 0.6), ("resnet18", 8, 64, 0.5), ("vgg19", 16, 64, 0.75)]
SHORT = {"search_steps": 40}


@cache
def graph(model: str, batch: int, size: int) -> Graph:
    return build_graph(model, batch, size)


def iteration_ns(g: Graph, plan: Plan, cost: CostModel) -> float:
    return float(np.median(simulate(g, plan, cost).iteration_ns()))


def simulation(cost: CostModel = H100_DEFAULT, notes: list[str] | None = None) -> Simulation:
    return Simulation(simulate, lower_bound, cost, None if notes is None else notes.append)


def setup(model: str, batch: int, size: int, share: float) -> tuple[Graph, int]:
    g = graph(model, batch, size)
    return g, max(int(g.footprint * share), g.min_capacity[0])


@pytest.mark.parametrize("model,batch,size,share", SETUPS)
def test_tuned_plans_validate_and_keep_the_rules_of_moves(model: str, batch: int, size: int, share: float) -> None:
    g, capacity = setup(model, batch, size, share)
    plan = compile_plan(g, capacity, "tuned", SHORT, simulation=simulation())
    validate_plan(g, plan)
    check_moves(g, plan.moves)
    assert plan.policy == "tuned" and plan.options == {"search_seed": 0, "search_steps": 40,
                                                         "search_seconds": MAX_SEARCH_SECONDS}


@pytest.mark.parametrize("cost", [H100_DEFAULT, BOTH_WAYS], ids=["default", "copies both ways"])
@pytest.mark.parametrize("model,batch,size,share", SETUPS)
def test_tuned_is_never_slower_than_the_best_plan_it_starts_from(model: str, batch: int, size: int, share: float,
                                                                  cost: CostModel) -> None:
    g, capacity = setup(model, batch, size, share)
    starts = [iteration_ns(g, compile_plan(g, capacity, spec.name), cost) for spec in STARTS]
    tuned = iteration_ns(g, compile_plan(g, capacity, "tuned", SHORT, simulation=simulation(cost)), cost)
    assert tuned <= min(starts)


def test_the_search_finds_a_faster_plan_than_every_other_policy_on_vgg19() -> None:
    g, capacity = setup("vgg19", 16, 64, 0.5)
    others = min(iteration_ns(g, compile_plan(g, capacity, spec.name), H100_DEFAULT) for spec in STARTS)
    tuned = compile_plan(g, capacity, "tuned", {"search_steps": 150}, simulation=simulation())
    assert iteration_ns(g, tuned, H100_DEFAULT) < others


def test_one_seed_gives_one_plan() -> None:
    g, capacity = setup("vgg11", 8, 64, 0.6)
    options = {"search_seed": 7, "search_steps": 60}
    plans = [compile_plan(g, capacity, "tuned", options, simulation=simulation()) for _ in range(2)]
    assert plans[0] == plans[1]


def test_the_search_stops_at_its_time_cap_and_says_so() -> None:
    g, capacity = setup("vgg19", 64, 224, 0.5)
    notes: list[str] = []
    began = time.perf_counter()
    options = {"search_steps": MAX_SEARCH_STEPS, "search_seconds": 0.5}
    compile_plan(g, capacity, "tuned", options, simulation=simulation(notes=notes))
    # the cap is checked between changes, and the start plans and the bound come on top of it
    assert time.perf_counter() - began < 0.5 + 1.0
    assert "stopped by its time cap" in notes[0]


@pytest.mark.parametrize("model,batch,size,share", [*SETUPS, ("alexnet", 256, 224, 0.5)])
def test_tuned_never_beats_the_lower_bound(model: str, batch: int, size: int, share: float) -> None:
    g, capacity = setup(model, batch, size, share)
    plan = compile_plan(g, capacity, "tuned", {"search_steps": 100}, simulation=simulation(BOTH_WAYS))
    assert lower_bound(g, capacity, BOTH_WAYS).lower_bound_ns <= iteration_ns(g, plan, BOTH_WAYS)


def test_tuned_never_beats_the_bound_with_the_directions_serialised() -> None:
    g, capacity = setup("alexnet", 256, 224, 0.5)
    plan = compile_plan(g, capacity, "tuned", {"search_steps": 100}, simulation=simulation(H100_DEFAULT))
    assert lower_bound(g, capacity, H100_DEFAULT).lower_bound_ns <= iteration_ns(g, plan, H100_DEFAULT)


def test_the_report_says_where_the_search_started_and_how_far_it_ends_from_the_bound() -> None:
    g, capacity = setup("vgg11", 8, 64, 0.6)
    notes: list[str] = []
    plan = compile_plan(g, capacity, "tuned", SHORT, simulation=simulation(notes=notes))
    assert len(notes) == 1 and notes[0].startswith("tuned: from ")
    bound = lower_bound(g, capacity, H100_DEFAULT).lower_bound_ns
    assert f"{iteration_ns(g, plan, H100_DEFAULT) / bound:.2f}x the lower bound" in notes[0]
    assert "of 40 changes kept" in notes[0]


def test_without_a_simulation_tuned_is_refused_saying_what_to_pass() -> None:
    # it once planned as belady without a word: a script's "tuned" figures were belady's
    g, capacity = setup("vgg11", 8, 64, 0.6)
    with pytest.raises(PlanError, match=r"the tuned policy searches its plan in the simulator: pass .*"
                                        r"simulation=Simulation\(simulator.simulate"):
        compile_plan(g, capacity, "tuned")


@pytest.mark.parametrize("policy", [p for p, spec in POLICIES.items() if not spec.searches and p != "manual"])
def test_the_policies_that_do_not_search_ignore_a_simulation(policy: str) -> None:
    g = graph("resnet18", 8, 64)
    capacity = g.footprint if policy == "device" else g.footprint // 2
    assert compile_plan(g, capacity, policy, simulation=simulation()).memops == \
        compile_plan(g, capacity, policy).memops


def test_the_time_cap_covers_the_bound_the_search_works_out_first() -> None:
    g, capacity = setup("vgg11", 8, 64, 0.6)
    notes: list[str] = []

    def slow_bound(*args: object, **kwargs: object) -> object:
        time.sleep(0.3)
        return lower_bound(*args, **kwargs)  # type: ignore[arg-type]

    slow = Simulation(simulate, slow_bound, H100_DEFAULT, notes.append)
    compile_plan(g, capacity, "tuned", {"search_steps": 40, "search_seconds": 0.2}, simulation=slow)
    assert "0 of 0 changes kept" in notes[0] and "stopped by its time cap before its steps" in notes[0]


def test_the_steps_stop_the_search_by_default_and_the_report_gives_its_time() -> None:
    g, capacity = setup("vgg11", 8, 64, 0.6)
    notes: list[str] = []
    plan = compile_plan(g, capacity, "tuned", {}, simulation=simulation(notes=notes))
    assert plan.options["search_steps"] == 600 and plan.options["search_seconds"] == MAX_SEARCH_SECONDS
    assert re.search(r"of 600 changes kept in \d+\.\d s$", notes[0])


def test_a_plan_made_under_another_time_cap_still_ran_the_search_as_shipped() -> None:
    # the samples were searched under the old 4.5 s (joint: 10 s) cap: the app still finds them as the policy's
    assert non_default_options("tuned", {"search_seed": 0, "search_steps": 600, "search_seconds": 4.5}) == {}
    assert non_default_options("joint", {"search_seconds": 10.0}) == {}
    assert non_default_options("tuned", {"search_steps": 40, "search_seconds": 4.5}) == {"search_steps": 40}
