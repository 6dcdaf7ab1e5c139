"""SGD with momentum, PyTorch's semantics (dampening 0, no Nesterov), for all parameters of a layer.

reads (W1, dW1, m1, W2, dW2, m2, ...) writes (W1, m1, W2, m2, ...), updated in place:
    g = dW + weight_decay * W;  m = momentum * m + g;  W = W - lr * m
PyTorch creates the momentum buffer on the first step as a copy of g. We start from a buffer of
zeros instead (the engine must zero-fill momentum buffers once): momentum * 0 + g == g exactly in
floating point, so every step matches PyTorch bit for bit in the math, with no first-step flag to
carry per iteration and no special case in the kernel. (This holds because dampening is 0; with
dampening PyTorch's first step skips it and a flag would be needed.)
Backward keeps: nothing (this is the update; it has no backward).
attrs: lr, momentum, weight_decay, all from the run.
On cupy with float32 operands: one CUDA kernel per (W, dW, m), rounding as numpy does (cuda_kernels/elementwise.py).
"""

from __future__ import annotations

import math
from typing import Any

from ..graph import Phase
from . import cuda_kernels
from .kernel import Kernel, RunContext
from .recorder import Recorder

Array = Any


def sgd_momentum(b: Recorder, layer: str, weights: tuple[int, ...], grads: tuple[int, ...],
                 momenta: tuple[int, ...]) -> int:
    """Record the update of a layer's weights from their gradients and momentum buffers; returns the op."""
    reads = tuple(t for w, g, m in zip(weights, grads, momenta) for t in (w, g, m))
    updates = tuple(t for w, m in zip(weights, momenta) for t in (w, m))
    numel = sum(math.prod(b.shape(w)) for w in weights)
    op, _ = b.add_op(f"{layer}.sgd", "sgd_momentum", Phase.UPDATE, layer, reads, [], updates, flops=4 * numel)
    return op


def update(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    if len(reads) % 3 or len(writes) != 2 * len(reads) // 3:
        raise ValueError(f"{attrs.get('op', 'sgd_momentum')}: expects reads (W, dW, m) * k and writes "
                         f"(W, m) * k, got {len(reads)} reads and {len(writes)} writes")
    lr, momentum = float(attrs["lr"]), float(attrs["momentum"])
    weight_decay = float(attrs.get("weight_decay", 0.0))
    if cuda_kernels.fast(xp, *reads, *writes):
        for k in range(len(reads) // 3):
            w, g, m = reads[3 * k:3 * k + 3]
            w_out, m_out = writes[2 * k:2 * k + 2]
            if w_out is not w:  # the graph updates in place; distinct buffers start as copies
                w_out[...] = w
            if m_out is not m:
                m_out[...] = m
            cuda_kernels.sgd_momentum(w_out, g, m_out, lr, momentum, weight_decay)
        return
    for k in range(len(reads) // 3):
        w, g, m = reads[3 * k:3 * k + 3]
        w_out, m_out = writes[2 * k:2 * k + 2]
        if weight_decay:
            g = g + weight_decay * w
        xp.multiply(m, momentum, out=m_out)
        m_out += g
        if w_out is not w:
            w_out[...] = w
        w_out -= lr * m_out


def run_settings(layer: str, run: RunContext) -> dict[str, Any]:
    return {"lr": run.lr, "momentum": run.momentum, "weight_decay": run.weight_decay}


KERNELS = (Kernel("sgd_momentum", update, (), run_settings),)
