"""Reading an ONNX file, which is untrusted input: bounded before it is parsed, its weights never read.

What the importer needs of a file is its nodes, the shapes of its parameters and the values of its small
constants (a Reshape's target, a Dropout's ratio). `read_model` refuses a file over `MAX_FILE_BYTES` before
reading it and a graph over `MAX_NODES` before walking it; external data (weights in files beside the
model) is never opened, as only the shapes recorded in the model itself are read. `onnx` is imported here
only, when a file is read: without it, one `GraphError` says how to install it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...units import format_bytes, quoted
from ..graph import GraphError

MAX_FILE_BYTES = 1 << 30  # VGG-19 with its weights is 548 MB; a session is bounded at 1 GB as well
MAX_NODES = 50_000  # DenseNet-201 exported in training mode has a few thousand
MAX_CONSTANT_ELEMENTS = 4096  # values kept of a constant: shapes, indices, ratios; weights keep their shape only
MAX_NAME = 48  # characters of a model name taken from a file's name
OPSETS = range(9, 25)  # the default domain's versions whose node forms the importer reads
INSTALL = "pip install 'vmexplorer[onnx]'"

# ONNX TensorProto data types whose values the importer may read, as numpy types
_NUMPY = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64}


def onnx_module() -> Any:
    """The `onnx` package, or a GraphError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise GraphError(f"importing a model from an ONNX file needs the onnx package: {INSTALL}") from None
    return onnx


@dataclass(frozen=True)
class Constant:
    """A tensor whose shape the file states: a weight (values left unread) or a small constant (values kept)."""

    shape: tuple[int, ...]
    value: np.ndarray | None = None


def model_name(stem: str) -> str:
    """The graph's model name for a file named `stem`.onnx: letters, digits, `_`, `-` and `.` only, at most
    MAX_NAME of them, ending in `.onnx` so that it never takes a built-in model's name (`resnet18.onnx`
    is not `resnet18`, whose sessions and cost models describe other ops)."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._-")[:MAX_NAME] or "model"
    return f"{clean}.onnx"


def read_model(source: str | os.PathLike[str] | bytes) -> tuple[Any, str]:
    """(the parsed ModelProto, where it came from for messages) of a path or the bytes of a file."""
    onnx = onnx_module()
    where = "the ONNX data" if isinstance(source, bytes | bytearray) else quoted(str(source))
    raw = bytes(source) if isinstance(source, bytes | bytearray) else _read_bounded(Path(source), where)
    if len(raw) > MAX_FILE_BYTES:
        raise GraphError(f"{where}: {len(raw)} bytes, over the {format_bytes(MAX_FILE_BYTES)} an ONNX model may "
                         "be here")
    try:
        model = onnx.load_model_from_string(raw)
    except Exception as e:  # protobuf's DecodeError, or a message that parses into nonsense
        raise GraphError(f"{where}: not an ONNX model, as it could not be parsed ({type(e).__name__})") from None
    if not model.HasField("graph") or not model.graph.node:
        raise GraphError(f"{where}: not an ONNX model, as it holds no graph of nodes")
    if len(model.graph.node) > MAX_NODES:
        raise GraphError(f"{where}: {len(model.graph.node)} nodes, over the {MAX_NODES} a model may have here")
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions or versions[0] not in OPSETS:
        found = versions[0] if versions else "none"
        raise GraphError(f"{where}: ONNX opset {found}; the importer reads opsets {OPSETS.start} to "
                         f"{OPSETS.stop - 1} (re-export with opset_version=17)")
    return model, where


def _read_bounded(path: Path, where: str) -> bytes:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_FILE_BYTES:  # refused before it is read
                raise GraphError(f"{where}: {size} bytes, over the {format_bytes(MAX_FILE_BYTES)} an ONNX model may "
                                 "be here")
            return f.read(MAX_FILE_BYTES + 1)  # a pipe has no size: one byte past the limit at most
    except OSError as e:
        raise GraphError(f"{where}: cannot be read: {e.strerror or type(e).__name__}") from None


def constants(model: Any) -> dict[str, Constant]:
    """The file's initializers by name: every one's shape, and the values of the small ones that are not
    weights (a weight's values, often hundreds of megabytes or in another file, are never read)."""
    out: dict[str, Constant] = {}
    for t in model.graph.initializer:
        out[t.name] = tensor_constant(t)
    return out


def tensor_constant(t: Any) -> Constant:
    """A TensorProto as a Constant: its dims, and its values where they are few and of a plain type."""
    shape = tuple(int(d) for d in t.dims)
    if any(d < 0 for d in shape):
        raise GraphError(f"tensor {quoted(t.name)} has a negative dimension {list(shape)}")
    size = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if size > MAX_CONSTANT_ELEMENTS or t.data_type not in _NUMPY or t.data_location == 1:  # 1: EXTERNAL
        return Constant(shape)
    from onnx import numpy_helper

    try:
        value = np.asarray(numpy_helper.to_array(t))
    except Exception:  # values that do not match the dims: the shape is still what the file states
        return Constant(shape)
    return Constant(shape, value)


def value_shapes(model: Any) -> dict[str, tuple[int | None, ...]]:
    """The shapes the graph's inputs declare, a dimension None where it is symbolic (`batch`) or absent."""
    out: dict[str, tuple[int | None, ...]] = {}
    for v in model.graph.input:
        dims = v.type.tensor_type.shape.dim if v.type.HasField("tensor_type") else []
        out[v.name] = tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims)
    return out


def attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values: ints, floats, strings, lists of them, or a tensor's Constant."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        kind = a.type
        if kind == 1:
            out[a.name] = float(a.f)
        elif kind == 2:
            out[a.name] = int(a.i)
        elif kind == 3:
            out[a.name] = a.s.decode("utf-8", "replace")
        elif kind == 4:
            out[a.name] = tensor_constant(a.t)
        elif kind == 6:
            out[a.name] = [float(v) for v in a.floats]
        elif kind == 7:
            out[a.name] = [int(v) for v in a.ints]
        else:  # graphs, sparse tensors, string lists: no node the importer maps takes them
            out[a.name] = None
    return out


def node_label(node: Any, index: int) -> str:
    """How a message names a node: its name from the file (quoted and cut short), or its index."""
    return f"node {quoted(node.name, 60)}" if node.name else f"node #{index}"
