"""Rectified linear unit: y = max(x, 0).

reads (x) writes (y); backward reads (y, dy) writes (dx) = dy where y > 0, else 0 (PyTorch's
threshold_backward on the output: the gradient at exactly 0 is 0).
Backward keeps: y, not x: y > 0 exactly where x > 0, and y is what the next layer reads anyway, so
x is not held for this backward (it dies after the forward unless another layer keeps it).
On cupy with float32 operands each direction is one CUDA kernel (cuda_kernels/elementwise.py).
"""

from __future__ import annotations

import math
from typing import Any

from . import cuda_kernels
from .kernel import Kernel
from .recorder import Recorder

Array = Any


def relu(b: Recorder, x: int, layer: str) -> int:
    """Record a ReLU of tensor `x`; returns y."""
    numel = math.prod(b.shape(x))
    y, _ = b.forward("relu", layer, (x,), (), b.shape(x), numel, keeps=(-1,),  # -1: y, made by this op
                     backward_flops=numel, input_grad_flops=numel)
    return y


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (x,), (y,) = reads, writes
    if cuda_kernels.fast(xp, x, y):
        cuda_kernels.relu_forward(x, y)
        return
    xp.maximum(x, 0, out=y)


def backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (y, dy), (dx,) = reads, writes
    if cuda_kernels.fast(xp, y, dy, dx):
        cuda_kernels.relu_backward(y, dy, dx)
        return
    xp.multiply(dy, y > 0, out=dx)


KERNELS = (Kernel("relu", forward), Kernel("relu_backward", backward))
