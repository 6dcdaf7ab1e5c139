"""A model's forward graph from an ONNX file: `import_onnx(path_or_bytes, batch)`, the training iteration of
a person's own CNN, its backward pass and SGD update derived as for the built-in models.

The file is untrusted input: `reader.py` bounds and parses it (weights are never read, only their
shapes), `fold.py` works out shape-only nodes on constants, `nodes.py` records each supported node through
the op module of its kind, and `state.py` holds what the walk knows and names the node in every error. The
parameters are the file's initializers or, in a file exported without them (`export_params=False`), the
graph inputs that nodes take as weights; the image is the one graph input that is not a parameter, its
batch dimension replaced by `batch` (and its sides by `image_size`, where given).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ...units import quoted
from ..builder import GraphBuilder
from ..definition import describe
from ..graph import Graph, GraphError
from ..models import MAX_BATCH, MAX_FOOTPRINT
from .fold import FOLDERS, fold
from .nodes import HANDLERS
from .reader import Constant, attributes, constants, model_name, node_label, read_model, value_shapes
from .state import Importer, Value

SUPPORTED = tuple(sorted({*HANDLERS, *FOLDERS}))
# the inputs of each node type that are parameters (weights, biases, batch-norm statistics), not feature maps
_PARAM_SLOTS = {"Conv": (1, 2), "BatchNormalization": (1, 2, 3, 4), "Gemm": (1, 2), "MatMul": (1,), "Add": (0, 1)}


def import_onnx(source: str | os.PathLike[str] | bytes, batch: int, image_size: int | None = None,
                name: str | None = None) -> Graph:
    """The training iteration of the CNN in an ONNX file (a path, or the file's bytes) at `batch`, with
    square images of the file's size (or `image_size` pixels). The model is named after the file
    (`net.onnx`), or `name`. GraphError says what is wrong: the file, an unsupported node (named, with
    its op type and what is supported), or a size."""
    if not isinstance(batch, int) or isinstance(batch, bool) or not 0 < batch <= MAX_BATCH:
        raise GraphError(f"batch must be a positive integer of at most {MAX_BATCH}, not {batch!r}")
    if image_size is not None and (not isinstance(image_size, int) or image_size <= 0):
        raise GraphError(f"image size must be a positive integer, not {image_size!r}")
    model, where = read_model(source)
    stem = name or (Path(os.fsdecode(source)).stem if not isinstance(source, bytes | bytearray) else "model")
    consts = constants(model)
    image, shape = _image_input(model, consts, where, image_size)
    builder = GraphBuilder(model_name(stem), batch, shape[2])
    imp = Importer(builder, where, _file_batch(model, image), consts, nodes=list(model.graph.node))
    images = builder.input("input.images", (batch, *shape[1:]))
    labels = builder.input("input.labels", (batch,), "int32")
    imp.values[image] = Value(images, (batch, *shape[1:]))
    _walk(imp)
    built = builder.build(_logits(imp, model), labels)
    graph = dataclasses.replace(built, definition=describe(built))  # what its sessions store (definition.py)
    if graph.footprint > MAX_FOOTPRINT:
        raise GraphError(f"{graph.model} at batch {batch} needs {graph.footprint / 2**40:.1f} TiB, beyond any "
                         f"sensible host memory (at most {MAX_FOOTPRINT >> 40} TiB); use a smaller batch")
    return graph


def _image_input(model: Any, consts: dict[str, Constant], where: str,
                 image_size: int | None) -> tuple[str, tuple[int, int, int, int]]:
    """(name, (N, C, S, S) with N unset) of the image input; the graph inputs nodes take as parameters
    become constants of their declared shapes (a file exported without its weights)."""
    declared = value_shapes(model)
    slots = {n.input[i] for n in model.graph.node for i in _PARAM_SLOTS.get(n.op_type, ())
             if i < len(n.input) and n.input[i]}
    images = [v for v in declared if v not in consts and v not in slots]
    for v in declared:
        if v in slots and v not in consts:
            dims = declared[v]
            if any(d is None for d in dims):
                raise GraphError(f"{where}: the parameter input {quoted(v, 60)} has no static shape "
                                 f"({['?' if d is None else d for d in dims]})")
            consts[v] = Constant(tuple(int(d) for d in dims if d is not None))
    if len(images) != 1:
        raise GraphError(f"{where}: expected one image input (N, C, H, W) besides the parameters, found "
                         f"{len(images)}" + (f": {', '.join(quoted(v, 40) for v in images[:5])}" if images else ""))
    dims = declared[images[0]]
    if len(dims) != 4 or any(d is None for d in dims[1:]) or (image_size is None and dims[2] != dims[3]):
        raise GraphError(f"{where}: the image input {quoted(images[0], 60)} has shape "
                         f"{['?' if d is None else d for d in dims]}; expected (N, C, S, S) with C and S fixed")
    c, s = int(dims[1] or 0), image_size or int(dims[2] or 0)
    return images[0], (0, c, s, s)


def _file_batch(model: Any, image: str) -> int | None:
    return value_shapes(model)[image][0]


def _walk(imp: Importer) -> None:
    """Record every node in the file's order; a node of an unsupported type is refused by name."""
    for i, node in enumerate(imp.nodes):
        for name in node.input:
            imp.consumers.setdefault(name, []).append(i)
    for i, node in enumerate(imp.nodes):
        if i in imp.skip:
            continue
        imp.node, imp.index = node, i
        if node.domain not in ("", "ai.onnx") or (node.op_type not in HANDLERS and node.op_type not in FOLDERS):
            domain = f" of domain {quoted(node.domain, 40)}" if node.domain not in ("", "ai.onnx") else ""
            raise GraphError(f"{imp.where}: {node_label(node, i)} has op type {quoted(node.op_type, 40)}{domain}, "
                             f"which vmexplorer cannot import yet; supported: {', '.join(SUPPORTED)}")
        try:
            attrs = attributes(node)
            (HANDLERS.get(node.op_type) or fold)(imp, attrs)
        except GraphError:
            raise
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as e:  # a hostile file's attributes
            imp.fail(f"has attributes or inputs of the wrong kind for its op type ({type(e).__name__})")


def _logits(imp: Importer, model: Any) -> int:
    """The graph tensor of the file's one output, the logits (N, classes) the loss is taken of."""
    outputs = [o.name for o in model.graph.output if o.name in imp.values]
    if len(outputs) != 1:
        raise GraphError(f"{imp.where}: expected one output, the logits (N, classes), found {len(outputs)} "
                         "feature maps among the graph's outputs")
    logits = imp.values[outputs[0]]
    if len(imp.builder.shape(logits.tensor)) != 2:
        raise GraphError(f"{imp.where}: the output {quoted(outputs[0], 60)} has shape "
                         f"{list(imp.builder.shape(logits.tensor))}; expected the logits (N, classes) of a linear "
                         "layer")
    return logits.tensor


__all__ = ["SUPPORTED", "import_onnx"]
