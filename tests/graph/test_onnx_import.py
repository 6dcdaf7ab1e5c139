"""Importing a model from an ONNX file: torchvision's models, written as torch.onnx.export writes them
(tests/onnx_models.py, no torch needed), import to the graphs of their built-in twins; what the op
kinds cannot represent, and files that are not models, are refused in one GraphError that says where."""

import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_models import Net, alexnet, resnet18, small, vgg11

from vmexplorer.graph import build_graph, import_onnx
from vmexplorer.graph.graph import Graph, GraphError
from vmexplorer.graph.onnx_import import reader

BUILT_INS = {"alexnet": alexnet, "vgg11": vgg11, "resnet18": resnet18}


def shape_of(graph: Graph) -> tuple:
    """Everything of a graph but its names: each tensor's kind, shape, bytes, producer and consumers; each
    op's kind, phase, tensors, FLOPs, bytes and attributes; in order."""
    tensors = tuple((t.kind, t.shape, t.dtype, t.nbytes, t.producer, t.consumers) for t in graph.tensors)
    ops = tuple((o.kind, o.phase, o.reads, o.writes, o.flops, o.bytes_touched, dict(o.attrs)) for o in graph.ops)
    return graph.batch, graph.image_size, tensors, ops


def export(model, **net_args) -> bytes:
    net = Net(**net_args)
    return net.bytes(model(net))


@pytest.mark.parametrize("model", sorted(BUILT_INS))
def test_a_torchvision_export_imports_to_the_built_in_graph_up_to_names(model):
    imported = import_onnx(export(BUILT_INS[model]), 4, name=model)
    built = build_graph(model, 4)
    assert shape_of(imported) == shape_of(built)
    assert imported.param_count == built.param_count
    assert sum(o.flops for o in imported.ops) == sum(o.flops for o in built.ops)
    assert imported.footprint == built.footprint


def test_layers_are_named_after_the_modules_the_exporter_wrote():
    g = import_onnx(export(resnet18), 2, name="resnet18")
    built = build_graph("resnet18", 2)
    assert [o.layer for o in g.ops[:6]] == [o.layer for o in built.ops[:6]]  # then torch says relu, not relu1
    assert "layer1.0.downsample.0.weight" not in {t.name for t in g.tensors}  # resnet18's layer1 has none
    assert "layer2.0.downsample.0.weight" in {t.name for t in g.tensors}


@pytest.mark.parametrize("params", ["inputs", "initializers", "external"])
def test_weights_as_graph_inputs_initializers_or_external_data_import_alike(params):
    # export_params=False puts the weights among the graph inputs; external data is never opened
    g = import_onnx(export(small, params=params), 8)
    assert shape_of(g) == shape_of(import_onnx(export(small), 8))
    assert g.param_count == 8 * 3 * 9 + 2 * 8 + 8 * 10 + 10


def test_the_batch_replaces_the_files_and_the_model_is_named_after_the_file(tmp_path):
    path = tmp_path / "my net <i>v2&.onnx"
    path.write_bytes(export(small, batch="batch"))  # a symbolic batch dimension
    g = import_onnx(path, 16)
    assert g.model == "my_net_i_v2.onnx"
    assert g.tensors[g.tensor_id("input.images")].shape == (16, 3, 224, 224)
    assert g.batch == 16 and g.key == ("my_net_i_v2.onnx", 16, 224)


def test_a_file_named_after_a_built_in_model_does_not_take_its_name(tmp_path):
    path = tmp_path / "resnet18.onnx"
    path.write_bytes(export(resnet18))
    assert import_onnx(path, 2).model == "resnet18.onnx"
    long = tmp_path / ("x" * 200 + ".onnx")
    long.write_bytes(export(small))
    assert len(import_onnx(long, 2).model) <= reader.MAX_NAME + len(".onnx")


def test_an_image_size_resizes_the_input_as_the_built_ins_do():
    assert shape_of(import_onnx(export(resnet18), 2, image_size=112)) == shape_of(build_graph("resnet18", 2, 112))


def test_eval_mode_batch_norm_imports_as_the_training_form():
    assert shape_of(import_onnx(export(resnet18, training=False), 2)) == shape_of(import_onnx(export(resnet18), 2))


def test_an_eval_mode_export_has_no_dropout_and_else_the_built_in_graph():
    # torch leaves dropout out of an eval-mode export: the file has no Dropout nodes to import
    g, built = import_onnx(export(alexnet, training=False), 2), build_graph("alexnet", 2)
    assert g.param_count == built.param_count
    assert [o.kind for o in g.ops if o.phase == "forward"] == \
        [o.kind for o in built.ops if o.phase == "forward" and o.kind != "dropout"]


def test_a_reshape_whose_target_is_worked_out_from_the_input_shape_is_folded():
    # x.view(x.size(0), -1): Shape, Gather, Unsqueeze, Concat feeding a Reshape make no op
    g = import_onnx(export(lambda net: resnet18(net, flatten="view")), 4, name="resnet18")
    assert shape_of(g) == shape_of(build_graph("resnet18", 4))


