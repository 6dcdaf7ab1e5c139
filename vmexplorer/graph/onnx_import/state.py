"""What the importer knows as it walks the file's nodes in order: each ONNX value as a graph tensor (with
the shape the file's ops see, which a Flatten or Reshape makes a view of), each constant and parameter by
shape, and the node it is at, so that every error names that node and its op type."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from ...units import quoted
from ..builder import GraphBuilder
from ..graph import GraphError
from .reader import Constant, node_label


@dataclass(frozen=True)
class Value:
    """An ONNX value that is a feature map: graph tensor `tensor`, seen by the file's ops as `shape` (the
    tensor's own shape, or a view of it: Flatten and Reshape move no data, as torchvision's flatten)."""

    tensor: int
    shape: tuple[int, ...]


@dataclass
class Importer:
    builder: GraphBuilder
    where: str  # the file, for messages
    file_batch: int | None  # the batch the file was exported at, where its image input states one
    consts: dict[str, Constant]
    values: dict[str, Value] = field(default_factory=dict)
    dead: dict[str, str] = field(default_factory=dict)  # outputs no op kind makes, with what they are
    used: dict[str, str] = field(default_factory=dict)  # parameter -> the layer that took it
    nodes: list[Any] = field(default_factory=list)  # the file's, in order
    consumers: dict[str, list[int]] = field(default_factory=dict)  # value name -> indices of nodes reading it
    skip: set[int] = field(default_factory=set)  # nodes already imported with an earlier one (MatMul's Add)
    layers: set[str] = field(default_factory=set)
    node: Any = None
    index: int = 0

    # --- messages ---------------------------------------------------------------------------------
    def fail(self, reason: str) -> NoReturn:
        raise GraphError(f"{self.where}: {node_label(self.node, self.index)} ({quoted(self.node.op_type, 40)}) "
                         f"{reason}")

    # --- reading a node's inputs ------------------------------------------------------------------
    def value(self, name: str) -> Value:
        """The feature map `name`, or an error saying what `name` is instead."""
        if name in self.values:
            return self.values[name]
        if name in self.dead:
            self.fail(f"reads {quoted(name, 60)}, {self.dead[name]}, which no op kind of vmexplorer makes")
        if name in self.consts:
            self.fail(f"reads the constant {quoted(name, 60)} where a feature map is expected; only weights and "
                      "shapes may be constants")
        self.fail(f"reads {quoted(name, 60)}, which no earlier node makes (is the file's graph in order?)")

    def input(self, i: int) -> str | None:
        """The name of the node's input `i`, None where it is absent (past the end, or empty)."""
        inputs = self.node.input
        return inputs[i] if i < len(inputs) and inputs[i] else None

    def param(self, i: int, layer: str, shape: tuple[int, ...] | None = None) -> tuple[int, ...] | None:
        """The shape of the parameter that is the node's input `i` (None where the input is absent),
        checked against `shape` where given. A parameter two layers share is refused: each layer's
        weights are its own tensors here."""
        name = self.input(i)
        return None if name is None else self.param_named(name, layer, shape)

    def param_named(self, name: str, layer: str, shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
        if name not in self.consts:
            what = "a feature map" if name in self.values else "no initializer or graph input with a shape"
            self.fail(f"takes {quoted(name, 60)} as a parameter, but it is {what}")
        if name in self.used:
            self.fail(f"shares the parameter {quoted(name, 60)} with {self.used[name]}; shared weights are not "
                      "supported")
        self.used[name] = layer
        found = self.consts[name].shape
        if shape is not None and found != shape:
            self.fail(f"has parameter {quoted(name, 60)} of shape {list(found)}, expected {list(shape)}")
        return found

    def constant(self, i: int, default: Any = None) -> np.ndarray | None:
        """The value of the node's constant input `i`, `default` where it is absent."""
        name = self.input(i)
        if name is None:
            return None if default is None else np.asarray(default)
        c = self.consts.get(name)
        if c is None or c.value is None:
            self.fail(f"takes {quoted(name, 60)} as a constant, but its value is not in the file "
                      "(only shapes, indices and ratios folded from constants are supported)")
        return c.value

    # --- writing its outputs ----------------------------------------------------------------------
    def output(self, tensor: int, shape: tuple[int, ...] | None = None, name: str | None = None) -> None:
        """The node's first output (or the value `name`) is graph tensor `tensor`, seen as `shape` (the
        tensor's own by default); its other outputs are noted as dead, so that a node reading one is
        refused saying which it is."""
        name = name or self.node.output[0]
        own = self.builder.shape(tensor)
        view = own if shape is None else shape
        if math.prod(view) != math.prod(own):
            self.fail(f"makes {list(view)} of a tensor of shape {list(own)}")
        self.values[name] = Value(tensor, view)
        for k, other in enumerate(self.node.output):
            if k and other:
                self.dead[other] = f"output {k} of {node_label(self.node, self.index)}"

    def alias(self, source: Value, shape: tuple[int, ...] | None = None) -> None:
        """The node's output is `source` (Identity), or a view of it as `shape` (Flatten, Reshape)."""
        self.output(source.tensor, source.shape if shape is None else shape)

    def layer(self) -> str:
        """A layer name for the node, unique in the graph: its module path where the exporter wrote one
        (torch's `/layer1/layer1.0/conv1/Conv` gives `layer1.0.conv1`), its index otherwise; letters,
        digits, `_`, `-` and `.` only."""
        parts = [p for p in self.node.name.split("/") if p][:-1] if "/" in self.node.name else []
        name, previous = "", ""
        for p in parts:  # a numbered child repeats its parent's name (`features`, `features.0`): once is enough
            name = name + p[len(previous):] if previous and p.startswith(previous + ".") else \
                (f"{name}.{p}" if name else p)
            previous = p
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80].strip(".")
        if not name or name in self.layers:
            kind = re.sub(r"[^A-Za-z0-9]+", "", self.node.op_type).lower()[:20] or "node"
            name = f"{name}.{kind}" if name else f"{kind}{self.index}"
        base, k = name, 1
        while name in self.layers:
            k += 1
            name = f"{base}_{k}"
        self.layers.add(name)
        return name
