"""Hand-written CUDA kernels for the memory-bound ops, used when the ops run on cupy.

The generic `xp` bodies of relu, add, sgd_momentum, max_pool2d, batch_norm2d, dropout and the
convolution and linear biases are the reference (numpy runs them in CI); on cupy they cost many passes
over memory (bool temporaries, padded window copies, reductions over axes (0, 2, 3)). The kernels here
do each op in the fewest passes, in float32, with the same rounding as the numpy bodies wherever the
numpy body fixes it: `__fmul_rn` and friends keep nvcc from fusing a multiply and an add into one FMA,
which would round once where numpy rounds twice. Every reduction runs in a fixed order with no
atomics, so two runs give the same bits.

Assumptions, checked on entry: float32 operands (the ops fall back to the generic body otherwise),
C-contiguous NCHW arrays, matching shapes. cupy is imported only when a kernel is first needed, and
each source is compiled once per process (cupy also caches the binaries on disk).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Array = Any

BLOCK = 256  # threads per block for every kernel here (a multiple of 32, as block_sum2 needs)
MAX_BLOCKS_PER_SM = 32  # grid-stride kernels launch at most this many blocks per SM
STAT_BLOCKS_PER_SM = 8  # batch-norm partial sums: about one wave of 256-thread blocks
SMALL_CHANNEL = 16384  # batch norm: channels of at most this many values take the one-kernel path

_MODULES: dict[str, Any] = {}  # source name -> compiled cupy.RawModule
_FUNCTIONS: dict[tuple[str, str], Any] = {}  # (source name, kernel name) -> cupy kernel
_SM_COUNT: dict[int, int] = {}  # device id -> multiprocessors


def _cp() -> Any:
    import cupy

    return cupy


def is_cupy(xp: Any) -> bool:
    return getattr(xp, "__name__", "") == "cupy"


_F32 = np.dtype(np.float32)  # a dtype compared with a dtype: no conversion on every call


def fast(xp: Any, *arrays: Array) -> bool:
    """True when an op should take its CUDA kernel: xp is cupy and every operand is float32."""
    return is_cupy(xp) and all(a.dtype == _F32 for a in arrays)


def compiled() -> list[str]:
    """Names of the sources compiled so far in this process (for tests)."""
    return sorted(_MODULES)


# --- CUDA sources -----------------------------------------------------------------------------------
_COMMON = r"""
// float and float4 seen as 1 or 4 lanes, so one template body serves the scalar and the vector path
#define LANES(V) ((int)(sizeof(V) / sizeof(float)))
// x != x is NaN's test (no fast-math here); -inf without math.h's INFINITY, which NVRTC may lack
__device__ __forceinline__ bool is_nan(float v) { return v != v; }
#define NEG_INF __int_as_float(0xff800000)
__device__ __forceinline__ float& lane(float& v, int) { return v; }
__device__ __forceinline__ float& lane(float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
"""

# Elementwise kernels over n floats. The body runs on float4 (one 16-byte load per operand, 4x fewer
# instructions and 4x more bytes in flight than scalar loads) when the host found every pointer 16-byte
# aligned (vec != 0), then a scalar loop takes the n % 4 tail (or everything when vec == 0). No
# __restrict__: an output may be the same buffer as an input (in-place relu, sgd's W and m, add's y += r),
# which is safe because each element is read and written by the same thread.
_FLAT_TEMPLATE = r"""
extern "C" __global__ void {name}({params}, long long n, int vec) {{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n4 = vec ? n / 4 : 0;
    for (long long v = tid; v < n4; v += stride) {{
        {load4}
        {body4}
        {store4}
    }}
    for (long long i = n4 * 4 + tid; i < n; i += stride) {{
        {load1}
        {body1}
        {store1}
    }}
}}
"""

# (name, operands as (name, role), float scalars, per-element function). Roles: "in" is read, "out" is
# written, "inout" is read and written. The element function takes "in" by value, the others by reference.
_FLAT_KERNELS: list[tuple[str, list[tuple[str, str]], list[str], str]] = [
    # y = max(x, 0), NaN kept as numpy's maximum (and PyTorch's relu) keep it
    ("relu_fwd", [("x", "in"), ("y", "out")], [],
     "__device__ __forceinline__ void relu_fwd_op(float x, float& y) { y = (x > 0.0f || is_nan(x)) ? x : 0.0f; }"),
    # dx = dy where y > 0, else 0: one select, no bool temporary (PyTorch's threshold_backward)
    ("relu_bwd", [("y", "in"), ("dy", "in"), ("dx", "out")], [],
     "__device__ __forceinline__ void relu_bwd_op(float y, float dy, float& dx) { dx = y > 0.0f ? dy : 0.0f; }"),
    # y = a + b; more operands chain y = y + r in the same order as the numpy body, so the bits match
    ("add2", [("a", "in"), ("b", "in"), ("y", "out")], [],
     "__device__ __forceinline__ void add2_op(float a, float b, float& y) { y = a + b; }"),
    # PyTorch's SGD with momentum (dampening 0), rounded step by step as the numpy body:
    # g' = g + wd * W (only if wd != 0);  m = m * momentum + g';  W = W - lr * m
    ("sgd_momentum", [("g", "in"), ("w", "inout"), ("m", "inout")], ["lr", "momentum", "wd"],
     "__device__ __forceinline__ void sgd_momentum_op(float g, float& w, float& m, float lr, float momentum, "
     "float wd) {\n"
     "    const float gd = wd != 0.0f ? __fadd_rn(g, __fmul_rn(wd, w)) : g;\n"
     "    m = __fadd_rn(__fmul_rn(m, momentum), gd);\n"
     "    w = __fsub_rn(w, __fmul_rn(lr, m));\n"
     "}"),
]


def _flat_source() -> str:
    parts = []
    for name, operands, scalars, element in _FLAT_KERNELS:
        params = ", ".join([("const float* " if role == "in" else "float* ") + a for a, role in operands]
                           + [f"float {s}" for s in scalars])

        def call(suffix: str, operands: list[tuple[str, str]] = operands, scalars: list[str] = scalars,
                 name: str = name) -> str:
            return f"{name}_op({', '.join([a + suffix for a, _ in operands] + scalars)});"

        load4 = " ".join(f"float4 {a}4 = reinterpret_cast<const float4*>({a})[v];" if role != "out"
                         else f"float4 {a}4;" for a, role in operands)
        store4 = " ".join(f"reinterpret_cast<float4*>({a})[v] = {a}4;" for a, role in operands if role != "in")
        load1 = " ".join(f"float {a}1 = {a}[i];" if role != "out" else f"float {a}1;" for a, role in operands)
        store1 = " ".join(f"{a}[i] = {a}1;" for a, role in operands if role != "in")
        parts.append(element)
        parts.append(_FLAT_TEMPLATE.format(name=name, params=params, load4=load4, store4=store4, load1=load1,
                                           store1=store1, body1=call("1"),
                                           body4=" ".join(call(f"4.{c}") for c in "xyzw")))
    return "\n".join(parts)


# Max pooling, NCHW float32, square window k, stride s, padding p, no dilation, floor mode.
# I is the flat index type: unsigned int when every array has fewer than 2^31 elements (32-bit division
# is several times cheaper than 64-bit), unsigned long long otherwise.
_POOL = r"""
// The window of output (oh, ow), clipped to the input: padding positions never take part, as if -inf.
__device__ __forceinline__ void window(int oh, int ow, int H, int W, int k, int s, int p,
                                       int& hs, int& he, int& ws, int& we) {
    const int h0 = oh * s - p, w0 = ow * s - p;
    hs = max(h0, 0); he = min(h0 + k, H);
    ws = max(w0, 0); we = min(w0 + k, W);
}

// PyTorch's rule: scan row-major, take a value if it is greater than the best so far or NaN, so the
// FIRST maximum wins ties and a NaN wins over numbers (the last NaN, as PyTorch). The argmax (ah, aw)
// starts at the window's first position, as PyTorch's, which only matters for an all -inf window.
__device__ __forceinline__ float window_max(const float* xp, int W, int hs, int he, int ws, int we,
                                           int& ah, int& aw) {
    float best = NEG_INF;
    ah = hs; aw = ws;
    for (int h = hs; h < he; ++h)
        for (int w = ws; w < we; ++w) {
            const float v = xp[h * W + w];
            if (v > best || is_nan(v)) { best = v; ah = h; aw = w; }
        }
    return best;
}

// Forward: one thread per output element scans its window. Consecutive threads take consecutive ow,
// so a warp's loads of one window row are (nearly) coalesced.
template <typename I>
__device__ void max_pool2d_fwd(const float* __restrict__ x, float* __restrict__ y, I total,
                               int H, int W, int Ho, int Wo, int k, int s, int p) {
    for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (I)gridDim.x * blockDim.x) {
        const I t = o / (I)Wo;
        const int ow = (int)(o - t * (I)Wo);
        const I plane = t / (I)Ho;
        const int oh = (int)(t - plane * (I)Ho);
        int hs, he, ws, we, ah, aw;
        window(oh, ow, H, W, k, s, p, hs, he, ws, we);
        y[o] = window_max(x + plane * (I)H * (I)W, W, hs, he, ws, we, ah, aw);
    }
}

