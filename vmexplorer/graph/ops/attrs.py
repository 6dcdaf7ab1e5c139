"""The attributes each op's kernel needs, as a plain dict: what the graph records plus the run's settings.

The graph records per-op attributes (kernel, stride, padding, flags) in `Op.attrs`, set by the layer
functions and copied onto their backward ops (docs/proposals/op-attrs.patch). They cannot be derived
from shapes: AlexNet's first convolution gives 55x55 from 224x224 with padding 2 or 3 alike.
Run settings that are not part of the graph (learning rate, seeds, the iteration, TF32) are merged in
here, so the engine calls one function per op and the ops stay pure functions of their arguments.
"""

from __future__ import annotations

import zlib
from typing import Any

from ..graph import Graph

# what each op kind's kernel reads from its attrs; missing recorded attrs are an error, not a guess
REQUIRED: dict[str, tuple[str, ...]] = {
    "conv2d": ("kernel", "stride", "padding", "bias"),
    "conv2d_backward": ("kernel", "stride", "padding", "bias", "input_grad"),
    "linear": ("bias",),
    "linear_backward": ("bias", "input_grad"),
    "max_pool2d": ("kernel", "stride", "padding"),
    "max_pool2d_backward": ("kernel", "stride", "padding"),
    "adaptive_avg_pool2d": (), "adaptive_avg_pool2d_backward": (),  # the output shape says it all
    "batch_norm2d": ("eps", "momentum"),
    "batch_norm2d_backward": ("input_grad",),
    "dropout": ("p",),
    "dropout_backward": ("p",),
    "relu": (), "relu_backward": (), "add": (), "softmax_cross_entropy": (), "sgd_momentum": (),
}


class AttrsError(ValueError):
    """An op lacks the attributes its kernel needs."""


def op_attrs(graph: Graph, op_index: int, *, iteration: int = 0, seed: int = 0, lr: float = 0.01,
             momentum: float = 0.9, weight_decay: float = 0.0, allow_tf32: bool = True,
             deterministic: bool = False, autotune: bool = False) -> dict[str, Any]:
    """Attributes of graph op `op_index` for iteration `iteration` of a run with the given settings."""
    op = graph.ops[op_index]
    recorded = dict(getattr(op, "attrs", ()))
    if op.kind not in REQUIRED:
        raise AttrsError(f"op {op_index} ({op.name}): no kernel for kind {op.kind!r}; "
                         f"known kinds: {', '.join(sorted(REQUIRED))}")
    missing = [k for k in REQUIRED[op.kind] if k not in recorded]
    if missing:
        hint = ("the graph records no op attributes: apply docs/proposals/op-attrs.patch"
                if not hasattr(op, "attrs") else "its layer function must record them")
        raise AttrsError(f"op {op_index} ({op.name}, {op.kind}) lacks attrs {', '.join(missing)}; {hint}")
    attrs: dict[str, Any] = {"op": op.name, **recorded}
    if op.kind in ("conv2d", "conv2d_backward", "linear", "linear_backward"):
        attrs["allow_tf32"] = allow_tf32
        attrs["deterministic"] = deterministic
        attrs["autotune"] = autotune
    elif op.kind == "dropout":
        # one stream per layer, stable across models and batch sizes: mix the run seed with the layer name
        attrs["seed"] = (seed * 1_000_003 + zlib.crc32(op.layer.encode())) & 0x7FFF_FFFF_FFFF
        attrs["iteration"] = iteration
    elif op.kind == "sgd_momentum":
        attrs.update(lr=lr, momentum=momentum, weight_decay=weight_decay)
    return attrs
