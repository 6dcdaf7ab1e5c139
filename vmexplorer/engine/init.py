"""A run's starting values, computed on the host so a GPU run and a reference check share them.

Convolution weights are He-normal (fan-in, for the ReLU networks these are), linear ones N(0, 0.01);
biases and momentum zero, batch-norm scales and running variances one. The batch is synthetic (seeded
normal images, uniform labels), so nothing is downloaded. Every tensor draws from its own stream,
seeded by the run seed and its name, so values do not depend on other tensors or allocation order.
"""

from __future__ import annotations

import zlib

import numpy as np

from ..graph import Graph, Kind
from ..graph.models import NUM_CLASSES


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def initial_value(graph: Graph, tensor: int, seed: int = 0) -> np.ndarray | None:
    """The starting value of a persistent tensor; None for tensors an op produces."""
    t = graph.tensors[tensor]
    if not t.persistent:
        return None
    if t.kind is Kind.INPUT:
        if t.dtype == "int32":  # labels, among the classes of the logits the loss reads them with
            return _rng(seed, t.name).integers(0, _classes(graph, tensor), size=t.shape, dtype=np.int32)
        return _rng(seed, t.name).standard_normal(t.shape, dtype=np.float32)
    if t.kind is Kind.WEIGHT:
        if len(t.shape) == 1:  # biases and batch-norm shifts start at zero, batch-norm scales at one
            return np.ones(t.shape, np.float32) if _is_bn_scale(graph, tensor) else np.zeros(t.shape, np.float32)
        fan_in = int(np.prod(t.shape[1:]))
        # convolutions He-normal; classifiers N(0, 0.01) as torchvision's VGG: He-normal linears start
        # VGG and AlexNet at a loss near 30 and diverge on a fixed batch
        std = np.sqrt(2.0 / fan_in) if len(t.shape) == 4 else 0.01
        return (_rng(seed, t.name).standard_normal(t.shape, dtype=np.float32) * std).astype(np.float32)
    if t.kind is Kind.BUFFER:
        return np.ones(t.shape, np.float32) if t.name.endswith("running_var") else np.zeros(t.shape, np.float32)
    return np.zeros(t.shape, np.dtype(t.dtype))  # optimizer state


def _classes(graph: Graph, labels: int) -> int:
    """How many classes the logits beside `labels` have: 1000 in the built-in models, a model's own where it
    is not built in (an imported CNN of 10 classes)."""
    loss = graph.ops[graph.tensors[labels].consumers[0]] if graph.tensors[labels].consumers else None
    return graph.tensors[loss.reads[0]].shape[-1] if loss is not None else NUM_CLASSES


def _is_bn_scale(graph: Graph, tensor: int) -> bool:
    consumer = graph.tensors[tensor].consumers[0]
    return graph.ops[consumer].kind == "batch_norm2d" and graph.ops[consumer].reads[1] == tensor
