"""An op is one module: it records itself into a graph through the recorder protocol alone, declares its
kernels once, and the tables the engine reads are gathered from the modules."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from vmexplorer.graph import MODELS, GraphError, Kind, build_graph
from vmexplorer.graph.ops import KERNELS, MODULES, OPS, REQUIRED, op_attrs
from vmexplorer.graph.ops.conv2d import conv2d
from vmexplorer.graph.ops.dropout import dropout


def test_every_op_kind_is_declared_by_exactly_one_module() -> None:
    kinds = [k.kind for m in MODULES for k in m.KERNELS]
    assert len(kinds) == len(set(kinds)) == len(KERNELS)
    assert set(OPS) == set(REQUIRED) == set(kinds)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_op_module_says_what_it_computes_and_what_its_backward_keeps(module: Any) -> None:
    assert module.__doc__ and "Backward keeps:" in module.__doc__


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_op_of_every_model_has_a_kernel_and_the_attrs_it_requires(model: str) -> None:
    g = build_graph(model, 2, 96 if model == "alexnet" else 64)
    for i, op in enumerate(g.ops):
        attrs = op_attrs(g, i)
        assert set(REQUIRED[op.kind]) <= set(attrs), op.name


@dataclass
class _Log:
    """A recorder that is not the graph builder: only what the protocol promises is there."""

    model: str = "toy"
    image_size: int = 8
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    forwards: list[dict[str, Any]] = field(default_factory=list)

    def shape(self, t: int) -> tuple[int, ...]:
        return self.shapes[t]

    def name(self, t: int) -> str:
        return f"t{t}"

    def new_tensor(self, name: str, kind: Kind, shape: tuple[int, ...], dtype: str = "float32",
                   producer: int = -1) -> int:
        self.shapes.append(shape)
        return len(self.shapes) - 1

    def param(self, layer: str, name: str, shape: tuple[int, ...]) -> int:
        return self.new_tensor(f"{layer}.{name}", Kind.WEIGHT, shape)

    def add_op(self, name: str, kind: str, phase: Any, layer: str, reads: tuple[int, ...], outputs: list[Any],
               updates: tuple[int, ...] = (), flops: int = 0, attrs: Any = ()) -> tuple[int, list[int]]:
        raise AssertionError("forward layers record through forward()")

    def forward(self, kind: str, layer: str, inputs: tuple[int, ...], params: tuple[int, ...],
                out_shape: tuple[int, ...], flops: int, **declared: Any) -> tuple[int, list[int]]:
        self.forwards.append({"kind": kind, "inputs": inputs, "params": params, "out_shape": out_shape,
                              "flops": flops, **declared})
        return self.new_tensor(f"{layer}.out", Kind.ACTIVATION, out_shape), []


def test_a_convolution_records_its_shapes_flops_and_keeps_through_any_recorder() -> None:
    log = _Log(shapes=[(2, 3, 8, 8)])
    conv2d(log, 0, "c", 4, 3, stride=2, padding=1)
    (rec,) = log.forwards
    macs = 2 * 4 * 4 * 4 * 3 * 3 * 3  # N * C_out * Ho * Wo * C_in * k * k, with Ho = Wo = (8 + 2 - 3) // 2 + 1
    weight, bias = rec["params"]
    assert rec["out_shape"] == (2, 4, 4, 4) and log.shapes[weight] == (4, 3, 3, 3) and log.shapes[bias] == (4,)
    assert rec["flops"] == 2 * macs + 2 * 4 * 4 * 4
    assert rec["keeps"] == (0, weight)  # the input for dW, the weight for dx
    assert dict(rec["attrs"]) == {"kernel": 3, "stride": 2, "padding": 1, "bias": True}


def test_dropout_keeps_only_its_one_byte_mask() -> None:
    log = _Log(shapes=[(4, 5)])
    dropout(log, 0, "d")
    (rec,) = log.forwards
    assert rec["keeps"] == (-2,) and rec["saved"] == (("mask", (4, 5), "uint8"),)
    assert rec["flops"] == 2 * math.prod((4, 5))


def test_a_window_larger_than_its_input_is_refused_with_the_fix() -> None:
    with pytest.raises(GraphError, match="toy: image size 8 is too small: c gets a 2x2 input for a 3x3 window; "
                                         "try a larger --image-size"):
        conv2d(_Log(shapes=[(1, 1, 2, 2)]), 0, "c", 1, 3)
