"""Rectified linear unit: y = max(x, 0).

reads (x) writes (y); backward reads (y, dy) writes (dx) = dy where y > 0, else 0 (PyTorch's
threshold_backward on the output: the gradient at exactly 0 is 0).
Backward keeps: y, as `layers.relu` declares (the output, not the input, so x may be freed).
On cupy with float32 operands each direction is one CUDA kernel (cuda_kernels.py).
"""

from __future__ import annotations

from typing import Any

from . import cuda_kernels

Array = Any


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
