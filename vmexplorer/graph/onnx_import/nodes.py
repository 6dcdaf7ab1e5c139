"""ONNX node types as the op kinds of `graph/ops/`: one function each, recording the node through the op's
module (as models.py records torchvision's layers), so that a model exported to ONNX imports to the graph
its built-in twin has. What an op kind cannot represent (a grouped convolution, asymmetric padding, a
pooling whose windows do not tile the input) is refused, saying what the node has and what is supported."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ops.adaptive_avg_pool2d import adaptive_avg_pool2d
from ..ops.add import add
from ..ops.batch_norm2d import batch_norm2d
from ..ops.conv2d import conv2d
from ..ops.dropout import dropout
from ..ops.linear import linear
from ..ops.max_pool2d import max_pool2d
from ..ops.relu import relu
from .state import Importer, Value

Handler = Callable[[Importer, dict[str, Any]], None]


def _map(imp: Importer, i: int = 0) -> Value:
    """Input `i` as a 4-D feature map (N, C, H, W) that is no view: what convolutions and poolings take."""
    x = imp.value(imp.input(i) or "")
    own = imp.builder.shape(x.tensor)
    if len(x.shape) != 4 or x.shape != own:
        imp.fail(f"takes a feature map of shape {list(x.shape)}; it expects (N, C, H, W)")
    return x


def _ints(imp: Importer, attrs: dict[str, Any], name: str, default: Any) -> list[int]:
    """Attribute `name` (`default` where absent) as a list of integers, or an error saying what it is."""
    values = attrs.get(name, default)
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        imp.fail(f"has {name} {values!r}; expected a list of integers")
    return values


def _square(imp: Importer, values: list[int], what: str) -> int:
    if len(values) != 2 or values[0] != values[1]:
        imp.fail(f"has {what} {values}; only square 2-D {what} are supported")
    return int(values[0])


def _padding(imp: Importer, attrs: dict[str, Any], size: tuple[int, ...], k: int, stride: int) -> int:
    """The one padding of all four sides, from `pads` ([top, left, bottom, right]) or a static auto_pad."""
    mode = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if mode == "VALID":
        return 0
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        totals = {max((math.ceil(s / stride) - 1) * stride + k - s, 0) for s in size}
        if len(totals) != 1 or next(iter(totals)) % 2:
            imp.fail(f"has auto_pad {mode}, which pads this {size[0]}x{size[1]} input unevenly; only the same "
                     "padding on every side is supported")
        return next(iter(totals)) // 2
    if mode != "NOTSET":
        imp.fail(f"has auto_pad {mode!r}, not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    pads = _ints(imp, attrs, "pads", [0, 0, 0, 0])
    if len(pads) != 4 or len(set(pads)) != 1 or pads[0] < 0:
        imp.fail(f"has pads {pads}; only the same padding on every side is supported")
    return int(pads[0])


def _window(imp: Importer, attrs: dict[str, Any], x: Value, k: int) -> tuple[int, int]:
    """(stride, padding) of a sliding window of size k, which must not be dilated."""
    if any(d != 1 for d in _ints(imp, attrs, "dilations", [1, 1])):
        imp.fail(f"has dilations {attrs['dilations']}; dilated windows are not supported yet")
    stride = _square(imp, _ints(imp, attrs, "strides", [1, 1]), "strides")
    if stride < 1 or k < 1:
        imp.fail(f"has kernel {k} and stride {stride}; both must be at least 1")
    return stride, _padding(imp, attrs, x.shape[2:], k, stride)


def conv(imp: Importer, attrs: dict[str, Any]) -> None:
    x = _map(imp)
    layer = imp.layer()
    w = imp.param(1, layer)
    assert w is not None
    if int(attrs.get("group", 1)) != 1:
        imp.fail(f"is a grouped convolution (group={attrs['group']}); grouped and depthwise convolutions are "
                 "not supported yet")
    if len(w) != 4 or w[1] != x.shape[1]:
        imp.fail(f"has weights of shape {list(w)} for an input of {x.shape[1]} channels")
    k = _square(imp, _ints(imp, attrs, "kernel_shape", list(w[2:])), "kernel_shape")
    if (k, k) != w[2:]:
        imp.fail(f"has kernel_shape {attrs['kernel_shape']} but weights of shape {list(w)}")
    stride, pad = _window(imp, attrs, x, k)
    bias = imp.param(2, layer, (w[0],))
    imp.output(conv2d(imp.builder, x.tensor, layer, w[0], k, stride, pad, bias=bias is not None))


def batch_normalization(imp: Importer, attrs: dict[str, Any]) -> None:
    """Training- and eval-mode forms alike (the training form's running statistics, outputs 1 and 2, are
    the op's own buffers here): the imported graph trains."""
    x = _map(imp)
    layer = imp.layer()
    for i in range(1, 5):
        if imp.param(i, layer, (x.shape[1],)) is None:
            imp.fail(f"lacks its input {i}")
    eps = float(f"{attrs.get('epsilon', 1e-5):.6g}")  # the file's float32, as the number it was written from
    momentum = float(f"{1 - attrs.get('momentum', 0.9):.6g}")  # ONNX weighs the running value; PyTorch the batch
    imp.output(batch_norm2d(imp.builder, x.tensor, layer, eps, momentum))


def relu_(imp: Importer, attrs: dict[str, Any]) -> None:
    x = imp.value(imp.input(0) or "")
    imp.output(relu(imp.builder, x.tensor, imp.layer()), x.shape)


def max_pool(imp: Importer, attrs: dict[str, Any]) -> None:
    x = _map(imp)
    k = _square(imp, _ints(imp, attrs, "kernel_shape", []), "kernel_shape")
    stride, pad = _window(imp, attrs, x, k)
    if attrs.get("ceil_mode") and any((s + 2 * pad - k) % stride for s in x.shape[2:]):
        imp.fail("has ceil_mode=1, which here makes a larger output than flooring; only flooring is supported")
    if attrs.get("storage_order"):
        imp.fail("has storage_order=1; only row-major indices are supported")
    imp.output(max_pool2d(imp.builder, x.tensor, imp.layer(), k, stride, pad))


def average_pool(imp: Importer, attrs: dict[str, Any]) -> None:
    """As adaptive average pooling where the windows tile the input exactly (torch's export of
    AdaptiveAvgPool2d where the output divides the input); other average poolings are refused."""
    x = _map(imp)
    k = _square(imp, _ints(imp, attrs, "kernel_shape", []), "kernel_shape")
    stride, pad = _window(imp, attrs, x, k)
    h, w = x.shape[2:]
    if stride != k or pad or h % k or w % k or h != w:
        imp.fail(f"pools a {h}x{w} input with kernel {k}, stride {stride} and padding {pad}; only windows that "
                 "tile a square input (kernel = stride, no padding) are supported")
    imp.output(adaptive_avg_pool2d(imp.builder, x.tensor, imp.layer(), h // k))


def global_average_pool(imp: Importer, attrs: dict[str, Any]) -> None:
    imp.output(adaptive_avg_pool2d(imp.builder, _map(imp).tensor, imp.layer(), 1))


def add_(imp: Importer, attrs: dict[str, Any]) -> None:
    x, y = (imp.value(imp.input(i) or "") for i in (0, 1))
    if x.shape != y.shape or imp.builder.shape(x.tensor) != imp.builder.shape(y.tensor):
        imp.fail(f"adds {list(x.shape)} to {list(y.shape)}; only feature maps of one shape are added")
    imp.output(add(imp.builder, x.tensor, y.tensor, imp.layer()), x.shape)


def _rows(imp: Importer) -> Value:
    """Input 0 as (N, features): a linear layer's input, flattened (a view) where it was a feature map."""
    x = imp.value(imp.input(0) or "")
    if len(x.shape) != 2 or x.shape[0] != imp.builder.batch:
        imp.fail(f"takes an input of shape {list(x.shape)}; it expects (N, features), e.g. after a Flatten")
    return x


def gemm(imp: Importer, attrs: dict[str, Any]) -> None:
    x = _rows(imp)
    layer = imp.layer()
    if attrs.get("transA") or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
        imp.fail("has transA, alpha or beta other than 0, 1 and 1; only y = x W^T + b (or x W + b) is supported")
    w = imp.param(1, layer)
    assert w is not None
    out, into = (w[0], w[1:]) if attrs.get("transB") else (w[-1], w[:-1])
    if len(w) != 2 or into != (x.shape[1],):
        imp.fail(f"has weights of shape {list(w)} for {x.shape[1]} input features (transB={attrs.get('transB', 0)})")
    bias = imp.param(2, layer)
    if bias is not None and bias not in ((out,), (1, out)):
        imp.fail(f"has a bias of shape {list(bias)}; it expects ({out},)")
    imp.output(linear(imp.builder, x.tensor, layer, out, bias=bias is not None))


def matmul(imp: Importer, attrs: dict[str, Any]) -> None:
    """x @ W, with the Add of a bias that follows it (torch's export of a linear layer) as one layer."""
    x = _rows(imp)
    layer = imp.layer()
    w = imp.param(1, layer)
    assert w is not None
    if len(w) != 2 or w[0] != x.shape[1]:
        imp.fail(f"multiplies {list(x.shape)} by a parameter of shape {list(w)}")
    bias_add = _bias_add(imp, w[1])
    if bias_add is None:
        imp.output(linear(imp.builder, x.tensor, layer, w[1], bias=False))
        return
    index, node, slot = bias_add
    imp.skip.add(index)
    imp.param_named(node.input[slot], layer)
    imp.output(linear(imp.builder, x.tensor, layer, w[1]), name=node.output[0])


def _bias_add(imp: Importer, out: int) -> tuple[int, Any, int] | None:
    """(index, node, input slot of the bias) of the Add of a bias of `out` values that alone reads this
    MatMul's output, or None."""
    readers = imp.consumers.get(imp.node.output[0], [])
    if len(readers) != 1:
        return None
    node = imp.nodes[readers[0]]
    if node.op_type != "Add" or len(node.input) != 2:
        return None
    slot = 1 if node.input[0] == imp.node.output[0] else 0
    c = imp.consts.get(node.input[slot])
    return (readers[0], node, slot) if c is not None and c.shape in ((out,), (1, out)) else None


def flatten(imp: Importer, attrs: dict[str, Any]) -> None:
    x = imp.value(imp.input(0) or "")
    axis = int(attrs.get("axis", 1))
    if axis not in (1, 1 - len(x.shape)):
        imp.fail(f"flattens at axis {axis}; only axis 1 (to (N, features)) is supported")
    imp.alias(x, (x.shape[0], math.prod(x.shape[1:])))


def reshape(imp: Importer, attrs: dict[str, Any]) -> None:
    """To (N, -1) (a flatten, as a view), or to the shape the input has already."""
    x = imp.value(imp.input(0) or "")
    target = [int(t) for t in np.asarray(imp.constant(1)).ravel()]
    batch = imp.builder.batch
    if len(target) == 2 and imp.file_batch is not None and target[0] == imp.file_batch:
        target[0] = batch  # a batch the exporter wrote as a number: the batch of the file's input
    if not attrs.get("allowzero"):
        target = [x.shape[i] if t == 0 and i < len(x.shape) else t for i, t in enumerate(target)]
    if target.count(-1) == 1:
        known = math.prod(t for t in target if t != -1)
        target[target.index(-1)] = math.prod(x.shape) // known if known else -1
    shape = tuple(target)
    if shape != x.shape and (len(shape) != 2 or shape[0] != batch or shape[1] * batch != math.prod(x.shape)):
        imp.fail(f"reshapes {list(x.shape)} to {list(shape)}; only a flatten to (N, -1) is supported")
    imp.alias(x, shape)


def dropout_(imp: Importer, attrs: dict[str, Any]) -> None:
    """Recorded with its ratio whatever its training_mode: the imported graph is a training iteration, as
    the built-ins'. A ratio of 0 drops nothing and makes no op."""
    x = imp.value(imp.input(0) or "")
    ratio = imp.constant(1, attrs.get("ratio", 0.5))
    p = float(np.asarray(ratio).ravel()[0]) if ratio is not None and np.asarray(ratio).size else 0.5
    if not 0 <= p < 1:
        imp.fail(f"has ratio {p}; a dropout ratio is at least 0 and below 1")
    if p == 0:
        imp.alias(x)
        return
    imp.output(dropout(imp.builder, x.tensor, imp.layer(), float(f"{p:.6g}")), x.shape)


def identity(imp: Importer, attrs: dict[str, Any]) -> None:
    name = imp.input(0) or ""
    if name in imp.consts and name not in imp.values:
        imp.consts[imp.node.output[0]] = imp.consts[name]
        return
    imp.alias(imp.value(name))


HANDLERS: dict[str, Handler] = {
    "Conv": conv, "BatchNormalization": batch_normalization, "Relu": relu_, "MaxPool": max_pool,
    "AveragePool": average_pool, "GlobalAveragePool": global_average_pool, "Add": add_, "Gemm": gemm,
    "MatMul": matmul, "Flatten": flatten, "Reshape": reshape, "Dropout": dropout_, "Identity": identity,
}
