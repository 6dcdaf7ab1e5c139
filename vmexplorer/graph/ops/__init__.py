"""Every graph op, one module each: how it is recorded into a graph and its math, forward and backward.

Each module (as Chainer's `chainer/functions/<family>/<op>.py`) holds, side by side: the function that
records the op into a graph (its shapes, FLOPs, attrs, and what its backward keeps: what a paging
policy must bring back before the backward op runs), the attrs its kernels require, the run settings
they take, and the kernels themselves, declared in its `KERNELS`. Adding an op is adding its module and
naming it in `MODULES`.

`OPS[kind](xp, reads, writes, attrs)` runs graph op kind `kind`: `reads` and `writes` are the arrays of
the op's `reads` and `writes` tensor ids, in that order, and results go into the preallocated
`writes` in place (scratch temporaries are allowed, new outputs are not). `xp` is numpy on the CPU
and cupy on the GPU; cupy and the cuDNN frontend are imported only inside GPU paths. `attrs` is a
plain dict, normally from `op_attrs(graph, op_index, ...)`.
"""

from __future__ import annotations

from typing import Any

from ..graph import Graph
from . import (
    adaptive_avg_pool2d,
    add,
    batch_norm2d,
    conv2d,
    dropout,
    linear,
    max_pool2d,
    relu,
    sgd_momentum,
    softmax_cross_entropy,
)
from .kernel import Kernel, OpFn, RunContext

MODULES = (conv2d, linear, relu, max_pool2d, adaptive_avg_pool2d, batch_norm2d, dropout, add,
           softmax_cross_entropy, sgd_momentum)

KERNELS: dict[str, Kernel] = {k.kind: k for m in MODULES for k in m.KERNELS}
OPS: dict[str, OpFn] = {kind: k.run for kind, k in KERNELS.items()}
# what each op kind's kernel reads from the attrs the graph recorded
REQUIRED: dict[str, tuple[str, ...]] = {kind: k.requires for kind, k in KERNELS.items()}


class AttrsError(ValueError):
    """An op lacks the attributes its kernel needs."""


def op_attrs(graph: Graph, op_index: int, *, iteration: int = 0, seed: int = 0, lr: float = 0.01,
             momentum: float = 0.9, weight_decay: float = 0.0, allow_tf32: bool = True,
             deterministic: bool = False, autotune: bool = False) -> dict[str, Any]:
    """Attributes of graph op `op_index` for iteration `iteration` of a run with the given settings: what
    the graph recorded on the op plus the run settings its kernel takes, so the engine calls one function
    per op and the kernels stay pure functions of their arguments."""
    op = graph.ops[op_index]
    kernel = KERNELS.get(op.kind)
    if kernel is None:
        raise AttrsError(f"op {op_index} ({op.name}): no kernel for kind {op.kind!r}; "
                         f"known kinds: {', '.join(sorted(KERNELS))}")
    recorded = dict(op.attrs)
    missing = [k for k in kernel.requires if k not in recorded]
    if missing:
        raise AttrsError(f"op {op_index} ({op.name}, {op.kind}) lacks attrs {', '.join(missing)}; its op "
                         f"module must record them (a graph read from a session file has none: use build_graph's)")
    attrs: dict[str, Any] = {"op": op.name, **recorded}
    if kernel.settings is not None:
        run = RunContext(iteration=iteration, seed=seed, lr=lr, momentum=momentum, weight_decay=weight_decay,
                         allow_tf32=allow_tf32, deterministic=deterministic, autotune=autotune)
        attrs.update(kernel.settings(op.layer, run))
    return attrs


__all__ = ["KERNELS", "MODULES", "OPS", "REQUIRED", "AttrsError", "Kernel", "OpFn", "RunContext", "op_attrs"]