def test_a_reshape_to_the_exported_batch_takes_the_batch_imported_at():
    net = Net(batch=1)
    x = net.adaptive_avgpool(net.relu(net.conv("input", "conv", 8, 3, 1, 1), "relu"), "avgpool", 1)
    target = net.constant("", np.array([1, 8], np.int64))  # torch wrote the batch it traced as a number
    flat = net.node("Reshape", "", [x, target], (1, 8))
    g = import_onnx(net.bytes(net.linear(flat, "fc", 10)), 32)
    assert g.tensors[g.tensor_id("fc.out")].shape == (32, 10)


def test_a_linear_layer_as_matmul_and_add_or_gemm_without_transb_is_the_same_layer():
    def with_matmul(net: Net, gemm: bool) -> str:
        x = net.flatten(net.adaptive_avgpool(net.relu(net.conv("input", "conv", 8, 3), "relu"), "avgpool", 1))
        w = net.param("fc.weight", (8, 10))
        if gemm:
            return net.node("Gemm", "fc", [x, w, net.param("fc.bias", (10,))], (1, 10), transB=0)
        y = net.node("MatMul", "fc", [x, w], (1, 10))
        return net.node("Add", "fc", [net.param("fc.bias", (10,)), y], (1, 10))

    a = import_onnx(export(lambda n: with_matmul(n, False)), 4)
    b = import_onnx(export(lambda n: with_matmul(n, True)), 4)
    plain = Net()
    x = plain.flatten(plain.adaptive_avgpool(plain.relu(plain.conv("input", "conv", 8, 3), "relu"), "avgpool", 1))
    c = import_onnx(plain.bytes(plain.linear(x, "fc", 10)), 4)
    assert shape_of(a) == shape_of(b) == shape_of(c)


def test_a_dropout_keeps_its_ratio_and_a_ratio_of_zero_is_no_op():
    def head(p: float):
        def model(net: Net) -> str:
            x = net.flatten(net.adaptive_avgpool(net.conv("input", "conv", 8, 3), "avgpool", 1))
            return net.linear(net.dropout(x, "drop", p), "fc", 10)
        return model

    g = import_onnx(export(head(0.25)), 2)
    assert [dict(o.attrs)["p"] for o in g.ops if o.kind == "dropout"] == [0.25]
    assert not [o for o in import_onnx(export(head(0.0)), 2).ops if o.kind == "dropout"]


# --- what is refused ----------------------------------------------------------------------------------
def _with_node(op: str, **attrs) -> bytes:
    net = Net()
    x = net.relu(net.conv("input", "conv", 8, 3), "relu")
    x = net.node(op, "block", [x], net.shape[x], **attrs)
    return net.bytes(net.linear(net.flatten(net.adaptive_avgpool(x, "avgpool", 1)), "fc", 10))


def test_an_unsupported_node_is_refused_naming_it_its_op_type_and_what_is_supported():
    with pytest.raises(GraphError) as e:
        import_onnx(_with_node("Sigmoid"), 2)
    text = str(e.value)
    assert "node \"/block/Sigmoid\"" in text and "\"Sigmoid\"" in text
    assert "supported: Add, AveragePool, BatchNormalization," in text and "Relu" in text


def test_an_unnamed_unsupported_node_is_named_by_its_index():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["input", "w"], ["c"], kernel_shape=[3, 3]),
         helper.make_node("HardSwish", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GraphError, match=r'node #1 has op type "HardSwish"'):
        import_onnx(model.SerializeToString(), 2)


@pytest.mark.parametrize("conv_args,says", [
    ({"group": 2}, "grouped convolution (group=2)"),
    ({"pads": [1, 1, 0, 0]}, "same padding on every side"),
])
def test_a_convolution_the_op_kind_cannot_represent_is_refused(conv_args, says):
    net = Net()
    x = net.conv(net.conv("input", "stem", 8, 3), "grouped", 8, 3, **conv_args)
    with pytest.raises(GraphError, match="/grouped/Conv") as e:
        import_onnx(net.bytes(net.linear(net.flatten(net.adaptive_avgpool(x, "avgpool", 1)), "fc", 10)), 2)
    assert says in str(e.value)


def test_a_dilated_convolution_is_refused():
    net = Net()
    net.conv("input", "conv", 8, 3)
    net.nodes[-1].attribute[0].ints[:] = [2, 2]  # dilations
    with pytest.raises(GraphError, match="dilations"):
        import_onnx(net.bytes(net.linear(net.flatten(net.adaptive_avgpool(net.nodes[-1].output[0], "p", 1)),
                                         "fc", 10)), 2)


def test_an_average_pool_that_is_not_an_adaptive_one_is_refused():
    net = Net()
    x = net.conv("input", "conv", 8, 3)
    x = net.node("AveragePool", "pool", [x], (1, 8, 110, 110), kernel_shape=[3, 3], strides=[2, 2])
    with pytest.raises(GraphError, match="only windows that tile"):
        import_onnx(net.bytes(net.linear(net.flatten(net.adaptive_avgpool(x, "avgpool", 1)), "fc", 10)), 2)


