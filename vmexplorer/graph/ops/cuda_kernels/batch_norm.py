"""Batch norm in training mode, forward and backward: per-channel sums in double, in a fixed order."""

from __future__ import annotations

import math

import numpy as np

from .launch import BLOCK, STAT_BLOCKS_PER_SM, Array, _aligned, _check, _cp, _grid, _index, _kernel, _sm_count, declare

SMALL_CHANNEL = 16384  # batch norm: channels of at most this many values take the one-kernel path

# Batch norm, training mode, NCHW float32. Per-channel sums go through two deterministic passes instead
# of one block per channel (64 channels would leave half of an H100's 132 SMs idle): a grid of
# (P, C) blocks, block (p, c) summing every P-th run of blockDim elements of channel c into one double
# pair, then one thread per channel adding its P pairs in order. Sums are in double, of x minus the
# channel's first value (shifted data), so E[d^2] - E[d]^2 loses nothing that matters to float32.
# V is float or float4 (when H*W % 4 == 0 and the pointers are 16-byte aligned: a float4 never crosses
# a channel plane); I is the flat index type of the elementwise passes, as for pooling.
_BN = r"""
// Sum a and b over the block in a fixed order (shuffle tree in each warp, then warp 0 over the warps);
// the result is in thread 0. blockDim.x must be a multiple of 32, at most 1024.
__device__ __forceinline__ void block_sum2(double& a, double& b) {
    __shared__ double sa[32], sb[32];
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
    const int lane_id = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane_id == 0) { sa[warp] = a; sb[warp] = b; }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        a = lane_id < warps ? sa[lane_id] : 0.0;
        b = lane_id < warps ? sb[lane_id] : 0.0;
        for (int o = 16; o > 0; o >>= 1) {
            a += __shfl_down_sync(0xffffffffu, a, o);
            b += __shfl_down_sync(0xffffffffu, b, o);
        }
    }
}

// Forward pass 1: block (p, c) sums d = x - shift and d^2 over its elements of channel c, where the
// channel's elements are numbered j = n * hwv + hw (hwv = H*W / lanes) and the block takes
// j = p * blockDim + t, then every P * blockDim. part[c, p] = (sum d, sum d^2).
template <typename V>
__device__ void bn_stats_partial(const V* __restrict__ x, double* __restrict__ part, unsigned int C,
                                 unsigned int hwv, unsigned int mv, unsigned int P) {
    const unsigned int p = blockIdx.x, c = blockIdx.y;
    const double shift = (double)reinterpret_cast<const float*>(x)[(unsigned long long)c * hwv * LANES(V)];
    double s1 = 0.0, s2 = 0.0;
    for (unsigned int j = p * blockDim.x + threadIdx.x; j < mv; j += P * blockDim.x) {
        const unsigned int n = j / hwv, hw = j - n * hwv;
        V v = x[((unsigned long long)n * C + c) * hwv + hw];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) {
            const double d = (double)lane(v, l) - shift;
            s1 += d;
            s2 += d * d;
        }
    }
    block_sum2(s1, s2);
    if (threadIdx.x == 0) {
        part[2ull * (c * P + p)] = s1;
        part[2ull * (c * P + p) + 1] = s2;
    }
}

// Forward pass 2: one thread per channel. Mean and biased variance in double, rounded to float; then
// saved_invstd, and the running statistics with the unbiased variance, rounded as the numpy body
// rounds them: invstd = 1 / sqrt(var + eps); new_mean = keep * running_mean + momentum * mean;
// new_var = keep * running_var + (momentum * var) * unbias (keep = 1 - momentum, unbias = m / (m - 1)).
// running_* and new_* may be the same buffers (the graph updates them in place): each thread reads its
// channel's values before writing them.
__device__ __forceinline__ void bn_finish(unsigned int c, double s1, double s2, double shift, double m, float eps,
                                          float momentum, float keep, float unbias, const float* running_mean,
                                          const float* running_var, float* saved_mean, float* saved_invstd,
                                          float* new_mean, float* new_var) {
    const double d = s1 / m;
    double var = s2 / m - d * d;
    if (var < 0.0) var = 0.0;  // rounding only; a NaN stays NaN
    const float mean = (float)(shift + d);
    const float v = (float)var;
    const float rm = running_mean[c], rv = running_var[c];
    saved_mean[c] = mean;
    saved_invstd[c] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(v, eps)));
    new_mean[c] = __fadd_rn(__fmul_rn(keep, rm), __fmul_rn(momentum, mean));
    new_var[c] = __fadd_rn(__fmul_rn(keep, rv), __fmul_rn(__fmul_rn(momentum, v), unbias));
}

extern "C" __global__ void bn_stats_finalize(const double* __restrict__ part, const float* __restrict__ x,
                                             unsigned int C, unsigned int HW, unsigned int P, double m, float eps,
                                             float momentum, float keep, float unbias, const float* running_mean,
                                             const float* running_var, float* saved_mean, float* saved_invstd,
                                             float* new_mean, float* new_var) {
    const unsigned int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s1 = 0.0, s2 = 0.0;
    for (unsigned int p = 0; p < P; ++p) {
        s1 += part[2ull * (c * P + p)];
        s2 += part[2ull * (c * P + p) + 1];
    }
    bn_finish(c, s1, s2, (double)x[(unsigned long long)c * HW], m, eps, momentum, keep, unbias, running_mean,
              running_var, saved_mean, saved_invstd, new_mean, new_var);
}

// Forward pass 3: y = (x - mean) * (gamma * invstd) + beta, rounded as the numpy body.
template <typename V, typename I>
__device__ void bn_apply(const V* x, const float* __restrict__ mean, const float* __restrict__ invstd,
                         const float* __restrict__ gamma, const float* __restrict__ beta, V* y, I total,
                         unsigned int hwv, unsigned int C) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const unsigned int c = (unsigned int)((i / (I)hwv) % (I)C);
        const float mu = mean[c], scale = __fmul_rn(gamma[c], invstd[c]), b = beta[c];
        V v = x[i];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) lane(v, l) = __fadd_rn(__fmul_rn(__fsub_rn(lane(v, l), mu), scale), b);
        y[i] = v;
    }
}

// Backward pass 1: as forward pass 1, summing dy and dy * xhat (xhat = (x - mean) * invstd in float,
// as the numpy body computes it) in one read of x and dy.
template <typename V>
__device__ void bn_grad_partial(const V* __restrict__ x, const V* __restrict__ dy, const float* __restrict__ mean,
                                const float* __restrict__ invstd, double* __restrict__ part, unsigned int C,
                                unsigned int hwv, unsigned int mv, unsigned int P) {
    const unsigned int p = blockIdx.x, c = blockIdx.y;
    const float mu = mean[c], is = invstd[c];
    double s1 = 0.0, s2 = 0.0;
    for (unsigned int j = p * blockDim.x + threadIdx.x; j < mv; j += P * blockDim.x) {
        const unsigned int n = j / hwv, hw = j - n * hwv;
        const unsigned long long at = ((unsigned long long)n * C + c) * hwv + hw;
        V xv = x[at], g = dy[at];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) {
            const float xhat = __fmul_rn(__fsub_rn(lane(xv, l), mu), is);
            const double gd = (double)lane(g, l);
            s1 += gd;
            s2 += gd * (double)xhat;
        }
    }
    block_sum2(s1, s2);
    if (threadIdx.x == 0) {
        part[2ull * (c * P + p)] = s1;
        part[2ull * (c * P + p) + 1] = s2;
    }
}

// Backward pass 2: one thread per channel, the P pairs in order: dbeta = sum dy, dgamma = sum dy * xhat.
extern "C" __global__ void bn_grad_finalize(const double* __restrict__ part, unsigned int C, unsigned int P,
                                            float* dgamma, float* dbeta) {
    const unsigned int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s1 = 0.0, s2 = 0.0;
    for (unsigned int p = 0; p < P; ++p) {
        s1 += part[2ull * (c * P + p)];
        s2 += part[2ull * (c * P + p) + 1];
    }
    dbeta[c] = (float)s1;
    dgamma[c] = (float)s2;
}

// Backward pass 3 (only when the input needs a gradient):
// dx = (dy - xhat * (dgamma / m) - dbeta / m) * (gamma * invstd), rounded as the numpy body.
template <typename V, typename I>
__device__ void bn_grad_input(const V* x, const V* dy, const float* __restrict__ mean,
                              const float* __restrict__ invstd, const float* __restrict__ gamma,
                              const float* __restrict__ dgamma, const float* __restrict__ dbeta, float m, V* dx,
                              I total, unsigned int hwv, unsigned int C) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const unsigned int c = (unsigned int)((i / (I)hwv) % (I)C);
        const float mu = mean[c], is = invstd[c];
        const float a = __fdiv_rn(dgamma[c], m), b = __fdiv_rn(dbeta[c], m), g = __fmul_rn(gamma[c], is);
        V xv = x[i], gv = dy[i];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) {
            const float xhat = __fmul_rn(__fsub_rn(lane(xv, l), mu), is);
            lane(gv, l) = __fmul_rn(__fsub_rn(__fsub_rn(lane(gv, l), __fmul_rn(xhat, a)), b), g);
        }
        dx[i] = gv;
    }
}

// Small channels (at most SMALL_CHANNEL values, as ResNet's 14x14 and 7x7 layers): the three passes in
// ONE kernel, one block per channel, so a layer costs one launch instead of three (the host's launch
// cost, not the GPU, bounds those layers), and the second read of the channel comes from L2. The sums
// are the partial kernels' with P = 1, in the same fixed order, so the results are deterministic too.
template <typename V>
__device__ void bn_forward_channel(const V* x, V* y, const float* __restrict__ gamma,
                                   const float* __restrict__ beta, const float* running_mean,
                                   const float* running_var, float* saved_mean, float* saved_invstd, float* new_mean,
                                   float* new_var, unsigned int C, unsigned int hwv, unsigned int mv, double m,
                                   float eps, float momentum, float keep, float unbias) {
    __shared__ float s_mean, s_scale;
    const unsigned int c = blockIdx.x;
    const double shift = (double)reinterpret_cast<const float*>(x)[(unsigned long long)c * hwv * LANES(V)];
    double s1 = 0.0, s2 = 0.0;
    for (unsigned int j = threadIdx.x; j < mv; j += blockDim.x) {
        const unsigned int n = j / hwv, hw = j - n * hwv;
        V v = x[((unsigned long long)n * C + c) * hwv + hw];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) {
            const double d = (double)lane(v, l) - shift;
            s1 += d;
            s2 += d * d;
        }
    }
    block_sum2(s1, s2);
    if (threadIdx.x == 0) {
        bn_finish(c, s1, s2, shift, m, eps, momentum, keep, unbias, running_mean, running_var, saved_mean,
                  saved_invstd, new_mean, new_var);
        s_mean = saved_mean[c];
        s_scale = __fmul_rn(gamma[c], saved_invstd[c]);
    }
    __syncthreads();
    const float mu = s_mean, scale = s_scale, b = beta[c];
    for (unsigned int j = threadIdx.x; j < mv; j += blockDim.x) {
        const unsigned int n = j / hwv, hw = j - n * hwv;
        const unsigned long long at = ((unsigned long long)n * C + c) * hwv + hw;
        V v = x[at];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) lane(v, l) = __fadd_rn(__fmul_rn(__fsub_rn(lane(v, l), mu), scale), b);
        y[at] = v;
    }
}

// The backward's three passes in one kernel for small channels, likewise; dx only when has_dx.
template <typename V>
__device__ void bn_backward_channel(const V* x, const V* dy, const float* __restrict__ mean,
                                    const float* __restrict__ invstd, const float* __restrict__ gamma, float* dgamma,
                                    float* dbeta, V* dx, int has_dx, unsigned int C, unsigned int hwv,
                                    unsigned int mv, float m) {
    __shared__ float s_a, s_b;
    const unsigned int c = blockIdx.x;
    const float mu = mean[c], is = invstd[c];
    double s1 = 0.0, s2 = 0.0;
    for (unsigned int j = threadIdx.x; j < mv; j += blockDim.x) {
        const unsigned int n = j / hwv, hw = j - n * hwv;
        const unsigned long long at = ((unsigned long long)n * C + c) * hwv + hw;
        V xv = x[at], g = dy[at];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) {
            const float xhat = __fmul_rn(__fsub_rn(lane(xv, l), mu), is);
            const double gd = (double)lane(g, l);
            s1 += gd;
            s2 += gd * (double)xhat;
        }
    }
    block_sum2(s1, s2);
    if (threadIdx.x == 0) {
        const float db = (float)s1, dg = (float)s2;
        dbeta[c] = db;
        dgamma[c] = dg;
        s_a = __fdiv_rn(dg, m);
        s_b = __fdiv_rn(db, m);
    }
    if (!has_dx) return;
    __syncthreads();
    const float a = s_a, b = s_b, g = __fmul_rn(gamma[c], is);
    for (unsigned int j = threadIdx.x; j < mv; j += blockDim.x) {
        const unsigned int n = j / hwv, hw = j - n * hwv;
        const unsigned long long at = ((unsigned long long)n * C + c) * hwv + hw;
        V xv = x[at], gv = dy[at];
#pragma unroll
        for (int l = 0; l < LANES(V); ++l) {
            const float xhat = __fmul_rn(__fsub_rn(lane(xv, l), mu), is);
            lane(gv, l) = __fmul_rn(__fsub_rn(__fsub_rn(lane(gv, l), __fmul_rn(xhat, a)), b), g);
        }
        dx[at] = gv;
    }
}

#define BN_PARTIALS(V, S)                                                                                     \
extern "C" __global__ void bn_stats_partial_##S(const V* x, double* part, unsigned int C, unsigned int hwv,   \
                                                unsigned int mv, unsigned int P) {                            \
    bn_stats_partial<V>(x, part, C, hwv, mv, P);                                                              \
}                                                                                                             \
extern "C" __global__ void bn_grad_partial_##S(const V* x, const V* dy, const float* mean,                    \
                                               const float* invstd, double* part, unsigned int C,             \
                                               unsigned int hwv, unsigned int mv, unsigned int P) {           \
    bn_grad_partial<V>(x, dy, mean, invstd, part, C, hwv, mv, P);                                             \
}
BN_PARTIALS(float, v1)
BN_PARTIALS(float4, v4)

#define BN_CHANNEL(V, S)                                                                                      \
extern "C" __global__ void bn_forward_channel_##S(const V* x, V* y, const float* gamma, const float* beta,     \
                                                  const float* running_mean, const float* running_var,        \
                                                  float* saved_mean, float* saved_invstd, float* new_mean,    \
                                                  float* new_var, unsigned int C, unsigned int hwv,           \
                                                  unsigned int mv, double m, float eps, float momentum,       \
                                                  float keep, float unbias) {                                 \
    bn_forward_channel<V>(x, y, gamma, beta, running_mean, running_var, saved_mean, saved_invstd, new_mean,   \
                          new_var, C, hwv, mv, m, eps, momentum, keep, unbias);                               \
}                                                                                                             \
extern "C" __global__ void bn_backward_channel_##S(const V* x, const V* dy, const float* mean,                \
                                                   const float* invstd, const float* gamma, float* dgamma,    \
                                                   float* dbeta, V* dx, int has_dx, unsigned int C,           \
                                                   unsigned int hwv, unsigned int mv, float m) {              \
    bn_backward_channel<V>(x, dy, mean, invstd, gamma, dgamma, dbeta, dx, has_dx, C, hwv, mv, m);             \
}
BN_CHANNEL(float, v1)
BN_CHANNEL(float4, v4)

#define BN_ELEMENTWISE(V, I, S)                                                                               \
extern "C" __global__ void bn_apply_##S(const V* x, const float* mean, const float* invstd,                   \
                                        const float* gamma, const float* beta, V* y, I total,                 \
                                        unsigned int hwv, unsigned int C) {                                   \
    bn_apply<V, I>(x, mean, invstd, gamma, beta, y, total, hwv, C);                                           \
}                                                                                                             \
extern "C" __global__ void bn_grad_input_##S(const V* x, const V* dy, const float* mean, const float* invstd,  \
                                             const float* gamma, const float* dgamma, const float* dbeta,     \
                                             float m, V* dx, I total, unsigned int hwv, unsigned int C) {     \
    bn_grad_input<V, I>(x, dy, mean, invstd, gamma, dgamma, dbeta, m, dx, total, hwv, C);                     \
}
BN_ELEMENTWISE(float, unsigned int, v1_i32)
BN_ELEMENTWISE(float, unsigned long long, v1_i64)
BN_ELEMENTWISE(float4, unsigned int, v4_i32)
BN_ELEMENTWISE(float4, unsigned long long, v4_i64)
"""


