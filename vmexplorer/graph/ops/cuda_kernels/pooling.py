"""Max pooling, forward and backward (the argmax recomputed from the input)."""

from __future__ import annotations

import numpy as np

from .launch import BLOCK, Array, _check, _cp, _grid, _index, _kernel, declare

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


declare("pool", lambda: _POOL)


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


def max_pool2d_backward(x: Array, y: Array, dy: Array, dx: Array, k: int, s: int, p: int,
                        scratch: Array | None = None) -> None:
    """dx from x and dy: the argmax is recomputed from x, which gives the y the forward wrote. Where windows
    overlap, the argmax goes to `scratch` (2 bytes per output: the op's workspace tensor), else to a buffer
    from CuPy's pool."""
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
    if scratch is not None and scratch.nbytes >= 2 * y.size:
        arg = scratch[:2 * y.size].view(cp.uint16).reshape(y.shape)
    else:
        arg = cp.empty(y.shape, dtype=cp.uint16)  # stream-ordered pool: freeing it right away is safe
    _kernel("pool", f"max_pool2d_argmax_{suffix}")((_grid(y.size),), (BLOCK,), (x, arg, itype(y.size), *shape))
    _kernel("pool", f"max_pool2d_bwd_gather_{suffix}")(
        (_grid(x.size),), (BLOCK,), (arg, dy, dx, itype(x.size), *shape))
