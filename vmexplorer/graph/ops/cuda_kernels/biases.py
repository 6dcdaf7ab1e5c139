"""The convolution and linear biases: added in place, and their gradient summed per channel in a fixed order."""

from __future__ import annotations

import math

import numpy as np

from .launch import BLOCK, STAT_BLOCKS_PER_SM, Array, _aligned, _check, _cp, _grid, _index, _kernel, _sm_count, declare

# Convolution and linear biases, NCHW (or (N, C), hwv = 1), V float or float4 as for batch norm.
# bias_add: y += b[c] in place, one rounding as numpy's `y += b`. channel_sum: db[c] = the sum of dy over
# (N, H, W) in double, by blocks (p, c) as bn_stats_partial, then one thread per channel adding its P
# partial sums in order: fixed order, no atomics (cupy's reduction over axes (0, 2, 3) took 3 ms for
# VGG-19's first layer at batch 64, where one pass over dy takes 0.2).
_BIAS = r"""
template <typename V, typename I>
__device__ void bias_add(V* y, const float* __restrict__ b, I total, unsigned int hwv, unsigned int C) {
    const I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float bc = b[(unsigned int)((i / hwv) % C)];
        V v = y[i];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) lane(v, l) = __fadd_rn(lane(v, l), bc);
        y[i] = v;
    }
}

// the sum of a over the block in a fixed order (as block_sum2 in the batch-norm source); thread 0 has it
__device__ __forceinline__ void block_sum1(double& a) {
    __shared__ double sa[32];
    for (int o = 16; o > 0; o >>= 1) a += __shfl_down_sync(0xffffffffu, a, o);
    const int lane_id = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane_id == 0) sa[warp] = a;
    __syncthreads();
    if (warp == 0) {
        a = lane_id < (int)(blockDim.x >> 5) ? sa[lane_id] : 0.0;
        for (int o = 16; o > 0; o >>= 1) a += __shfl_down_sync(0xffffffffu, a, o);
    }
}

template <typename V>
__device__ void channel_sum_partial(const V* __restrict__ x, double* __restrict__ part, unsigned int C,
                                    unsigned int hwv, unsigned int mv, unsigned int P) {
    const unsigned int p = blockIdx.x, c = blockIdx.y;
    double s = 0.0;
    for (unsigned int j = p * blockDim.x + threadIdx.x; j < mv; j += P * blockDim.x) {
        const unsigned int n = j / hwv, hw = j - n * hwv;
        V v = x[((unsigned long long)n * C + c) * hwv + hw];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) s += (double)lane(v, l);
    }
    block_sum1(s);
    if (threadIdx.x == 0) part[(unsigned long long)c * P + p] = s;
}

extern "C" __global__ void channel_sum_finalize(const double* __restrict__ part, unsigned int C, unsigned int P,
                                                float* __restrict__ out) {
    const unsigned int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0;
    for (unsigned int p = 0; p < P; ++p) s += part[(unsigned long long)c * P + p];
    out[c] = (float)s;
}

#define BIAS_ADD(V, I, S)                                                                                     \
extern "C" __global__ void bias_add_##S(V* y, const float* b, I total, unsigned int hwv, unsigned int C) {    \
    bias_add<V, I>(y, b, total, hwv, C);                                                                      \
}
BIAS_ADD(float, unsigned int, v1_i32)
BIAS_ADD(float, unsigned long long, v1_i64)
BIAS_ADD(float4, unsigned int, v4_i32)
BIAS_ADD(float4, unsigned long long, v4_i64)
#define CHANNEL_SUM(V, S)                                                                                     \
extern "C" __global__ void channel_sum_partial_##S(const V* x, double* part, unsigned int C, unsigned int hwv, \
                                                   unsigned int mv, unsigned int P) {                         \
    channel_sum_partial<V>(x, part, C, hwv, mv, P);                                                           \
}
CHANNEL_SUM(float, v1)
CHANNEL_SUM(float4, v4)
"""


declare("bias", lambda: _BIAS)


def _channels(op: str, y: Array, b: Array) -> tuple[int, int, int]:
    """(C, H*W, lanes) of an NCHW or (N, C) array and its per-channel vector; float4 lanes when H*W % 4 == 0
    and y is 16-byte aligned, so no float4 crosses a channel plane."""
    _check(op, y, b)
    if y.ndim not in (2, 4) or b.size != y.shape[1]:
        raise ValueError(f"{op}: expected (N, C, H, W) or (N, C) and C values, got {y.shape} and {b.shape}")
    c = int(y.shape[1])
    hw = int(y.shape[2] * y.shape[3]) if y.ndim == 4 else 1
    return c, hw, 4 if hw % 4 == 0 and _aligned(y) else 1


def bias_add(y: Array, b: Array) -> None:
    """y += b per channel (axis 1), in place."""
    c, hw, lanes = _channels("bias_add", y, b)
    if y.size == 0:
        return
    suffix, itype = _index(y)
    units = y.size // lanes
    _kernel("bias", f"bias_add_v{lanes}_{suffix}")(
        (_grid(units),), (BLOCK,), (y, b, itype(units), np.uint32(hw // lanes), np.uint32(c)))


def channel_sum(dy: Array, out: Array) -> None:
    """out[c] = the sum of dy over every axis but 1, deterministic; beyond the kernel's 32-bit counts
    (N*H*W >= 2^31 or C > 65535) cupy's own reduction does it."""
    cp = _cp()
    c, hw, lanes = _channels("channel_sum", dy, out)
    m = dy.size // c if c else 0
    if m == 0 or m >= 2**31 or c > 65535:
        cp.sum(dy, axis=tuple(a for a in range(dy.ndim) if a != 1), out=out)
        return
    mv = m // lanes
    parts = max(1, min(math.ceil(_sm_count() * STAT_BLOCKS_PER_SM / c), mv // (BLOCK * 4)))
    part = cp.empty(c * parts, dtype=cp.float64)  # stream-ordered pool: freeing it right away is safe
    u32 = np.uint32
    _kernel("bias", f"channel_sum_partial_v{lanes}")(
        (parts, c), (BLOCK,), (dy, part, u32(c), u32(hw // lanes), u32(mv), u32(parts)))
    _kernel("bias", "channel_sum_finalize")((-(-c // 128),), (128,), (part, u32(c), u32(parts), out))
