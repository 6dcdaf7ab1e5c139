"""Edits of a plan as a person makes them, as pure functions of the graph and the plan's moves: where a
marker may be dragged, the round trip a tensor gets when one is added, and tensors named in words.

A plan-origin round trip is a `Move`; a drag changes one move's `offload_after` or `prefetch_after`,
clamped to where it can work (`marker_range`); the store (`ui.state`) re-plans the edited moves as a
`manual` plan and simulates them.
"""

from __future__ import annotations

from ..graph import Graph
from ..plan import Move, PlanError
from ..plan.residency import next_use
from ..policies import POLICIES
from ..policies.common import reuse_gaps

MARKER_KINDS = ("offload", "prefetch")


def marker_range(graph: Graph, move: Move, kind: str) -> tuple[int, int]:
    """The ops (as `issue_after`) a marker of `move` may be dragged to: an offload stays after the
    tensor's last use before its trip (never before its producer) and before its prefetch; a prefetch
    stays after its offload and before the first use after the offload. A trip that wraps the iteration
    (a persistent tensor away across its end) keeps each end on its side."""
    n, uses = len(graph.ops), graph.uses[move.tensor]
    o, p = move.offload_after, move.prefetch_after
    if p is not None and p < o:
        return (uses[-1] if uses else o, n - 1) if kind == "offload" else (-1, uses[0] - 1 if uses else p)
    before = [u for u in uses if u <= o]
    last = before[-1] if before else (-1 if graph.tensors[move.tensor].persistent else o)
    first = next_use(graph, move.tensor, o)
    if kind == "offload":
        return last, (p - 1 if p is not None else (first - 1 if first is not None else n - 1))
    return o + 1, (first - 1 if first is not None else n - 1)


def new_move(graph: Graph, t: int) -> Move:
    """A trip over the tensor's longest reuse gap, prefetched autovm's default distance ahead of the use
    that ends the gap (as AutoVM does)."""
    n, distance = len(graph.ops), POLICIES["autovm"].options["prefetch_distance"].default
    gaps = [(use - last, last, use) for last, use in reuse_gaps(graph, t) if use - last >= 2]
    if not gaps:
        raise PlanError(f"{graph.tensors[t].name} is used by consecutive ops only: there is no gap to offload it in")
    _, last, use = max(gaps)
    if use >= n:  # wraps into the next iteration
        return Move(t, last, max(use - n - distance, -1))
    return Move(t, last, max(use - distance, last + 1))


def tensor_id(graph: Graph, tensor: int | str) -> int:
    """A tensor by its number or its name; PlanError when the graph has no such tensor."""
    if isinstance(tensor, str) and not tensor.lstrip("-").isdigit():
        return graph.tensor_id(tensor)
    t = int(tensor)
    if not 0 <= t < len(graph.tensors):
        raise PlanError(f"tensor {t} is not in the graph (it has {len(graph.tensors)} tensors)")
    return t


def find_move(graph: Graph, moves: list[Move], kind: str, tensor: int | str, from_op: int | None) -> tuple[int, Move]:
    """The move whose `kind` marker a person grabbed (by its position in `moves`): the tensor's trip
    whose marker is issued after `from_op` where it has several. PlanError when there is none."""
    if kind not in MARKER_KINDS:
        raise PlanError(f"a marker is 'offload' or 'prefetch', not {kind!r}")
    t = tensor_id(graph, tensor)
    found = [(i, mv) for i, mv in enumerate(moves) if mv.tensor == t]
    if not found:
        raise PlanError(f"{graph.tensors[t].name} has no planned round trip; add one in the tensor table")
    if from_op is not None:
        at = [(i, mv) for i, mv in found if (mv.offload_after if kind == "offload" else mv.prefetch_after) == from_op]
        found = at or found
    i, mv = found[0]
    if kind == "prefetch" and mv.prefetch_after is None:
        raise PlanError(f"{graph.tensors[t].name} is offloaded and never prefetched: there is no prefetch marker "
                        "to move")
    return i, mv


def op_words(graph: Graph, k: int) -> str:
    """Op `k` as a status line names it; -1 is the iteration's start."""
    return "the iteration start" if k < 0 else f"op {k} ({graph.ops[k].name})"
