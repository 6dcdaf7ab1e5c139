"""The math of every graph op, forward and backward, written once against an array module `xp`.

`OPS[kind](xp, reads, writes, attrs)` runs graph op kind `kind`: `reads` and `writes` are the arrays of
the op's `reads` and `writes` tensor ids, in that order, and results go into the preallocated
`writes` in place (scratch temporaries are allowed, new outputs are not). `xp` is numpy on the CPU
and cupy on the GPU; cupy and the cuDNN frontend are imported only inside GPU paths. `attrs` is a
plain dict, normally from `attrs.op_attrs(graph, op_index, ...)`.

One module per op family, forward and backward side by side, each saying what its backward keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import add, batch_norm, conv2d, dropout, linear, loss, pooling, relu, sgd
from .attrs import AttrsError, op_attrs

OpFn = Callable[[Any, list[Any], list[Any], dict[str, Any]], None]

OPS: dict[str, OpFn] = {
    "conv2d": conv2d.forward,
    "conv2d_backward": conv2d.backward,
    "linear": linear.forward,
    "linear_backward": linear.backward,
    "relu": relu.forward,
    "relu_backward": relu.backward,
    "max_pool2d": pooling.max_pool2d_forward,
    "max_pool2d_backward": pooling.max_pool2d_backward,
    "adaptive_avg_pool2d": pooling.adaptive_avg_pool2d_forward,
    "adaptive_avg_pool2d_backward": pooling.adaptive_avg_pool2d_backward,
    "batch_norm2d": batch_norm.forward,
    "batch_norm2d_backward": batch_norm.backward,
    "dropout": dropout.forward,
    "dropout_backward": dropout.backward,
    "add": add.forward,
    "softmax_cross_entropy": loss.forward,
    "sgd_momentum": sgd.forward,
}

__all__ = ["OPS", "OpFn", "AttrsError", "op_attrs"]
