"""Two sessions op by op: what `vmexplorer compare` prints and the app's delta table shows."""

from __future__ import annotations

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
    ta, tb = np.rint(per_op_ns(a)).astype(np.int64), np.rint(per_op_ns(b)).astype(np.int64)
    if [op.name for op in a.graph.ops] == [op.name for op in b.graph.ops]:
        return "op", [{"op": i, "name": op.name, "a_ns": int(ta[i]), "b_ns": int(tb[i]),
                       "delta_ns": int(tb[i] - ta[i])} for i, op in enumerate(a.graph.ops)]
    la, lb = _by_layer(a, ta), _by_layer(b, tb)
    return "layer", [{"op": None, "name": layer, "a_ns": la.get(layer), "b_ns": lb.get(layer),
                      "delta_ns": None if layer not in la or layer not in lb else lb[layer] - la[layer]}
                     for layer in list(la) + [x for x in lb if x not in la]]


def _by_layer(session: Session, per_op: np.ndarray) -> dict[str, int]:
    out: dict[str, int] = {}
    for op, ns in zip(session.graph.ops, per_op.tolist()):
        out[op.layer] = out.get(op.layer, 0) + int(ns)
    return out