def test_a_node_reading_a_training_mode_batch_norms_running_mean_is_refused():
    net = Net()
    x = net.bn(net.conv("input", "conv", 8, 3), "bn")
    running = net.nodes[-1].output[1]
    with pytest.raises(GraphError, match="output 1 of node"):
        import_onnx(net.bytes(net.linear(net.flatten(net.adaptive_avgpool(net.add(x, running, "a"), "p", 1)),
                                         "fc", 10)), 2)


def test_a_reshape_other_than_a_flatten_is_refused():
    net = Net()
    x = net.conv("input", "conv", 8, 3)
    y = net.node("Reshape", "r", [x, net.constant("", np.array([1, 8, -1, 2], np.int64))], (1, 8, 24642, 2))
    with pytest.raises(GraphError, match="only a flatten to"):
        import_onnx(net.bytes(y), 2)


@pytest.mark.parametrize("data,says", [
    (b"", "no graph of nodes"),
    (b"\x00\x01garbage" * 10, "not an ONNX model, as it could not be parsed"),
])
def test_bytes_that_are_not_a_model_are_one_clear_error(data, says):
    with pytest.raises(GraphError, match=says):
        import_onnx(data, 2)


def test_a_truncated_file_is_one_clear_error(tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes(export(small, params="initializers")[:-300])
    with pytest.raises(GraphError, match=r'^"[^"]*cut.onnx": not an ONNX model'):
        import_onnx(path, 2)


def test_a_file_over_the_limits_is_refused_before_it_is_walked(tmp_path, monkeypatch):
    path = tmp_path / "big.onnx"
    path.write_bytes(export(small))
    monkeypatch.setattr(reader, "MAX_FILE_BYTES", 100)
    with pytest.raises(GraphError, match=r"big.onnx\": \d+ bytes, over the 100 B"):
        import_onnx(path, 2)
    monkeypatch.setattr(reader, "MAX_FILE_BYTES", 1 << 30)
    monkeypatch.setattr(reader, "MAX_NODES", 3)
    with pytest.raises(GraphError, match="nodes, over the 3"):
        import_onnx(path, 2)


def test_a_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(GraphError, match="cannot be read: No such file"):
        import_onnx(tmp_path / "none.onnx", 2)


def test_an_input_that_is_neither_image_nor_parameter_is_refused():
    net = Net()
    net.inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 3, 224, 224]))
    with pytest.raises(GraphError, match="expected one image input.*found 2"):
        import_onnx(net.bytes(small(net)), 2)


def test_a_parameter_input_without_a_static_shape_is_refused():
    net = Net()
    out = small(net)
    net.inputs[1] = helper.make_tensor_value_info("conv.weight", TensorProto.FLOAT, ["o", 3, 3, 3])
    with pytest.raises(GraphError, match="conv.weight.*no static shape"):
        import_onnx(net.bytes(out), 2)


@pytest.mark.parametrize("batch", [0, -1, 1.5, True, 1 << 30])
def test_a_bad_batch_is_refused(batch):
    with pytest.raises(GraphError, match="batch must be a positive integer"):
        import_onnx(export(small), batch)


def test_without_onnx_installed_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(GraphError, match=r"pip install 'vmexplorer\[onnx\]'"):
        import_onnx(b"anything", 2)


@pytest.mark.parametrize("attrs", [{"pads": 1.5}, {"group": "two"}, {"kernel_shape": [3.5, 3.5]},
                                   {"strides": [1]}, {"auto_pad": "SIDEWAYS"}, {"dilations": "wide"}])
def test_attributes_of_the_wrong_kind_are_refused_naming_the_node(attrs):
    net = Net()
    net.conv("input", "conv", 8, 3)
    conv = net.nodes[-1]
    for a in [a for a in conv.attribute if a.name in attrs]:
        conv.attribute.remove(a)
    conv.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    out = net.linear(net.flatten(net.adaptive_avgpool(conv.output[0], "avgpool", 1)), "fc", 10)
    with pytest.raises(GraphError, match='node "/conv/Conv"'):
        import_onnx(net.bytes(out), 2)


def test_a_file_with_bytes_changed_at_random_imports_or_is_one_graph_error():
    import random

    rng = random.Random(0)
    net = Net(params="initializers")
    good = net.bytes(small_with_view(net))
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            import_onnx(bytes(data), 2)
        except GraphError:
            pass


def small_with_view(net: Net) -> str:
    """A small net whose flatten is a folded Reshape, so that changed bytes reach the folding too."""
    x = net.relu(net.bn(net.conv("input", "conv", 8, 3, 1, 1, bias=False), "bn"), "relu")
    return net.linear(net.dropout(net.view_flat(net.adaptive_avgpool(x, "avgpool", 1)), "drop"), "fc", 10)
