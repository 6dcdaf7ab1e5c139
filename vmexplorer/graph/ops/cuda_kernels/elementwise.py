"""relu, add and sgd_momentum: one elementwise kernel each over n floats, on float4 where aligned."""

from __future__ import annotations

import numpy as np

from .launch import BLOCK, Array, _aligned, _check, _grid, _kernel, _same_size, declare

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


declare("flat", _flat_source)


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