// Backward when the windows tile the input exactly (stride == kernel, no padding, H == Ho * k and
// W == Wo * k, as VGG's 2x2 pools): every input lies in exactly one window, so one thread per window
// finds the argmax from x as the forward did and writes the window's whole dx, dy at the argmax and 0
// elsewhere: one pass, no atomics. (0 + dy, as the numpy body's sum, so a -0 dy gives +0 there too.)
template <typename I>
__device__ void max_pool2d_bwd_tiles(const float* __restrict__ x, const float* __restrict__ dy,
                                     float* __restrict__ dx, I total, int H, int W, int Ho, int Wo, int k) {
    for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (I)gridDim.x * blockDim.x) {
        const I t = o / (I)Wo;
        const int ow = (int)(o - t * (I)Wo);
        const I plane = t / (I)Ho;
        const int oh = (int)(t - plane * (I)Ho);
        const I base = plane * (I)H * (I)W;
        const int hs = oh * k, ws = ow * k;
        int ah, aw;
        window_max(x + base, W, hs, hs + k, ws, ws + k, ah, aw);
        const float g = __fadd_rn(0.0f, dy[o]);
        for (int h = hs; h < hs + k; ++h)
            for (int w = ws; w < ws + k; ++w) dx[base + (I)(h * W + w)] = (h == ah && w == aw) ? g : 0.0f;
    }
}

