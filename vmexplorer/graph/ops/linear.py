"""Fully connected layer: y = x W^T + b, with x flattened to (N, -1) as a view (torchvision's flatten).

reads (x, W[, b]) writes (y); backward reads (x, W, dy) writes ([dx], dW[, db]).
Backward keeps: x (for dW) and W (for dx); y is not needed.
attrs: bias (true in the built-in models; false for an imported Gemm or MatMul without one); backward also
input_grad; allow_tf32, deterministic and autotune from the run, as for convolutions.
"""

from __future__ import annotations

import math
from typing import Any

from . import cuda_kernels
from .kernel import Kernel, run_numerics
from .recorder import Recorder

Array = Any


def linear(b: Recorder, x: int, layer: str, out_features: int, bias: bool = True) -> int:
    """Record a fully connected layer over tensor `x` with new weights (and bias); returns y."""
    n = b.shape(x)[0]
    in_features = math.prod(b.shape(x)) // n  # flatten is a view: no op, no copy
    weight = b.param(layer, "weight", (out_features, in_features))
    params = (weight, b.param(layer, "bias", (out_features,))) if bias else (weight,)
    macs = n * in_features * out_features
    bias_flops = n * out_features if bias else 0
    y, _ = b.forward("linear", layer, (x,), params, (n, out_features), 2 * macs + bias_flops,
                     keeps=(x, weight), backward_flops=4 * macs + bias_flops,
                     input_grad_flops=2 * macs, attrs=(("bias", bias),))
    return y


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    bias = bool(attrs.get("bias", True))
    _expect(attrs, "linear", len(reads), 2 + bias, len(writes), 1)
    x, w = reads[0], reads[1]
    (y,) = writes
    xp.matmul(_rows(x), w.T, out=y)
    if bias:
        _add_bias(xp, y, reads[2])


def backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    bias, input_grad = bool(attrs.get("bias", True)), bool(attrs["input_grad"])
    _expect(attrs, "linear_backward", len(reads), 3, len(writes), 1 + bias + input_grad)
    x, w, dy = reads
    if input_grad:
        xp.matmul(dy, w, out=_rows(writes[0]))  # dx has x's (maybe 4-D) shape; fill it through a view
    xp.matmul(dy.T, _rows(x), out=writes[1 if input_grad else 0])
    if bias:
        if cuda_kernels.fast(xp, dy, writes[-1]):
            cuda_kernels.channel_sum(dy, writes[-1])  # deterministic, summed in double
        else:
            xp.sum(dy, axis=0, out=writes[-1])


def _add_bias(xp: Any, y: Array, b: Array) -> None:
    if cuda_kernels.fast(xp, y, b):
        cuda_kernels.bias_add(y, b)  # the same rounding, one pass with no broadcasting machinery
    else:
        y += b


KERNELS = (
    Kernel("linear", forward, ("bias",), run_numerics),
    Kernel("linear_backward", backward, ("bias", "input_grad"), run_numerics),
)


def _rows(a: Array) -> Array:
    """(N, ...) -> (N, features) as a view; refuse a copy, which would drop an out= result on the floor."""
    if not a.flags.c_contiguous:
        raise ValueError(f"linear: expects C-contiguous buffers, got shape {a.shape} with strides {a.strides}")
    return a.reshape(a.shape[0], -1)


def _expect(attrs: dict[str, Any], kind: str, n_reads: int, want_reads: int, n_writes: int,
            want_writes: int) -> None:
    if n_reads != want_reads or n_writes != want_writes:
        raise ValueError(f"{attrs.get('op', kind)}: {kind} expects {want_reads} reads and {want_writes} writes "
                         f"(bias={attrs.get('bias', True)}, input_grad={attrs.get('input_grad')}), "
                         f"got {n_reads} and {n_writes}")
