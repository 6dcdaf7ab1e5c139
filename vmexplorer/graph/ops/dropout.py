"""Dropout with inverted scaling: y = x * mask / (1 - p), mask ~ Bernoulli(1 - p) as uint8.

reads (x) writes (y, mask); backward reads (mask, dy) writes (dx) = dy * mask / (1 - p).
Backward keeps: mask only, one byte per element where x would be four: dx needs nothing else.
attrs: p (default 0.5); from the run, seed (one stream per layer) and iteration.

The mask comes from a counter-based generator: element i draws splitmix64(key + i * golden gamma), with
the key derived from (seed, iteration). It is stateless, so there is no generator state to set up
per call (CuPy's cuRAND generators initialise hundreds of thousands of states each time), each
iteration draws a fresh mask, a run is reproducible, and numpy and cupy give the same mask bit for bit.
On cupy with float32 data each direction is one CUDA kernel drawing the same mask (cuda_kernels/dropout.py).
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from . import cuda_kernels
from .kernel import Kernel, RunContext
from .recorder import Recorder

Array = Any

_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment
_BITS = 24  # uniform integers in [0, 2^24): exact thresholds for any p a float32 would resolve


def dropout(b: Recorder, x: int, layer: str, p: float = 0.5) -> int:
    """Record a dropout of tensor `x` with drop probability `p` (torchvision's 0.5); returns y."""
    numel = math.prod(b.shape(x))
    y, _ = b.forward("dropout", layer, (x,), (), b.shape(x), 2 * numel, keeps=(-2,),  # -2: the mask
                     backward_flops=numel, input_grad_flops=numel,
                     saved=(("mask", b.shape(x), "uint8"),), attrs=(("p", p),))
    return y


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (x,), (y, mask) = reads, writes
    p = float(attrs.get("p", 0.5))
    k, threshold = key(int(attrs["seed"]), int(attrs.get("iteration", 0))), round(p * (1 << _BITS))
    if cuda_kernels.fast(xp, x, y):  # the same draws and roundings in one pass
        cuda_kernels.dropout_forward(x, y, mask, k, threshold, _scale(p))
        return
    draws = uniform_bits(xp, x.size, k)
    mask[...] = (draws >= xp.uint64(threshold)).reshape(x.shape)
    xp.multiply(x, mask, out=y)
    y *= _scale(p)


def backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    (mask, dy), (dx,) = reads, writes
    if cuda_kernels.fast(xp, dy, dx):
        cuda_kernels.dropout_backward(mask, dy, dx, _scale(float(attrs.get("p", 0.5))))
        return
    xp.multiply(dy, mask, out=dx)
    dx *= _scale(float(attrs.get("p", 0.5)))


def run_settings(layer: str, run: RunContext) -> dict[str, Any]:
    # one stream per layer, stable across models and batch sizes: mix the run seed with the layer name
    return {"seed": (run.seed * 1_000_003 + zlib.crc32(layer.encode())) & 0x7FFF_FFFF_FFFF,
            "iteration": run.iteration}


KERNELS = (Kernel("dropout", forward, ("p",), run_settings), Kernel("dropout_backward", backward, ("p",)))


def key(seed: int, iteration: int) -> int:
    """One well-mixed 64-bit key per (seed, iteration)."""
    return int(np.random.SeedSequence([seed, iteration]).generate_state(1, dtype=np.uint64)[0])


def uniform_bits(xp: Any, n: int, k: int) -> Array:
    """n independent uniform integers in [0, 2^24): splitmix64 over the counter, on xp's device."""
    u = xp.uint64
    z = xp.arange(1, n + 1, dtype=xp.uint64) * u(_GAMMA) + u(k)  # wraps mod 2^64, as intended
    z ^= z >> u(30)
    z *= u(0xBF58476D1CE4E5B9)
    z ^= z >> u(27)
    z *= u(0x94D049BB133111EB)
    z ^= z >> u(31)
    return z >> u(64 - _BITS)


def _scale(p: float) -> float:
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)  # p = 1 drops everything, as PyTorch (not inf * 0)