// Backward for overlapping or padded windows, pass 1: one thread per window stores where its argmax
// lies in the window, i * k + j for padded-window row i and column j (k <= 255, so 16 bits hold it),
// found from x exactly as the forward found it.
template <typename I>
__device__ void max_pool2d_argmax(const float* __restrict__ x, unsigned short* __restrict__ arg, I total,
                                  int H, int W, int Ho, int Wo, int k, int s, int p) {
    for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (I)gridDim.x * blockDim.x) {
        const I t = o / (I)Wo;
        const int ow = (int)(o - t * (I)Wo);
        const I plane = t / (I)Ho;
        const int oh = (int)(t - plane * (I)Ho);
        int hs, he, ws, we, ah, aw;
        window(oh, ow, H, W, k, s, p, hs, he, ws, we);
        window_max(x + plane * (I)H * (I)W, W, hs, he, ws, we, ah, aw);
        arg[o] = (unsigned short)((ah - (oh * s - p)) * k + (aw - (ow * s - p)));
    }
}

// Pass 2: one thread per INPUT element gathers dy from every window whose argmax it is, so there are
// no atomics and the sum has a fixed order. Windows are visited with oh, then ow, DESCENDING: the numpy
// body adds the contributions in ascending window offset (i, j), and a larger offset is a smaller
// (oh, ow), so the float sums round alike. S is the stride when it is 1 or 2 (a division by a constant
// is a shift; four divisions by a runtime stride were a third of this kernel's instructions), else 0
// and the runtime s is used.
template <typename I, int S>
__device__ void max_pool2d_bwd_gather(const unsigned short* __restrict__ arg, const float* __restrict__ dy,
                                      float* __restrict__ dx, I total, int H, int W, int Ho, int Wo, int k, int s_,
                                      int p) {
    const int s = S ? S : s_;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I plane = i / ((I)H * (I)W);
        const int r = (int)(i - plane * (I)H * (I)W);  // h * W + w
        const int h = r / W, w = r - h * W;
        const unsigned short* ap = arg + plane * (I)Ho * (I)Wo;
        const float* dyp = dy + plane * (I)Ho * (I)Wo;
        // the windows covering row h: oh * s - p <= h <= oh * s - p + k - 1 (and likewise for columns)
        const int ah = h + p - k + 1, aw = w + p - k + 1;
        const int oh0 = ah <= 0 ? 0 : (ah + s - 1) / s, oh1 = min((h + p) / s, Ho - 1);
        const int ow0 = aw <= 0 ? 0 : (aw + s - 1) / s, ow1 = min((w + p) / s, Wo - 1);
        float acc = 0.0f;
        for (int oh = oh1; oh >= oh0; --oh)
            for (int ow = ow1; ow >= ow0; --ow) {
                const int o = oh * Wo + ow;
                if (ap[o] == (h - (oh * s - p)) * k + (w - (ow * s - p))) acc += dyp[o];
            }
        dx[i] = acc;
    }
}

