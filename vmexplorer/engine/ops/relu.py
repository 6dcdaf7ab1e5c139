"""Rectified linear unit: y = max(x, 0).

reads (x) writes (y); backward reads (y, dy) writes (dx) = dy where y > 0, else 0 (PyTorch's
threshold_backward on the output: the gradient at exactly 0 is 0).
Backward keeps: y, as `layers.relu` declares (the output, not the input, so x may be freed).
"""

from __future__ import annotations

from typing import Any

Array = Any


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (x,), (y,) = reads, writes
    xp.maximum(x, 0, out=y)


def backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (y, dy), (dx,) = reads, writes
    xp.multiply(dy, y > 0, out=dx)
