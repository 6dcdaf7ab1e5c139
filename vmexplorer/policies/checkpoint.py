"""`checkpoint`: PyTorch's `checkpoint_sequential`, the recomputation a PyTorch user reaches for first.

The forward pass is a chain of modules; `checkpoint_sequential(functions, k, x)` cuts it into k segments
of equal module counts (the last takes the remainder), keeps only each segment's input and, as the
backward pass reaches a segment, runs its forward again to make what the segment's backward reads. The
last segment runs as usual: its backward comes first, so recomputing it would only cost time.

A graph has no modules, so they are found where a chain has its joints: a cut after a forward op
through which exactly one activation passes on to later forward ops is a module boundary (every layer
of VGG or AlexNet; between ResNet's blocks, never inside one, where the shortcut passes beside the main
path). A segment's activations that its own backward reads are recomputed, with the ones their re-runs
read in turn, all before the first backward op that reads one of them, in forward order: what PyTorch
runs again, and when. Its input and whatever a later segment's forward reads stay.

Recomputation fits less memory without moving a byte, but not any memory: what still does not fit is
paged by the driver (or, under swap, copied synchronously), unless `then` names a policy that plans
moves on the recomputed graph, so that moving and recomputing are one plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..graph import Graph, Kind, Phase, Recompute
from ..plan import Move
from . import belady
from .spec import MAX_DISTANCE, OptionSpec, PolicySpec

THEN = {"none": None, "belady": belady.SPEC}  # what plans the moves on the recomputed graph

OPTIONS = {
    "segments": OptionSpec(int, 4, "cut the forward pass into this many segments of equal module counts and "
                                   "recompute all but the last in the backward pass (1: recompute nothing)",
                           minimum=1, maximum=MAX_DISTANCE),
    "then": OptionSpec(str, "none", "what moves what recomputation leaves over the capacity: none (the driver "
                                    "pages it, or the executor copies it under swap) or belady's planned trips",
                       choices=tuple(THEN)),
}


def plan_recomputes(graph: Graph, capacity: int, options: Mapping[str, Any],
                    recomputes: Sequence[Recompute]) -> list[Recompute]:
    return checkpoint_sequential(graph, options["segments"])


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    then = THEN[options["then"]]
    if then is None:
        return []
    defaults = {name: opt.default for name, opt in then.options.items()}
    return then.plan_moves(graph, capacity, defaults, ())


def modules(graph: Graph) -> list[list[int]]:
    """The forward ops cut into modules: runs of ops after each of which one activation alone passes on
    to the later forward ops (the loss reads the last module's output)."""
    forward = [k for k, op in enumerate(graph.ops) if op.phase is Phase.FORWARD]
    out: list[list[int]] = [[]]
    for i, k in enumerate(forward):
        out[-1].append(k)
        if i + 1 < len(forward) and len(passed_on(graph, forward[:i + 1], forward[i + 1])) == 1:
            out.append([])
    return out


def passed_on(graph: Graph, done: list[int], next_op: int) -> set[int]:
    """The activations ops `done` wrote that a forward op from `next_op` on reads."""
    written = {t for k in done for t in graph.ops[k].writes if graph.tensors[t].kind is Kind.ACTIVATION}
    return {t for t in written if any(next_op <= k and graph.ops[k].phase is Phase.FORWARD for k in graph.uses[t])}


def checkpoint_sequential(graph: Graph, segments: int) -> list[Recompute]:
    """The steps of PyTorch's `checkpoint_sequential` with `segments` segments over the graph's modules."""
    mods = modules(graph)
    size = len(mods) // segments
    if segments < 2 or size == 0:  # one segment, or more segments than modules: nothing is recomputed
        return []
    steps: list[Recompute] = []
    for s in range(segments - 1):
        ops = [k for m in mods[s * size:(s + 1) * size] for k in m]
        steps += _segment(graph, ops)
    return steps


def _segment(graph: Graph, ops: list[int]) -> list[Recompute]:
    """What one segment's backward needs made again, and the first op that reads any of it."""
    inside = set(ops)
    made = {t for k in ops for t in graph.ops[k].writes
            if graph.tensors[t].kind is Kind.ACTIVATION and not graph.tensors[t].persistent}
    # what a later forward op or the loss reads passes out of the segment and is kept, as PyTorch keeps outputs
    dropped = {t for t in made if all(k in inside or graph.ops[k].phase is Phase.BACKWARD for k in graph.uses[t])}
    wanted = {t for t in dropped if any(graph.ops[k].phase is Phase.BACKWARD for k in graph.uses[t])}
    for k in reversed(ops):  # and what their re-runs read, back to the segment's input
        if wanted & set(graph.ops[k].writes):
            wanted |= dropped & set(graph.ops[k].reads)
    if not wanted:
        return []
    before = min(k for t in wanted for k in graph.uses[t] if graph.ops[k].phase is Phase.BACKWARD)
    return [Recompute(t, before) for t in sorted(wanted)]


SPEC = PolicySpec("checkpoint", "PyTorch's checkpoint_sequential: keep each segment's input, run the segment's "
                                "forward again as the backward pass reaches it", plan_moves, OPTIONS,
                  plan_recomputes=plan_recomputes)
