"""Hypothesis strategies the plan and policy property tests share (tests/conftest.py puts this folder
on the import path)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from hypothesis import strategies as st

from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import Move

MOVERS = ["autovm", "belady", "vdnn", "tuned", "manual"]  # the policies that plan moves: swap takes them


@cache
def graph(model: str, batch: int, size: int = 224) -> Graph:
    return build_graph(model, batch, size)


@st.composite
def manual_moves(draw: st.DrawFn, g: Graph) -> list[Move]:
    """Moves a person could make: a tensor offloaded after one use, prefetched before the next."""
    moves = []
    for t in draw(st.lists(st.integers(0, len(g.tensors) - 1), max_size=6, unique=True)):
        uses = g.uses[t]
        if len(uses) < 2:
            continue
        i = draw(st.integers(0, len(uses) - 2))
        a, b = uses[i], uses[i + 1]
        if b - a < 2:
            continue
        moves.append(Move(t, a, draw(st.integers(a, b - 1))))
    return moves


AUTOVM_OPTIONS = st.fixed_dictionaries({
    "prefetch_distance": st.integers(1, 12),
    "offload": st.sampled_from(["needed", "all"]),
    "tensors": st.sampled_from(["activations", "all"]),  # "all": weights' trips wrap the iteration
})


@st.composite
def swap_cases(draw: st.DrawFn, models: Sequence[tuple[str, int]], max_batch: int
               ) -> tuple[Graph, int, str, dict, list]:
    """A moving policy (tuned without a simulator plans as belady) on one of `models` (name, image size) at
    a batch up to `max_batch`, at any capacity from the least a plan needs to a little over the footprint:
    (graph, capacity, policy, options, moves)."""
    model, size = draw(st.sampled_from(models))
    g = graph(model, draw(st.integers(1, max_batch)), size)
    policy = draw(st.sampled_from(MOVERS))
    capacity = draw(st.integers(g.min_capacity[0], int(g.footprint * 1.1)))
    options = draw(AUTOVM_OPTIONS) if policy == "autovm" else {}
    moves = draw(manual_moves(g)) if policy == "manual" else []
    return g, capacity, policy, options, moves
