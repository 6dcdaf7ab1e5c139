"""Softmax cross-entropy with mean reduction over the batch (PyTorch's F.cross_entropy defaults).

reads (logits (N, classes), labels (N,) int32) writes (loss (), dlogits (N, classes)).
The gradient is written in the same op, dlogits = (softmax(logits) - onehot(labels)) / N, so the graph
has no loss-backward op.
Backward keeps: nothing (the loss op is its own backward: the softmax never outlives it).
"""

from __future__ import annotations

from typing import Any

from ..graph import Kind, Phase
from .kernel import Kernel
from .recorder import Recorder

Array = Any


def softmax_cross_entropy(b: Recorder, logits: int, labels: int) -> tuple[int, int]:
    """Record the loss of tensor `logits` against `labels`; returns (loss, gradient of the logits)."""
    n, classes = b.shape(logits)
    _, (loss, dlogits) = b.add_op(
        "loss", "softmax_cross_entropy", Phase.LOSS, "loss", (logits, labels),
        [("loss.value", Kind.ACTIVATION, (), "float32"),
         (f"{b.name(logits)}.grad", Kind.GRADIENT, b.shape(logits), "float32")],
        flops=6 * n * classes)
    return loss, dlogits


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (logits, labels), (loss, dlogits) = reads, writes
    n = logits.shape[0]
    rows = xp.arange(n)
    labels = labels.astype(xp.int64)
    # log-softmax through the row maximum: exp never overflows
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    loss[...] = -log_probs[rows, labels].mean()
    xp.exp(log_probs, out=dlogits)
    dlogits[rows, labels] -= 1.0
    dlogits /= n


KERNELS = (Kernel("softmax_cross_entropy", forward),)
