"""`plan_for`, the one door from a configuration to a plan: a search and a copy order are made under the
cost model the plan is simulated with, the same configuration gives the same plan, and the result
carries its bound and what its planning said."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vmexplorer.config import Config, Mechanism
from vmexplorer.graph import build_graph
from vmexplorer.plan import Move, PlanError
from vmexplorer.policies import Simulation, compile_plan
from vmexplorer.session.planned import plan_for
from vmexplorer.simulator import H100_DEFAULT, simulate
from vmexplorer.simulator.bound import lower_bound

GRAPH = build_graph("vgg11", 8, 64)
CAPACITY = GRAPH.min_capacity[0] + (GRAPH.footprint - GRAPH.min_capacity[0]) // 3  # pages, and every policy fits
FAST_COPIES = replace(H100_DEFAULT, name="copies at 80 GB/s", swap_to_device_bytes_per_ns=80.0,
                      swap_to_host_bytes_per_ns=80.0)


def config(policy: str, mechanism: Mechanism = Mechanism.UVM, **options: object) -> Config:
    return Config("vgg11", 8, 64, CAPACITY, policy, options, mechanism)


def test_a_search_is_made_under_the_given_cost_model_and_reports_how_it_went() -> None:
    planned = plan_for(config("tuned", search_steps=20), FAST_COPIES)
    said: list[str] = []
    alone = compile_plan(GRAPH, CAPACITY, "tuned", {"search_steps": 20},
                         simulation=Simulation(simulate, lower_bound, FAST_COPIES, said.append))
    assert planned.plan == alone
    # the report ends with how long the search took, which differs from run to run
    assert [r.rsplit(" in ", 1)[0] for r in planned.reports] == [r.rsplit(" in ", 1)[0] for r in said] != []


def test_the_same_search_asked_twice_is_the_same_plan_and_another_cost_model_searches_again() -> None:
    first = plan_for(config("tuned", search_steps=20), H100_DEFAULT)
    again = plan_for(config("tuned", search_steps=20), H100_DEFAULT, graph=GRAPH)
    assert again.plan is first.plan
    other = plan_for(config("tuned", search_steps=20), replace(H100_DEFAULT, name="slow", evict_bytes_per_ns=1.0))
    assert other.plan is not first.plan


def test_a_swap_plan_takes_the_copy_order_its_cost_model_simulates_fastest() -> None:
    graph = build_graph("resnet18", 32, 64)  # vgg11 at 64 px has no swap plan below its footprint that a pool holds
    capacity = graph.footprint // 2
    planned = plan_for(Config("resnet18", 32, 64, capacity, "belady", {}, Mechanism.SWAP), FAST_COPIES)
    ordered = compile_plan(graph, capacity, "belady", mechanism=Mechanism.SWAP,
                           simulation=Simulation(simulate, lower_bound, FAST_COPIES))
    assert planned.plan == ordered


def test_a_manual_plan_plans_the_edits_it_is_given() -> None:
    base = plan_for(config("autovm"), H100_DEFAULT).plan
    moves = list(base.moves[:-1])
    planned = plan_for(config("manual"), H100_DEFAULT, moves)
    assert list(planned.plan.moves) == moves and planned.plan.policy == "manual"
    again = plan_for(config("manual"), H100_DEFAULT, [*moves, Move(*vars(base.moves[-1]).values())])
    assert list(again.plan.moves) == list(base.moves)


def test_the_bound_and_the_simulated_session_come_from_the_same_cost_model() -> None:
    planned = plan_for(config("belady"), FAST_COPIES)
    assert planned.bound == lower_bound(GRAPH, CAPACITY, FAST_COPIES, Mechanism.UVM)
    session = planned.simulated(notes=["made by a test"])
    assert session.bound == planned.bound and session.cost_model is FAST_COPIES
    assert session.notes[-1] == "made by a test"


def test_a_graph_of_another_configuration_is_refused() -> None:
    with pytest.raises(PlanError, match="the graph is"):
        plan_for(config("belady"), H100_DEFAULT, graph=build_graph("vgg11", 4, 64))


def test_an_unknown_mechanism_for_a_search_is_refused_with_the_choices() -> None:
    with pytest.raises(PlanError, match="unknown mechanism 'paper'; choose one of: uvm, swap"):
        plan_for(replace(config("tuned"), mechanism="paper"), H100_DEFAULT)  # type: ignore[arg-type]
