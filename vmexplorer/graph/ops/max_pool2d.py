"""Max pooling (NCHW): y = the maximum of each k x k window of x, padding never winning.

reads (x) writes (y); backward reads (x, y, dy) writes (dx).
Backward keeps: x and y, as cuDNN's pooling backward takes them: the argmax is recomputed from them, so
there is no index tensor. Ties route the gradient to the first maximum of the window in row-major
order, as PyTorch does.
attrs: kernel, stride, padding.
On cupy with float32 operands max pooling runs CUDA kernels with the same winners (cuda_kernels/pooling.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cuda_kernels
from .conv2d import out_size, windows
from .kernel import Kernel
from .recorder import Recorder

Array = Any


def max_pool2d(b: Recorder, x: int, layer: str, kernel: int, stride: int, padding: int = 0) -> int:
    """Record a max pooling of tensor `x`; returns y."""
    n, c, h, w = b.shape(x)
    ho, wo = (out_size(b, layer, s, kernel, stride, padding) for s in (h, w))
    out = n * c * ho * wo
    # windows that overlap or leave inputs out: backward finds each window's argmax first, a uint16 per output
    disjoint = stride == kernel and padding == 0 and h == ho * kernel and w == wo * kernel
    y, _ = b.forward("max_pool2d", layer, (x,), (), (n, c, ho, wo), out * kernel * kernel,
                     keeps=(x, -1), backward_flops=out * kernel * kernel + n * c * h * w,
                     input_grad_flops=out * kernel * kernel + n * c * h * w,
                     attrs=(("kernel", kernel), ("stride", stride), ("padding", padding)),
                     backward_scratch=0 if disjoint else 2 * out)
    return y


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (x,), (y,) = reads, writes
    k, s, p = int(attrs["kernel"]), int(attrs["stride"]), int(attrs["padding"])
    if cuda_kernels.fast(xp, x, y):
        cuda_kernels.max_pool2d_forward(x, y, k, s, p)
        return
    xp.max(windows(xp, x, k, s, p, fill=-np.inf), axis=(4, 5), out=y)


def backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    scratch = writes[-1] if attrs.get("scratch") else None  # the graph's workspace tensor for the argmax
    (x, y, dy), (dx,) = reads, writes[:1]
    k, s, p = int(attrs["kernel"]), int(attrs["stride"]), int(attrs["padding"])
    if cuda_kernels.fast(xp, x, y, dy, dx):
        cuda_kernels.max_pool2d_backward(x, y, dy, dx, k, s, p, scratch)
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


KERNELS = (
    Kernel("max_pool2d", forward, ("kernel", "stride", "padding")),
    Kernel("max_pool2d_backward", backward, ("kernel", "stride", "padding")),
)
