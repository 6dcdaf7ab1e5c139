"""Edits of a plan as a person makes them, as pure functions of the graph and the plan's moves: where a
marker may be dragged, the round trip a tensor gets when one is added, and tensors named in words.

A plan-origin round trip is a `Move`; a drag changes one move's `offload_after` or `prefetch_after`,
clamped to where it can work (`marker_range`); the store (`ui.state`) re-plans the edited moves as a
`manual` plan and simulates them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..graph import Graph, Phase, Recompute
from ..graph.recompute import recomputed
from ..plan import Move, PlanError
from ..plan.bound import recomputable
from ..plan.moves import check_moves, check_recomputes
from ..plan.residency import next_use
from ..policies import POLICIES
from ..policies.common import reuse_gaps
from ..units import quoted

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


# --- a tensor's choice: keep it, move it out and back, or make it again ---------------------------------
CHOICES = ("keep", "move", "recompute")


def choice_of(moves: Sequence[Move], recomputes: Sequence[Recompute], t: int) -> str:
    """What the plan does with tensor `t` of its graph: recomputes it, moves it, or keeps it. (A recomputed
    tensor has one number with and without re-runs: the model's tensors but workspaces keep theirs.)"""
    if any(step.tensor == t for step in recomputes):
        return "recompute"
    return "move" if any(mv.tensor == t for mv in moves) else "keep"


def offered(graph: Graph) -> dict[str, tuple[str, ...]]:
    """By tensor name, the choices each tensor of the plan's model has: every tensor can be kept; one with a
    gap of an op or more between uses can be moved; an activation a forward op makes and the backward
    pass reads can be recomputed. A re-run's copies are not the model's tensors: they have none."""
    plain = _plain(graph)
    remade = {t for t in recomputable(plain) if _first_backward(plain, t) is not None}
    return {tensor.name: ("keep",) + (("move",) if any(use - last >= 2 for last, use in reuse_gaps(plain, t)) else ())
            + (("recompute",) if t in remade else ()) for t, tensor in enumerate(plain.tensors)}


def choose(graph: Graph, moves: Sequence[Move], recomputes: Sequence[Recompute], tensor: int | str,
           choice: str) -> tuple[list[Move], list[Recompute], str]:
    """The plan with one tensor of `graph` (the shown plan's, numbered as it is) switched to `choice`, and
    what changed in words: "recompute" drops it after its forward uses and makes it again before its
    first backward use (`Recompute`); "move" gives it a trip over its longest gap (`new_move`); "keep"
    does neither. The plan's other trips are numbered again in the graph of the new recomputes (re-runs
    come and go between its ops); one that no longer fits there (a re-run now reads its tensor while it is
    away) is dropped, and said. PlanError for a choice the tensor does not have, saying why."""
    if choice not in CHOICES:
        raise PlanError(f"a tensor's choice is one of {', '.join(CHOICES)}, not {quoted(str(choice)[:40])}")
    t = tensor_id(graph, tensor)
    name, plain = graph.tensors[t].name, _plain(graph)
    can = offered(graph).get(name)
    if can is None:
        raise PlanError(f"{name} is a copy a re-run makes, not one of the model's tensors: switch the tensor it copies")
    if choice not in can:
        kind = graph.tensors[t].kind.value
        raise PlanError(f"{name} ({kind}) is used by consecutive ops only: there is no gap to move it in"
                        if choice == "move" else f"{name} ({kind}) cannot be recomputed: only an activation a "
                        "forward op makes and the backward pass reads can be")
    p = plain.tensor_id(name)
    steps = [step for step in recomputes if step.tensor != p]
    said = f"{name} is kept on the device"
    if choice == "recompute":
        before = _first_backward(plain, p)
        assert before is not None  # offered only where the backward pass reads it
        steps.append(Recompute(p, before))
        said = f"{name} is recomputed before {plain.ops[before].name}"
    check_recomputes(plain, steps)
    new = recomputed(plain, tuple(sorted(steps, key=lambda step: (step.before, step.tensor))))
    kept, dropped = renumbered(graph, new, [mv for mv in moves if mv.tensor != t])
    if choice == "move":
        move = new_move(new, new.tensor_id(name))
        kept.append(move)
        prefetch = -1 if move.prefetch_after is None else move.prefetch_after
        said = (f"{name} is offloaded after {op_words(new, move.offload_after)}, prefetched after "
                f"{op_words(new, prefetch)}")
    if dropped:
        said += f"; {len(dropped)} trip(s) no longer fit among the re-runs and were dropped"
    return sorted(kept, key=lambda mv: (mv.offload_after, mv.tensor)), steps, said


def renumbered(old: Graph, new: Graph, moves: Sequence[Move]) -> tuple[list[Move], list[Move]]:
    """`moves` of `old` numbered in `new`, a graph of the same model with other re-runs: tensors by name, an
    op by itself, and an issue after a re-run `new` does not hold as just before the op it preceded. (the
    moves that fit `new`, the ones that do not)."""
    if old.recomputes == new.recomputes and len(old.ops) == len(new.ops):
        return list(moves), []
    ops, at = _op_keys(old), {key: k for k, key in enumerate(_op_keys(new))}
    originals = {key[2]: k for key, k in at.items() if key[0] == "op"}

    def op(k: int | None) -> int | None:
        if k is None or k < 0:
            return k
        return at.get(ops[k], originals.get(ops[k][2], len(new.ops)) - 1)

    tensors = {tensor.name: i for i, tensor in enumerate(new.tensors)}
    kept, dropped = [], []
    for mv in moves:
        t = tensors.get(old.tensors[mv.tensor].name)
        moved = None if t is None else Move(t, op(mv.offload_after), op(mv.prefetch_after))  # type: ignore[arg-type]
        try:
            if moved is None:
                raise PlanError("its tensor is not in the new graph")
            check_moves(new, [moved])
            kept.append(moved)
        except PlanError:
            dropped.append(mv)
    return kept, dropped


def _op_keys(graph: Graph) -> list[tuple[str, str, int]]:
    """Each op as ("op", its name, its place among the ops without re-runs) or ("rerun", its name, the place
    of the op it runs before): what an op is, whichever re-runs the graph holds."""
    keys: list[tuple[str, str, int]] = []
    place = 0
    pending: list[str] = []
    for op in graph.ops:
        if op.phase is Phase.RECOMPUTE:
            pending.append(op.name)
            continue
        keys += [("rerun", name, place) for name in pending]
        pending = []
        keys.append(("op", op.name, place))
        place += 1
    return keys


def _plain(graph: Graph) -> Graph:
    full = graph.full or graph
    return full.plain or full


def _first_backward(graph: Graph, t: int) -> int | None:
    return next((k for k in graph.uses[t] if graph.ops[k].phase is Phase.BACKWARD), None)
