"""A model that is not built in, as the forward layers it is made of: what a session stores of an imported
model's graph, so that it opens where the model's file is not.

A `Definition` lists the forward layers in order, each an op kind of `ops/` with its arguments and the
layers (or the images) it reads; `Definition.graph(batch, image_size)` records them through their op
modules, as `models.py` records torchvision's layers, and `GraphBuilder` derives the loss, the backward
pass, the update and the workspaces, so the graph is the one the import made (`describe` reads a graph's
forward ops back into its definition). Everything else of a graph is derived, so this is the least that
fixes it exactly: some ten numbers per layer.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from .builder import GraphBuilder
from .graph import Graph, GraphError, Kind, Phase
from .ops.adaptive_avg_pool2d import adaptive_avg_pool2d
from .ops.add import add
from .ops.batch_norm2d import batch_norm2d
from .ops.conv2d import conv2d
from .ops.dropout import dropout
from .ops.linear import linear
from .ops.max_pool2d import max_pool2d
from .ops.relu import relu

IMAGES = -1  # a layer input that is the batch's images
# the arguments each kind takes beyond its inputs (every other argument of a Layer is 0 / false)
ARGS = {"conv2d": ("out", "kernel", "stride", "padding", "bias"), "linear": ("out", "bias"), "relu": (),
        "max_pool2d": ("kernel", "stride", "padding"), "adaptive_avg_pool2d": ("out",),
        "batch_norm2d": ("eps", "momentum"), "dropout": ("p",), "add": ()}
INPUTS = {kind: 2 if kind == "add" else 1 for kind in ARGS}
MAPS = ("conv2d", "max_pool2d", "adaptive_avg_pool2d", "batch_norm2d")  # kinds taking (N, C, H, W) only


@dataclass(frozen=True)
class Layer:
    """One forward layer: `kind` (a key of ARGS), its name (the graph's layer, prefix of its tensors'
    names), what it reads (earlier layers by index, or IMAGES) and its arguments: `out` the output
    channels (conv2d), features (linear) or side (adaptive_avg_pool2d); the window's `kernel`, `stride` and
    `padding`; `bias`; batch norm's `eps` and `momentum` (PyTorch's); dropout's `p`."""

    kind: str
    name: str
    inputs: tuple[int, ...]
    out: int = 0
    kernel: int = 0
    stride: int = 0
    padding: int = 0
    bias: bool = False
    eps: float = 0.0
    momentum: float = 0.0
    p: float = 0.0


ARG_NAMES = tuple(f.name for f in fields(Layer))[3:]


@dataclass(frozen=True, eq=False)
class Definition:
    """A model's forward layers: `name` (the model's, never a built-in one's), the images' `channels`, the
    layers in order and `output`, the layer whose output is the logits (N, classes). Equal and hashed by
    `digest`, so caches keyed on it tell two models of one name apart."""

    name: str
    channels: int
    layers: tuple[Layer, ...]
    output: int

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "channels": self.channels, "output_layer": self.output,
                "layers": [[layer.kind, layer.name, list(layer.inputs), *(getattr(layer, a) for a in ARG_NAMES)]
                           for layer in self.layers]}

    @cached_property
    def digest(self) -> str:
        """SHA-256 of the definition as JSON: what identifies the model beyond its name."""
        text = json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Definition) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def graph(self, batch: int, image_size: int) -> Graph:
        """The training iteration of this model at `batch` on square images of `image_size` pixels;
        GraphError says which layer cannot be built (a window larger than its input, shapes that do not
        add up, a layer whose output nothing reads)."""
        b = GraphBuilder(self.name, batch, image_size)
        made = [b.input("input.images", (batch, self.channels, image_size, image_size))]
        labels = b.input("input.labels", (batch,), "int32")
        for layer in self.layers:
            xs = [made[0] if i == IMAGES else made[i + 1] for i in layer.inputs]
            if layer.kind in MAPS and len(b.shape(xs[0])) != 4:
                raise GraphError(f"{self.name}: layer {layer.name} ({layer.kind}) takes a feature map (N, C, H, W), "
                                 f"not a tensor of shape {list(b.shape(xs[0]))}")
            if layer.kind == "adaptive_avg_pool2d" and layer.out > min(b.shape(xs[0])[2:]):
                raise GraphError(f"{self.name}: layer {layer.name} pools a {b.shape(xs[0])[2]}-pixel input to "
                                 f"{layer.out} pixels; pooling makes a map smaller")
            made.append(_record(b, layer, xs))
        logits = made[self.output + 1]
        if len(b.shape(logits)) != 2:
            raise GraphError(f"{self.name}: the output layer {self.layers[self.output].name} makes "
                             f"{list(b.shape(logits))}; expected the logits (N, classes)")
        return replace(b.build(logits, labels), definition=self)


def _record(b: GraphBuilder, layer: Layer, xs: list[int]) -> int:
    """Record `layer` through its op module; returns its output tensor."""
    x, name = xs[0], layer.name
    if layer.kind == "conv2d":
        return conv2d(b, x, name, layer.out, layer.kernel, layer.stride, layer.padding, layer.bias)
    if layer.kind == "linear":
        return linear(b, x, name, layer.out, layer.bias)
    if layer.kind == "max_pool2d":
        return max_pool2d(b, x, name, layer.kernel, layer.stride, layer.padding)
    if layer.kind == "adaptive_avg_pool2d":
        return adaptive_avg_pool2d(b, x, name, layer.out)
    if layer.kind == "batch_norm2d":
        return batch_norm2d(b, x, name, layer.eps, layer.momentum)
    if layer.kind == "dropout":
        return dropout(b, x, name, layer.p)
    if layer.kind == "add":
        return add(b, x, xs[1], name)
    if layer.kind == "relu":
        return relu(b, x, name)
    raise GraphError(f"layer {name} has kind {layer.kind!r}, not one of {', '.join(ARGS)}")


def describe(graph: Graph, name: str | None = None) -> Definition:
    """The definition of `graph`'s model, read from its forward ops (named `name`, or as the graph's
    model): `describe(g).graph(g.batch, g.image_size)` is `g`."""
    g = graph.plain or graph.full or graph
    made = {t: IMAGES for t, tensor in enumerate(g.tensors) if tensor.kind is Kind.INPUT and len(tensor.shape) == 4}
    if len(made) != 1:
        raise GraphError(f"{g.model}: expected one image input, found {len(made)}")
    channels = g.tensors[next(iter(made))].shape[1]
    layers: list[Layer] = []
    for op in g.ops:
        if op.phase is not Phase.FORWARD:
            continue
        if op.kind not in ARGS:
            raise GraphError(f"{g.model}: op {op.name} has kind {op.kind!r}, which a definition cannot hold")
        attrs, shape = dict(op.attrs), g.tensors[op.writes[0]].shape
        args: dict[str, Any] = {k: attrs[k] for k in ARGS[op.kind] if k in attrs}
        if "out" in ARGS[op.kind]:
            args["out"] = shape[2] if op.kind == "adaptive_avg_pool2d" else shape[1]
        inputs = tuple(made[t] for t in op.reads[:INPUTS[op.kind]])
        layers.append(replace(Layer(op.kind, op.layer, inputs), **args))
        made[op.writes[0]] = len(layers) - 1
    loss = next(op for op in g.ops if op.phase is Phase.LOSS)
    return Definition(name or g.model, int(channels), tuple(layers), made[loss.reads[0]])

