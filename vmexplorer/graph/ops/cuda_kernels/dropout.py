"""Dropout, forward and backward, drawing the mask as the numpy body draws it."""

from __future__ import annotations

import numpy as np

from .launch import BLOCK, Array, _check, _grid, _kernel, declare

# Dropout in one pass each way: the mask drawn as dropout.uniform_bits draws it (splitmix64 of the
# counter i + 1 plus the key, top 24 bits against the threshold), y = (x * mask) * scale and
# dx = (dy * mask) * scale rounded as the numpy body rounds them. (cupy's generic body took a dozen
# passes over 64-bit temporaries.)
_DROPOUT = r"""
extern "C" __global__ void dropout_fwd(const float* __restrict__ x, float* __restrict__ y,
                                       unsigned char* __restrict__ mask, unsigned long long n,
                                       unsigned long long key, unsigned long long threshold, float scale) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned long long z = (i + 1ull) * 0x9E3779B97F4A7C15ull + key;
        z ^= z >> 30;
        z *= 0xBF58476D1CE4E5B9ull;
        z ^= z >> 27;
        z *= 0x94D049BB133111EBull;
        z ^= z >> 31;
        const unsigned char m = (z >> 40) >= threshold ? 1 : 0;
        mask[i] = m;
        y[i] = __fmul_rn(__fmul_rn(x[i], (float)m), scale);
    }
}

extern "C" __global__ void dropout_bwd(const unsigned char* __restrict__ mask, const float* __restrict__ dy,
                                       float* __restrict__ dx, unsigned long long n, float scale) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dx[i] = __fmul_rn(__fmul_rn(dy[i], (float)mask[i]), scale);
}
"""


declare("dropout", lambda: _DROPOUT)


def _dropout_check(op: str, a: Array, mask: Array, b: Array) -> int:
    _check(op, a, b)
    if mask.dtype != np.uint8 or not mask.flags.c_contiguous or not (a.size == mask.size == b.size):
        raise ValueError(f"{op}: expected a contiguous uint8 mask the size of the data, got {mask.dtype} "
                         f"{mask.shape} for {a.shape}")
    return int(a.size)


def dropout_forward(x: Array, y: Array, mask: Array, key: int, threshold: int, scale: float) -> None:
    n = _dropout_check("dropout", x, mask, y)
    if n:
        _kernel("dropout", "dropout_fwd")((_grid(n),), (BLOCK,), (x, y, mask, np.uint64(n), np.uint64(key),
                                                                  np.uint64(threshold), np.float32(scale)))


def dropout_backward(mask: Array, dy: Array, dx: Array, scale: float) -> None:
    n = _dropout_check("dropout_backward", dy, mask, dx)
    if n:
        _kernel("dropout", "dropout_bwd")((_grid(n),), (BLOCK,), (mask, dy, dx, np.uint64(n), np.float32(scale)))
