"""Softmax cross-entropy with mean reduction over the batch (PyTorch's F.cross_entropy defaults).

reads (logits (N, classes), labels (N,) int32) writes (loss (), dlogits (N, classes)).
The gradient is written in the same op, as the graph has no separate loss-backward op:
dlogits = (softmax(logits) - onehot(labels)) / N.
Backward keeps: nothing (the loss op is its own backward).
"""

from __future__ import annotations

from typing import Any

Array = Any


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
