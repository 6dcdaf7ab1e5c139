"""Hypothesis strategies the plan and policy property tests share (tests/conftest.py puts this folder
on the import path)."""

from __future__ import annotations

from hypothesis import strategies as st

from vmexplorer.graph import Graph
from vmexplorer.plan import Move


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
