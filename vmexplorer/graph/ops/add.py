"""Elementwise sum: y = reads[0] + reads[1] + ...

Two uses. The residual add in forward (2 reads) has no backward op: its backward is the identity, so
the builder hands dy to both branches as is. In backward, the gradient of a tensor with several
consumers is the sum of its parts (2 or more reads), recorded by `grad_sum` when the builder meets it.
Backward keeps: nothing (the residual add's backward reads only dy, and a gradient sum has none).
On cupy with float32 operands: one CUDA kernel per pair, in the same order (cuda_kernels/elementwise.py).
"""

from __future__ import annotations

import math
from typing import Any

from ..graph import GraphError, Kind, Phase
from . import cuda_kernels
from .kernel import Kernel
from .recorder import Recorder

Array = Any


def add(b: Recorder, x: int, y: int, layer: str) -> int:
    """Record the residual add of tensors `x` and `y`; returns their sum."""
    if b.shape(x) != b.shape(y):
        raise GraphError(f"{b.model}: {layer} adds {b.shape(x)} to {b.shape(y)}")
    out, _ = b.forward("add", layer, (x, y), (), b.shape(x), math.prod(b.shape(x)), passes_gradient=True)
    return out


def grad_sum(b: Recorder, t: int, parts: tuple[int, ...]) -> int:
    """Record the sum of the gradient parts of tensor `t`, one per consumer; returns its gradient."""
    name, shape = b.name(t), b.shape(t)
    _, (total,) = b.add_op(f"{name}.grad_sum", "add", Phase.BACKWARD, name.rsplit(".", 1)[0], parts,
                           [(name + ".grad", Kind.GRADIENT, shape, "float32")],
                           flops=math.prod(shape) * (len(parts) - 1))
    return total


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (y,) = writes
    if not reads:
        raise ValueError(f"{attrs.get('op', 'add')}: add needs at least one operand")
    if len(reads) == 1:
        y[...] = reads[0]
        return
    if cuda_kernels.fast(xp, y, *reads):
        cuda_kernels.add(reads, y)
        return
    xp.add(reads[0], reads[1], out=y)
    for r in reads[2:]:
        y += r


KERNELS = (Kernel("add", forward),)
