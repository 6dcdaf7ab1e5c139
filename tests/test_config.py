"""The config: what a person picks, and the one place a capacity becomes a share of the footprint."""

from __future__ import annotations

import pytest

from vmexplorer.config import Config, capacity_text, share_of_footprint
from vmexplorer.graph import build_graph
from vmexplorer.policies import compile_plan
from vmexplorer.units import parse_bytes


@pytest.mark.parametrize("typed", ["50%", "1%", "90%", "100%", "250%"])
def test_a_capacity_typed_as_a_whole_share_reads_back_as_that_share(typed: str) -> None:
    footprint = build_graph("vgg19", 64).footprint
    assert capacity_text(parse_bytes(typed, footprint), footprint) == typed


@pytest.mark.parametrize("nbytes", [3_000_000_000, 12345, 2**30])
def test_bytes_that_are_no_whole_share_read_back_as_bytes(nbytes: int) -> None:
    footprint = build_graph("vgg19", 64).footprint
    assert capacity_text(nbytes, footprint) == str(nbytes)
    assert parse_bytes(capacity_text(nbytes, footprint), footprint) == nbytes


def test_the_share_of_the_footprint_is_a_percentage() -> None:
    assert share_of_footprint(50, 200) == 25.0


def test_a_plan_carries_the_config_it_was_compiled_for() -> None:
    graph = build_graph("vgg11", 8, 64)
    capacity = (graph.min_capacity[0] + graph.footprint) // 2
    plan = compile_plan(graph, capacity, "autovm", {"prefetch_distance": 2})
    assert plan.config == Config("vgg11", 8, 64, capacity, "autovm", dict(plan.options))
    assert plan.config.as_json()["options"]["prefetch_distance"] == 2
    assert (plan.model, plan.capacity, plan.key) == ("vgg11", capacity, graph.key)