declare("bn", lambda: _BN)


def _bn_layout(op: str, x: Array, channel_arrays: list[Array], elementwise: list[Array]) -> tuple[int, int, int, int]:
    """(C, H*W, lanes, P): float4 lanes when H*W % 4 == 0 and the big arrays are 16-byte aligned."""
    _check(op, x, *channel_arrays, *elementwise)
    if x.ndim != 4:
        raise ValueError(f"{op}: expected NCHW input, got shape {x.shape}")
    n, c, h, w = (int(v) for v in x.shape)
    if any(a.size != c for a in channel_arrays):
        raise ValueError(f"{op}: per-channel operands must have {c} values, got "
                         f"{[tuple(a.shape) for a in channel_arrays]}")
    if any(a.shape != x.shape for a in elementwise):
        raise ValueError(f"{op}: operands must have the input's shape {x.shape}, got "
                         f"{[tuple(a.shape) for a in elementwise]}")
    hw = h * w
    if n * hw >= 2**31 or c > 65535:
        raise ValueError(f"{op}: {x.shape} is beyond the kernel's limits (N*H*W < 2^31, C <= 65535)")
    lanes = 4 if hw % 4 == 0 and _aligned(x, *elementwise) else 1
    mv = n * hw // lanes
    # enough blocks for about one full wave, but at least 4 loads per thread in each block
    p = max(1, min(math.ceil(_sm_count() * STAT_BLOCKS_PER_SM / c), mv // (BLOCK * 4)))
    return c, hw, lanes, p


def batch_norm_forward(x: Array, gamma: Array, beta: Array, running_mean: Array, running_var: Array, y: Array,
                       saved_mean: Array, saved_invstd: Array, new_mean: Array, new_var: Array, eps: float,
                       momentum: float) -> None:
    cp = _cp()
    c, hw, lanes, parts = _bn_layout("batch_norm2d", x, [gamma, beta, running_mean, running_var, saved_mean,
                                                         saved_invstd, new_mean, new_var], [y])
    m = x.size // c
    hwv, mv = hw // lanes, m // lanes
    v = f"v{lanes}"
    u32 = np.uint32
    stats = (np.float64(m), np.float32(eps), np.float32(momentum), np.float32(1.0 - momentum), np.float32(m / (m - 1)))
    if m <= SMALL_CHANNEL:
        _kernel("bn", f"bn_forward_channel_{v}")(
            (c,), (BLOCK,), (x, y, gamma, beta, running_mean, running_var, saved_mean, saved_invstd, new_mean, new_var,
                             u32(c), u32(hwv), u32(mv), *stats))
        return
    part = cp.empty(2 * c * parts, dtype=cp.float64)  # stream-ordered pool: freeing it right away is safe
    _kernel("bn", f"bn_stats_partial_{v}")((parts, c), (BLOCK,), (x, part, u32(c), u32(hwv), u32(mv), u32(parts)))
    _kernel("bn", "bn_stats_finalize")(
        (-(-c // 128),), (128,),
        (part, x, u32(c), u32(hw), u32(parts), *stats, running_mean, running_var, saved_mean, saved_invstd,
         new_mean, new_var))
    suffix, itype = _index(x)
    units = x.size // lanes
    _kernel("bn", f"bn_apply_{v}_{suffix}")(
        (_grid(units),), (BLOCK,), (x, saved_mean, saved_invstd, gamma, beta, y, itype(units), u32(hwv), u32(c)))


def batch_norm_backward(x: Array, gamma: Array, mean: Array, invstd: Array, dy: Array, dx: Array | None,
                        dgamma: Array, dbeta: Array) -> None:
    cp = _cp()
    c, hw, lanes, parts = _bn_layout("batch_norm2d_backward", x, [gamma, mean, invstd, dgamma, dbeta],
                                     [dy] + ([dx] if dx is not None else []))
    m = x.size // c
    hwv, mv = hw // lanes, m // lanes
    v = f"v{lanes}"
    u32 = np.uint32
    if m <= SMALL_CHANNEL:
        _kernel("bn", f"bn_backward_channel_{v}")(
            (c,), (BLOCK,), (x, dy, mean, invstd, gamma, dgamma, dbeta, dy if dx is None else dx,
                             np.int32(dx is not None), u32(c), u32(hwv), u32(mv), np.float32(m)))
        return
    part = cp.empty(2 * c * parts, dtype=cp.float64)
    _kernel("bn", f"bn_grad_partial_{v}")(
        (parts, c), (BLOCK,), (x, dy, mean, invstd, part, u32(c), u32(hwv), u32(mv), u32(parts)))
    _kernel("bn", "bn_grad_finalize")((-(-c // 128),), (128,), (part, u32(c), u32(parts), dgamma, dbeta))
    if dx is not None:
        suffix, itype = _index(x)
        units = x.size // lanes
        _kernel("bn", f"bn_grad_input_{v}_{suffix}")(
            (_grid(units),), (BLOCK,),
            (x, dy, mean, invstd, gamma, dgamma, dbeta, np.float32(m), dx, itype(units), u32(hwv), u32(c)))
