"""Adaptive average pooling (NCHW) to size x size: each output averages one window of x, the windows
spread over x as evenly as the sizes allow. Where x already has the output's size (VGG and AlexNet at
224 px) the pooling is a copy, and to 1 x 1 (ResNet) a mean over each plane: neither takes the matmuls.

PyTorch's window rule: output i averages rows floor(i*H/out) .. ceil((i+1)*H/out) - 1, which also
holds when out > H (windows then repeat rows). The pooling is separable, so it is two small
matmuls with averaging matrices: y = A_h @ x @ A_w^T.
reads (x) writes (y); backward reads (dy) writes (dx).
Backward keeps: nothing: the pooling is linear, so dx depends on dy alone, and x's size is dx's shape.
attrs: size, for the reader; the kernels take it from the output's shape.
"""

from __future__ import annotations

from typing import Any

from .kernel import Kernel
from .recorder import Recorder

Array = Any


def adaptive_avg_pool2d(b: Recorder, x: int, layer: str, size: int) -> int:
    """Record an adaptive average pooling of tensor `x` to size x size; returns y."""
    n, c, h, w = b.shape(x)
    work = n * c * max(h * w, size * size)
    y, _ = b.forward("adaptive_avg_pool2d", layer, (x,), (), (n, c, size, size), work, keeps=(),
                     backward_flops=work, input_grad_flops=work, attrs=(("size", size),))
    return y


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (x,), (y,) = reads, writes
    if x.shape == y.shape:  # every window is one value: a copy
        y[...] = x
        return
    if y.shape[2:] == (1, 1):  # one window, the whole plane: its mean
        xp.mean(x.reshape(*x.shape[:2], -1), axis=2, out=y.reshape(y.shape[:2]))
        return
    ah = _averaging(xp, x.shape[2], y.shape[2], x.dtype)
    aw = _averaging(xp, x.shape[3], y.shape[3], x.dtype)
    xp.matmul(xp.matmul(ah, x), aw.T, out=y)


def backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (dy,), (dx,) = reads, writes
    if dx.shape == dy.shape:
        dx[...] = dy
        return
    if dy.shape[2:] == (1, 1):  # each input had a 1 / (H * W) share of its plane's mean
        xp.divide(xp.broadcast_to(dy, dx.shape), dx.shape[2] * dx.shape[3], out=dx)
        return
    ah = _averaging(xp, dx.shape[2], dy.shape[2], dy.dtype)
    aw = _averaging(xp, dx.shape[3], dy.shape[3], dy.dtype)
    xp.matmul(xp.matmul(ah.T, dy), aw, out=dx)


# the output's shape says it all: no attrs needed
KERNELS = (Kernel("adaptive_avg_pool2d", forward), Kernel("adaptive_avg_pool2d_backward", backward))


def _averaging(xp: Any, size: int, out: int, dtype: Any) -> Array:
    """(out, size) matrix whose row i averages window i; built on the device, so no host copy or sync."""
    i = xp.arange(out).reshape(-1, 1)
    r = xp.arange(size).reshape(1, -1)
    start, end = (i * size) // out, -((-(i + 1) * size) // out)
    inside = (r >= start) & (r < end)
    return (inside / (end - start)).astype(dtype)