#define POOL_KERNELS(I, S)                                                                                    \
extern "C" __global__ void max_pool2d_fwd_##S(const float* x, float* y, I total, int H, int W, int Ho, int Wo, \
                                              int k, int s, int p) {                                          \
    max_pool2d_fwd<I>(x, y, total, H, W, Ho, Wo, k, s, p);                                                    \
}                                                                                                             \
extern "C" __global__ void max_pool2d_bwd_tiles_##S(const float* x, const float* dy, float* dx, I total,      \
                                                    int H, int W, int Ho, int Wo, int k) {                    \
    max_pool2d_bwd_tiles<I>(x, dy, dx, total, H, W, Ho, Wo, k);                                               \
}                                                                                                             \
extern "C" __global__ void max_pool2d_argmax_##S(const float* x, unsigned short* arg, I total, int H, int W,  \
                                                 int Ho, int Wo, int k, int s, int p) {                       \
    max_pool2d_argmax<I>(x, arg, total, H, W, Ho, Wo, k, s, p);                                               \
}                                                                                                             \
extern "C" __global__ void max_pool2d_bwd_gather_##S(const unsigned short* arg, const float* dy, float* dx,    \
                                                     I total, int H, int W, int Ho, int Wo, int k, int s,     \
                                                     int p) {                                                 \
    if (s == 1) max_pool2d_bwd_gather<I, 1>(arg, dy, dx, total, H, W, Ho, Wo, k, s, p);                       \
    else if (s == 2) max_pool2d_bwd_gather<I, 2>(arg, dy, dx, total, H, W, Ho, Wo, k, s, p);                  \
    else max_pool2d_bwd_gather<I, 0>(arg, dy, dx, total, H, W, Ho, Wo, k, s, p);                              \
}
POOL_KERNELS(unsigned int, i32)
POOL_KERNELS(unsigned long long, i64)
"""

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


def _source(name: str) -> str:
    if name == "flat":
        return _COMMON + _flat_source()
    return _COMMON + {"pool": _POOL, "bn": _BN, "bias": _BIAS, "dropout": _DROPOUT}[name]


def _kernel(source: str, name: str) -> Any:
    """Kernel `name` of source `source`, compiling the source on first use."""
    key = (source, name)
    fn = _FUNCTIONS.get(key)
    if fn is None:
        module = _MODULES.get(source)
        if module is None:
            module = _MODULES[source] = _cp().RawModule(code=_source(source))
        fn = _FUNCTIONS[key] = module.get_function(name)
    return fn


def _sm_count() -> int:
    cp = _cp()
    dev = cp.cuda.runtime.getDevice()
    if dev not in _SM_COUNT:
        _SM_COUNT[dev] = int(cp.cuda.Device(dev).attributes["MultiProcessorCount"])
    return _SM_COUNT[dev]


def _grid(units: int) -> int:
    return max(1, min(-(-units // BLOCK), _sm_count() * MAX_BLOCKS_PER_SM))


def _aligned(*arrays: Array) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


def _index(*arrays: Array) -> tuple[str, Any]:
    """Kernel suffix and numpy type of the flat index: 32-bit when every array is below 2^31 elements."""
    return ("i32", np.uint32) if max(a.size for a in arrays) < 2**31 else ("i64", np.uint64)


def _check(op: str, *arrays: Array) -> None:
    for a in arrays:
        if a.dtype != _F32 or not a.flags.c_contiguous:
            raise ValueError(f"{op}: the CUDA kernel needs C-contiguous float32 arrays, got {a.dtype} "
                             f"{'contiguous' if a.flags.c_contiguous else 'strided'} {a.shape}")


def _same_size(op: str, arrays: list[Array]) -> int:
    n = int(arrays[0].size)
    if any(a.size != n for a in arrays):
        raise ValueError(f"{op}: operands differ in size: {[tuple(a.shape) for a in arrays]}")
    return n


# --- elementwise ----------------------------------------------------------------------------------
def _flat(op: str, kernel: str, arrays: list[Array], scalars: tuple[float, ...] = ()) -> None:
    _check(op, *arrays)
    n = _same_size(op, arrays)
    if n == 0:
        return
    vec = _aligned(*arrays)
    fn = _kernel("flat", kernel)
    fn((_grid(n // 4 if vec else n),), (BLOCK,),
       (*arrays, *(np.float32(s) for s in scalars), np.int64(n), np.int32(vec)))


def relu_forward(x: Array, y: Array) -> None:
    _flat("relu", "relu_fwd", [x, y])


def relu_backward(y: Array, dy: Array, dx: Array) -> None:
    _flat("relu_backward", "relu_bwd", [y, dy, dx])


def add(reads: list[Array], y: Array) -> None:
    """y = ((r0 + r1) + r2) + ...: the first pair in one pass, then y += r for each further operand."""
    _flat("add", "add2", [reads[0], reads[1], y])
    for r in reads[2:]:
        _flat("add", "add2", [y, r, y])


def sgd_momentum(w: Array, g: Array, m: Array, lr: float, momentum: float, weight_decay: float) -> None:
    """W and m updated in place, in one pass; the float32 scalars round as numpy casts Python floats."""
    _flat("sgd_momentum", "sgd_momentum", [g, w, m], (lr, momentum, weight_decay))


# --- max pooling ----------------------------------------------------------------------------------
def _pool_shapes(op: str, x: Array, y: Array, k: int, s: int, p: int) -> tuple[int, int, int, int]:
    if x.ndim != 4 or y.ndim != 4 or y.shape[:2] != x.shape[:2] or k < 1 or s < 1 or p < 0:
        raise ValueError(f"{op}: expected NCHW x and y with the same N, C, got {x.shape} and {y.shape}")
    h, w = int(x.shape[2]), int(x.shape[3])
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    if (ho, wo) != tuple(y.shape[2:]):
        raise ValueError(f"{op}: kernel {k}, stride {s}, padding {p} make {x.shape} into "
                         f"{(*x.shape[:2], ho, wo)}, not {y.shape}")
    return h, w, ho, wo


def max_pool2d_forward(x: Array, y: Array, k: int, s: int, p: int) -> None:
    _check("max_pool2d", x, y)
    h, w, ho, wo = _pool_shapes("max_pool2d", x, y, k, s, p)
    if y.size == 0:
        return
    suffix, itype = _index(x, y)
    _kernel("pool", f"max_pool2d_fwd_{suffix}")(
        (_grid(y.size),), (BLOCK,), (x, y, itype(y.size), *(np.int32(v) for v in (h, w, ho, wo, k, s, p))))


def max_pool2d_backward(x: Array, y: Array, dy: Array, dx: Array, k: int, s: int, p: int) -> None:
    """dx from x and dy: the argmax is recomputed from x, which gives the y the forward wrote."""
    cp = _cp()
    _check("max_pool2d_backward", x, y, dy, dx)
    h, w, ho, wo = _pool_shapes("max_pool2d_backward", x, y, k, s, p)
    if dy.shape != y.shape or dx.shape != x.shape:
        raise ValueError(f"max_pool2d_backward: dy {dy.shape} must match y {y.shape}, dx {dx.shape} x {x.shape}")
    if k > 255:
        raise ValueError(f"max_pool2d_backward: kernel {k} is beyond the CUDA kernel's 255")
    if x.size == 0:
        return
    suffix, itype = _index(x, y)
    if s == k and p == 0 and h == ho * k and w == wo * k:  # disjoint windows covering every input
        _kernel("pool", f"max_pool2d_bwd_tiles_{suffix}")(
            (_grid(y.size),), (BLOCK,), (x, dy, dx, itype(y.size), *(np.int32(v) for v in (h, w, ho, wo, k))))
        return
    shape = tuple(np.int32(v) for v in (h, w, ho, wo, k, s, p))
    arg = cp.empty(y.shape, dtype=cp.uint16)  # stream-ordered pool: freeing it right away is safe
    _kernel("pool", f"max_pool2d_argmax_{suffix}")((_grid(y.size),), (BLOCK,), (x, arg, itype(y.size), *shape))
    _kernel("pool", f"max_pool2d_bwd_gather_{suffix}")(
        (_grid(x.size),), (BLOCK,), (arg, dy, dx, itype(x.size), *shape))


# --- batch norm -----------------------------------------------------------------------------------
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


# --- biases -----------------------------------------------------------------------------------------
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


# --- dropout ----------------------------------------------------------------------------------------
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
