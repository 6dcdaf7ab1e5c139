"""Hypothesis strategies the plan and policy property tests share (tests/conftest.py puts this folder
on the import path)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from hypothesis import strategies as st

from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import Move, Plan, PlanError
from vmexplorer.policies import compile_plan

MOVERS = ["autovm", "belady", "vdnn", "manual"]  # the policies that plan moves without a search: swap takes them


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
    """A moving policy that does not search (a search needs a simulator) on one of `models` (name, image size) at
    a batch up to `max_batch`, at any capacity from the least a plan needs to a little over the footprint:
    (graph, capacity, policy, options, moves)."""
    model, size = draw(st.sampled_from(models))
    g = graph(model, draw(st.integers(1, max_batch)), size)
    policy = draw(st.sampled_from(MOVERS))
    capacity = draw(st.integers(g.min_capacity[0], int(g.footprint * 1.1)))
    options = draw(AUTOVM_OPTIONS) if policy == "autovm" else {}
    moves = draw(manual_moves(g)) if policy == "manual" else []
    return g, capacity, policy, options, moves


POOL_REFUSED = "the pool holding this plan needs"  # compile_plan's refusal of a swap plan its pool cannot hold


def swap_plan(g: Graph, capacity: int, policy: str, options: dict | None = None, moves: Sequence[Move] = (),
              **kwargs: object) -> Plan:
    """`compile_plan` under swap at `capacity` or, where no pool holding its plan fits there (near the least
    capacity a graph runs in), at a tenth over its footprint."""
    for at in (capacity, g.footprint * 11 // 10):
        try:
            return compile_plan(g, at, policy, options, moves=moves, mechanism="swap", **kwargs)  # type: ignore[arg-type]
        except PlanError as e:
            if POOL_REFUSED not in str(e):
                raise
    raise AssertionError(f"no swap plan of {policy} for {g.key} fits even 110% of its footprint")
