"""Recomputation as ops of the graph: a feature map dropped after its forward uses and made again, before
a later use, by running the forward op that produced it once more.

Checkmate's view: a schedule that rematerialises is the same program with some forward ops run twice.
So a plan's recomputations (`Recompute`: which activation, before which op) become a graph of their own
(`recomputed`), in which each re-run is an op of phase `recompute` placed before that op, writing a
copy of the tensor that the later ops read instead. The original then dies at its last forward use and
the copy lives from its re-run to its last use, so the replay, the bound, the simulator and the engine
count, time and run the recomputation as they do any op: its inputs must be on the device (kept, brought
in, or recomputed just before it), it holds its workspace while it runs, and it takes its op's time.

A re-run writes what its op writes, but only the requested copies outlive it: the rest (the batch-norm
statistics it computes again, a dropout mask, its workspace) go to temporaries of its own, freed once it
ends, so the running statistics are updated once per iteration, by the forward pass. The dropout mask a
re-run draws is the one the forward drew: the generator is counter-based on the run's seed, the
iteration and the layer (`ops/dropout.py`), all the same for the re-run.
"""

from __future__ import annotations

from collections.abc import Sequence

from .graph import Graph, GraphError, Kind, Op, Phase, Recompute, Tensor

SUFFIX = " (recomputed)"  # a copy's name: its original's and this
RERUN = " (recompute)"  # a re-run's name: its op's and this


def recomputed(graph: Graph, steps: Sequence[Recompute]) -> Graph:
    """`graph` with `steps` as ops: before each op named by a step, its tensors' producers run again in
    their forward order. A re-run reads the copy of an input recomputed before it, else the original,
    which then lives to the re-run. GraphError where a step cannot be run: a tensor that is not a
    forward op's activation, a re-run before its own op, one after the tensor's last use that no re-run
    there reads, or a tensor recomputed twice."""
    key = tuple(steps)
    full = graph.full or graph
    if full.recomputes == key:  # asked again of the graph these steps made: that graph
        return graph
    plain = full.plain or full  # other steps start from the graph without recomputation
    if key:
        made = plain._recomputations
        if key not in made:
            made[key] = _recompute(plain, key)
        plain = made[key]
    return plain if graph.capacity is None else plain.fitted(graph.capacity)


def _recompute(full: Graph, steps: tuple[Recompute, ...]) -> Graph:
    groups = _groups(full, steps)
    originals = [t for t in full.tensors if t.kind is not Kind.WORKSPACE]  # numbered first, as they were
    workspaces = [t for t in full.tensors if t.kind is Kind.WORKSPACE]
    reruns = [full.ops[p] for group in groups.values() for p, _ in group]
    # workspaces come after every other tensor (`Graph.without_workspaces`): the re-runs' new tensors go
    # between the originals and the workspaces, so each tensor's number is known before it is made
    first_workspace = len(originals) + sum(full.tensors[t].kind is not Kind.WORKSPACE for p in reruns for t in p.writes)
    number = {len(originals) + j: first_workspace + j for j in range(len(workspaces))}  # the workspaces' new numbers
    made: list[Tensor] = []
    made_workspaces: list[Tensor] = []
    copy: dict[int, int] = {}  # original tensor -> its copy: every op from its re-run on reads the copy
    ops: list[Op] = []
    for k, op in enumerate(full.ops):
        for producer, wanted in groups.get(k, ()):
            p = full.ops[producer]
            writes = []
            for t in p.writes:
                original = full.tensors[t]
                if original.kind is Kind.WORKSPACE:
                    made_workspaces.append(Tensor(f"{p.name}{RERUN}.workspace", Kind.WORKSPACE, original.shape,
                                                  original.dtype, original.nbytes, len(ops), ()))
                    writes.append(first_workspace + len(workspaces) + len(made_workspaces) - 1)
                    continue
                name = original.name + (SUFFIX if t in wanted else f" (re-run by {p.name})")
                made.append(Tensor(name, original.kind if t in wanted else Kind.ACTIVATION, original.shape,
                                   original.dtype, original.nbytes, len(ops), ()))
                writes.append(len(originals) + len(made) - 1)
                if t in wanted:
                    copy[t] = writes[-1]
            ops.append(Op(p.name + RERUN, p.kind, Phase.RECOMPUTE, p.layer,
                          tuple(copy.get(t, number.get(t, t)) for t in p.reads), tuple(writes), p.flops,
                          p.bytes_touched, p.attrs))
        ops.append(Op(op.name, op.kind, op.phase, op.layer, tuple(copy.get(t, number.get(t, t)) for t in op.reads),
                      tuple(number.get(t, t) for t in op.writes), op.flops, op.bytes_touched, op.attrs))
    return _graph(full, originals + made + workspaces + made_workspaces, ops, steps)


def _groups(graph: Graph, steps: Sequence[Recompute]) -> dict[int, list[tuple[int, frozenset[int]]]]:
    """Per op, the producers to run again before it, in forward order, each with the tensors wanted of it."""
    seen: set[int] = set()
    by_op: dict[int, dict[int, set[int]]] = {}
    for s in steps:
        if not 0 <= s.tensor < len(graph.tensors) or not 0 <= s.before < len(graph.ops):
            raise GraphError(f"recompute of tensor {s.tensor} before op {s.before}: no such tensor or op")
        t = graph.tensors[s.tensor]
        if t.kind is not Kind.ACTIVATION or t.persistent or graph.ops[t.producer].phase is not Phase.FORWARD:
            raise GraphError(f"{t.name} is not an activation a forward op writes: it cannot be recomputed")
        if s.tensor in seen:
            raise GraphError(f"{t.name} is recomputed twice; once serves every use after it")
        seen.add(s.tensor)
        if not t.producer < s.before:
            raise GraphError(f"{t.name} is recomputed before {graph.ops[s.before].name}, which is not after its "
                             f"producer {graph.ops[t.producer].name}")
        by_op.setdefault(s.before, {}).setdefault(t.producer, set()).add(s.tensor)
    groups = {k: [(p, frozenset(ts)) for p, ts in sorted(producers.items())] for k, producers in by_op.items()}
    for k, group in groups.items():
        for i, (_, wanted) in enumerate(group):
            read_here = {r for q, _ in group[i + 1:] for r in graph.ops[q].reads}
            for w in wanted - read_here:
                if k > graph.last_use[w]:  # made again for nothing: nothing reads it from there
                    raise GraphError(f"{graph.tensors[w].name} is recomputed before {graph.ops[k].name}, after its "
                                     "last use, and no re-run there reads it")
    return groups


def _graph(full: Graph, tensors: list[Tensor], ops: list[Op], steps: tuple[Recompute, ...]) -> Graph:
    """The graph of `ops` over `tensors`, each tensor's producer and readers found again."""
    producer: dict[int, int] = {}
    readers: list[list[int]] = [[] for _ in tensors]
    for i, op in enumerate(ops):
        for w in op.writes:
            producer.setdefault(w, i)
        for t in dict.fromkeys(op.reads):
            readers[t].append(i)
    final = tuple(Tensor(t.name, t.kind, t.shape, t.dtype, t.nbytes, t.producer if t.persistent else producer[i],
                         tuple(readers[i])) for i, t in enumerate(tensors))
    return Graph(full.model, full.batch, full.image_size, final, tuple(ops), full.workspaces, recomputes=steps,
                 plain=full, definition=full.definition)
