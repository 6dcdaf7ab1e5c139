"""Max pooling and adaptive average pooling (NCHW), forward and backward.

max_pool2d reads (x) writes (y); backward reads (x, y, dy) writes (dx).
Backward keeps: x and y (cuDNN-style: the argmax is recomputed from them, no index tensor).
Ties route the gradient to the first maximum of the window in row-major order, as PyTorch does.
attrs: kernel, stride, padding.
On cupy with float32 operands max pooling runs CUDA kernels with the same winners (cuda_kernels.py).

adaptive_avg_pool2d reads (x) writes (y); backward reads (dy) writes (dx).
Backward keeps: nothing (the input's size is the shape of dx).
PyTorch's window rule: output i averages rows floor(i*H/out) .. ceil((i+1)*H/out) - 1, which also
holds when out > H (windows then repeat rows). The pooling is separable, so it is two small
matmuls with averaging matrices: y = A_h @ x @ A_w^T.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cuda_kernels
from .conv2d import windows

Array = Any


def max_pool2d_forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (x,), (y,) = reads, writes
    k, s, p = int(attrs["kernel"]), int(attrs["stride"]), int(attrs["padding"])
    if cuda_kernels.fast(xp, x, y):
        cuda_kernels.max_pool2d_forward(x, y, k, s, p)
        return
    xp.max(windows(xp, x, k, s, p, fill=-np.inf), axis=(4, 5), out=y)


def max_pool2d_backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (x, y, dy), (dx,) = reads, writes
    k, s, p = int(attrs["kernel"]), int(attrs["stride"]), int(attrs["padding"])
    if cuda_kernels.fast(xp, x, y, dy, dx):
        cuda_kernels.max_pool2d_backward(x, y, dy, dx, k, s, p)
        return
    n, c, h, w = x.shape
    ho, wo = y.shape[2], y.shape[3]
    win = windows(xp, x, k, s, p, fill=-np.inf).reshape(n, c, ho, wo, k * k)
    first = xp.argmax((win == y[..., None]).view(xp.uint8), axis=-1)  # argmax picks the first hit
    grad = xp.zeros((n, c, h + 2 * p, w + 2 * p), dtype=dx.dtype)
    for idx in range(k * k):  # overlapping windows (stride < kernel) add up at shared inputs
        i, j = divmod(idx, k)
        grad[:, :, i:i + s * (ho - 1) + 1:s, j:j + s * (wo - 1) + 1:s] += xp.where(first == idx, dy, 0)
    dx[...] = grad[:, :, p:p + h, p:p + w]


def adaptive_avg_pool2d_forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (x,), (y,) = reads, writes
    ah = _averaging(xp, x.shape[2], y.shape[2], x.dtype)
    aw = _averaging(xp, x.shape[3], y.shape[3], x.dtype)
    xp.matmul(xp.matmul(ah, x), aw.T, out=y)


def adaptive_avg_pool2d_backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (dy,), (dx,) = reads, writes
    ah = _averaging(xp, dx.shape[2], dy.shape[2], dy.dtype)
    aw = _averaging(xp, dx.shape[3], dy.shape[3], dy.dtype)
    xp.matmul(xp.matmul(ah.T, dy), aw, out=dx)


def _averaging(xp: Any, size: int, out: int, dtype: Any) -> Array:
    """(out, size) matrix whose row i averages window i; built on the device, so no host copy or sync."""
    i = xp.arange(out).reshape(-1, 1)
    r = xp.arange(size).reshape(1, -1)
    start, end = (i * size) // out, -((-(i + 1) * size) // out)
    inside = (r >= start) & (r < end)
    return (inside / (end - start)).astype(dtype)
