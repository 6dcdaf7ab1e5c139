"""Shape-only nodes, folded at import: exporters compute a Reshape's target from the input's shape
(torch's `x.view(x.size(0), -1)` is Shape, Gather, Unsqueeze, Concat), so these nodes are worked out
on constants here, with the batch the graph is built at, and make no op. On a feature map (a Concat of
two branches) they are refused: that is another op kind, not a shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .reader import MAX_CONSTANT_ELEMENTS, Constant
from .state import Importer

Folder = Callable[[Importer, dict[str, Any]], np.ndarray]


def fold(imp: Importer, attrs: dict[str, Any]) -> None:
    """Work out the node at `imp.node` on its constant inputs and keep its output as a constant."""
    if imp.node.op_type == "Constant" and isinstance(attrs.get("value"), Constant):
        imp.consts[imp.node.output[0]] = attrs["value"]  # a shape, or a weight (its values unread)
        return
    value = np.asarray(FOLDERS[imp.node.op_type](imp, attrs))
    if value.size > MAX_CONSTANT_ELEMENTS:
        imp.fail(f"folds to {value.size} values, more than a shape could have")
    imp.consts[imp.node.output[0]] = Constant(tuple(int(d) for d in value.shape), value)


def _const(imp: Importer, i: int) -> np.ndarray:
    name = imp.input(i)
    if name is not None and name in imp.values:
        imp.fail(f"takes the feature map {name!r}: only shapes are folded, and this op kind on feature maps is "
                 "not supported")
    value = imp.constant(i)
    if value is None:
        imp.fail(f"lacks its input {i}")
    return value


def _constant(imp: Importer, attrs: dict[str, Any]) -> np.ndarray:
    for key, dtype in (("value_int", np.int64), ("value_ints", np.int64), ("value_float", np.float32),
                       ("value_floats", np.float32)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    imp.fail("has no value the importer reads (value, value_int(s), value_float(s))")


def _shape(imp: Importer, attrs: dict[str, Any]) -> np.ndarray:
    name = imp.input(0)
    if name in imp.values:
        shape = imp.values[name].shape
    elif name is not None and name in imp.consts:
        shape = imp.consts[name].shape
    else:
        imp.value(name or "")  # says what the input is instead
        raise AssertionError
    rank = len(shape)
    start, end = int(attrs.get("start", 0)), int(attrs.get("end", rank))
    return np.asarray(shape[slice(start, end)], dtype=np.int64)


def _gather(imp: Importer, attrs: dict[str, Any]) -> np.ndarray:
    data, indices = _const(imp, 0), _const(imp, 1)
    axis = int(attrs.get("axis", 0))
    try:
        return np.take(data, indices.astype(np.int64), axis=axis)
    except (IndexError, ValueError, np.exceptions.AxisError) as e:
        imp.fail(f"gathers out of range: {e}")


def _axes(imp: Importer, attrs: dict[str, Any]) -> list[int]:
    """Unsqueeze's and Squeeze's axes: an input from opset 13, an attribute before."""
    given = imp.constant(1) if imp.input(1) is not None else attrs.get("axes")
    return [int(a) for a in np.asarray(given if given is not None else [], dtype=np.int64).ravel()]


def _unsqueeze(imp: Importer, attrs: dict[str, Any]) -> np.ndarray:
    data, axes = _const(imp, 0), _axes(imp, attrs)
    rank = data.ndim + len(axes)
    try:
        for a in sorted(a % rank for a in axes):
            data = np.expand_dims(data, a)
    except (ValueError, np.exceptions.AxisError) as e:
        imp.fail(f"has bad axes {axes}: {e}")
    return data


def _squeeze(imp: Importer, attrs: dict[str, Any]) -> np.ndarray:
    data, axes = _const(imp, 0), _axes(imp, attrs)
    try:
        return np.squeeze(data, axis=tuple(axes) if axes else None)
    except (ValueError, np.exceptions.AxisError) as e:
        imp.fail(f"has bad axes {axes}: {e}")


def _concat(imp: Importer, attrs: dict[str, Any]) -> np.ndarray:
    parts = [_const(imp, i) for i in range(len(imp.node.input)) if imp.input(i) is not None]
    try:
        return np.concatenate(parts, axis=int(attrs.get("axis", 0)))
    except (ValueError, np.exceptions.AxisError) as e:
        imp.fail(f"cannot join its constants: {e}")


_CAST = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def _cast(imp: Importer, attrs: dict[str, Any]) -> np.ndarray:
    to = _CAST.get(int(attrs.get("to", 0)))
    if to is None:
        imp.fail(f"casts a shape to ONNX type {attrs.get('to')}, not one the importer folds")
    return _const(imp, 0).astype(to)


FOLDERS: dict[str, Folder] = {"Constant": _constant, "Shape": _shape, "Gather": _gather, "Unsqueeze": _unsqueeze,
                              "Squeeze": _squeeze, "Concat": _concat, "Cast": _cast}
