"""Sessions op by op: what `vmexplorer compare` prints (any number, against the first) and the app's delta
table shows (two)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..records.spans import timed_only
from .files import Session


def per_op_ns(session: Session) -> np.ndarray:
    """Each op's time per timed iteration, its stall included (waiting for memory is part of its cost)."""
    tl = timed_only(session.timeline)
    out = np.zeros(len(session.graph.ops), dtype=np.float64)
    np.add.at(out, tl.op_index, (tl.op_end_ns - tl.op_start_ns + tl.op_stall_ns).astype(np.float64))
    return out / max(tl.iterations, 1)


def align_op_times(a: Session, b: Session) -> tuple[str, list[dict[str, Any]]]:
    """B against A per op when both ran the same graph ("op"), else summed per layer ("layer"), so
    vgg16 and vgg19 still line up. Rows: op (index, or None by layer), name, a_ns, b_ns, delta_ns."""
    by, rows = align_many([a, b])
    return by, [{"op": r["op"], "name": r["name"], "a_ns": r["ns"][0], "b_ns": r["ns"][1],
                 "delta_ns": r["deltas_ns"][0]} for r in rows]


def align_many(sessions: Sequence[Session]) -> tuple[str, list[dict[str, Any]]]:
    """Every session's time per op against the first's: per op when all ran the same graph ("op"), else
    summed per layer ("layer"), the first's layers in its order, then each other's new ones. Rows: op
    (index, or None by layer), name, ns (each session's; None for a layer it lacks) and deltas_ns (each
    session after the first, minus the first; None where either lacks the layer)."""
    times = [np.rint(per_op_ns(s)).astype(np.int64) for s in sessions]
    first = sessions[0]
    names = [op.name for op in first.graph.ops]
    if all([op.name for op in s.graph.ops] == names for s in sessions[1:]):
        return "op", [{"op": i, "name": name, "ns": [int(t[i]) for t in times],
                       "deltas_ns": [int(t[i] - times[0][i]) for t in times[1:]]} for i, name in enumerate(names)]
    layers = [_by_layer(s, t) for s, t in zip(sessions, times)]
    order = list(dict.fromkeys(layer for by in layers for layer in by))
    rows = []
    for layer in order:
        ns = [by.get(layer) for by in layers]
        rows.append({"op": None, "name": layer, "ns": ns,
                     "deltas_ns": [None if x is None or ns[0] is None else x - ns[0] for x in ns[1:]]})
    return "layer", rows


def _by_layer(session: Session, per_op: np.ndarray) -> dict[str, int]:
    out: dict[str, int] = {}
    for op, ns in zip(session.graph.ops, per_op.tolist()):
        out[op.layer] = out.get(op.layer, 0) + int(ns)
    return out
