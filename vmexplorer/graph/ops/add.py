"""Elementwise sum: y = reads[0] + reads[1] + ...

Used for the residual add in forward (2 reads) and for summing the gradient parts of a tensor with
several consumers in backward (2 or more reads). The residual add has no backward op: its backward
is the identity, so the graph hands dy to both branches as is.
Backward keeps: nothing.
On cupy with float32 operands: one CUDA kernel per pair, in the same order (cuda_kernels.py).
"""

from __future__ import annotations

from typing import Any

from . import cuda_kernels

Array = Any


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (y,) = writes
    if not reads:
        raise ValueError(f"{attrs.get('op', 'add')}: add needs at least one operand")
    if len(reads) == 1:
        y[...] = reads[0]
        return
    if cuda_kernels.fast(xp, y, *reads):
        cuda_kernels.add(reads, y)
        return
    xp.add(reads[0], reads[1], out=y)
    for r in reads[2:]:
        y += r
