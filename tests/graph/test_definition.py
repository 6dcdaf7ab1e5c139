"""A model that is not built in is its forward layers (`vmexplorer.graph.definition`): what its sessions store.
Built again from them, the graph is the one the ONNX import made: every tensor and op, their attributes too
(which the engine's kernels read), the backward pass, the update and the workspaces alike."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx_models import Net, alexnet, resnet18, small

from vmexplorer.engine.init import initial_value
from vmexplorer.graph import Graph, build_graph, describe, import_onnx
from vmexplorer.graph.ops import OPS, op_attrs


def _odd(net: Net) -> str:
    """Layers the built-ins never have: a linear without bias (MatMul), dropout at 0.2, 10 classes."""
    x = net.relu(net.conv("input", "conv", 8, 3, 1, 1), "relu")
    x = net.dropout(net.flatten(net.adaptive_avgpool(x, "avgpool", 2)), "drop", 0.2)
    return net.node("MatMul", "fc", [x, net.param("fc.weight", (32, 10))], (1, 10))


def _exact(a: Graph, b: Graph) -> None:
    assert a == b  # tensors and ops
    assert [op.attrs for op in a.ops] == [op.attrs for op in b.ops]
    assert (a.model, a.key, a.workspaces) == (b.model, b.key, b.workspaces)


MODELS = {"resnet18": (resnet18, 64), "alexnet": (alexnet, None), "small": (small, 32), "odd": (_odd, 16)}


@pytest.mark.parametrize("name", MODELS)
def test_an_imported_graph_is_built_again_exactly_from_its_definition(name: str) -> None:
    make, size = MODELS[name]
    net = Net(size=size or 224)
    imported = import_onnx(net.bytes(make(net)), 8, image_size=size)
    assert imported.definition is not None and imported.definition.name == imported.model
    _exact(imported.definition.graph(8, imported.image_size), imported)
    _exact(build_graph(imported.model, 8, imported.image_size, definition=imported.definition), imported)
    # fitted, without workspaces and recomputed graphs keep it
    assert imported.fitted(imported.footprint // 2).definition is imported.definition
    assert imported.without_workspaces().definition is imported.definition


def test_a_built_in_model_has_no_definition_and_describes_to_a_definition_of_the_same_graph() -> None:
    built = build_graph("resnet18", 4, 64)
    assert built.definition is None
    described = describe(built, "mine.onnx")
    _exact(dataclasses.replace(described.graph(4, 64), model="resnet18"), built)


def test_definitions_are_equal_by_their_layers_and_two_models_of_one_name_differ() -> None:
    a, b = Net(), Net()
    one = import_onnx(a.bytes(small(a, classes=10)), 2, name="net")
    other = import_onnx(b.bytes(small(b, classes=20)), 2, name="net")
    again = Net()
    assert one.definition == import_onnx(again.bytes(small(again, classes=10)), 2, name="net").definition
    assert one.model == other.model and one.key == other.key
    assert one.definition != other.definition and one.definition.digest != other.definition.digest


def test_the_definition_is_batch_free_so_a_session_can_be_re_planned_at_another_batch() -> None:
    net = Net()
    imported = import_onnx(net.bytes(resnet18(net)), 2, image_size=64)
    again = Net()
    _exact(imported.definition.graph(6, 64), import_onnx(again.bytes(resnet18(again)), 6, image_size=64))


def test_an_imported_model_trains_an_iteration_on_the_engines_kernels_with_labels_among_its_classes() -> None:
    # the engine's ops on numpy, from the engine's starting values: what a GPU run of it would execute
    net = Net(size=16)
    g = import_onnx(net.bytes(_odd(net)), 4)
    labels = initial_value(g, g.tensor_id("input.labels"))
    assert labels is not None and 0 <= labels.min() and labels.max() < 10
    bufs = [initial_value(g, t) for t in range(len(g.tensors))]
    bufs = [b if b is not None else np.zeros(t.shape, t.dtype) for b, t in zip(bufs, g.tensors)]
    for i, op in enumerate(g.ops):
        OPS[op.kind](np, [bufs[t] for t in op.reads], [bufs[t] for t in op.writes], op_attrs(g, i, seed=1))
    loss = float(bufs[g.tensor_id("loss.value")])
    assert np.isfinite(loss) and 0 < loss < 10
    assert np.abs(bufs[g.tensor_id("fc.weight.momentum")]).sum() > 0  # the update ran on the bias-free layer
