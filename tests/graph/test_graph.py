"""Graphs: torchvision's models layer for layer, exact bytes, and a consistent producer/consumer web."""

import pytest

from vmexplorer.graph import MODELS, build_graph
from vmexplorer.graph.graph import DTYPE_BYTES, GraphError, Kind, Phase

# torchvision's published parameter counts (sum of p.numel() for p in model.parameters())
TORCHVISION_PARAMS = {
    "alexnet": 61_100_840, "vgg11": 132_863_336, "vgg16": 138_357_544, "vgg19": 143_667_240,
    "resnet18": 11_689_512, "resnet50": 25_557_032, "resnet152": 60_192_808,
}
# torchvision's published forward GFLOPS per 224x224 image (multiply-accumulates of convs and linears)
TORCHVISION_GMACS = {"alexnet": 0.71, "vgg11": 7.61, "vgg16": 15.47, "vgg19": 19.63,
                     "resnet18": 1.81, "resnet50": 4.09, "resnet152": 11.51}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_parameter_count_equals_torchvisions(model):
    assert build_graph(model, 2).param_count == TORCHVISION_PARAMS[model]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_forward_multiply_accumulates_match_torchvisions_figures(model):
    g = build_graph(model, 1)
    macs = 0
    for op in g.ops:
        if op.kind in ("conv2d", "linear"):
            out = g.tensors[op.writes[0]]
            bias = out.nbytes // 4 if len(op.reads) == 3 else 0
            macs += (op.flops - bias) // 2
    assert macs / 1e9 == pytest.approx(TORCHVISION_GMACS[model], abs=0.006)


@pytest.mark.parametrize("model,tensor,shape", [
    ("vgg19", "features.0.out", (8, 64, 224, 224)),
    ("vgg19", "features.36.out", (8, 512, 7, 7)),
    ("vgg19", "avgpool.out", (8, 512, 7, 7)),
    ("alexnet", "features.2.out", (8, 64, 27, 27)),
    ("alexnet", "features.12.out", (8, 256, 6, 6)),
    ("resnet50", "maxpool.out", (8, 64, 56, 56)),
    ("resnet50", "layer4.2.relu.out", (8, 2048, 7, 7)),
    ("resnet18", "layer2.0.downsample.1.out", (8, 128, 28, 28)),
    ("resnet152", "fc.out", (8, 1000)),
])
def test_activation_shapes_are_what_the_layer_shapes_give(model, tensor, shape):
    g = build_graph(model, 8)
    assert g.tensors[g.tensor_id(tensor)].shape == shape


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_tensor_has_exact_bytes_and_a_consistent_producer_and_consumers(model):
    g = build_graph(model, 3, 64 if model != "alexnet" else 96)
    for t, tensor in enumerate(g.tensors):
        numel = 1
        for s in tensor.shape:
            numel *= s
        assert tensor.nbytes == numel * DTYPE_BYTES[tensor.dtype]
        if tensor.persistent:
            assert tensor.kind in (Kind.INPUT, Kind.WEIGHT, Kind.BUFFER, Kind.OPTIMIZER_STATE)
        else:
            assert t in g.ops[tensor.producer].writes
            assert all(c > tensor.producer for c in tensor.consumers)
        assert list(tensor.consumers) == [i for i, op in enumerate(g.ops) if t in op.reads]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_an_iteration_runs_forward_then_loss_then_backward_then_update(model):
    phases = [op.phase for op in build_graph(model, 2, 64 if model != "alexnet" else 96).ops]
    order = [Phase.FORWARD, Phase.LOSS, Phase.BACKWARD, Phase.UPDATE]
    assert [order.index(p) for p in phases] == sorted(order.index(p) for p in phases)
    assert phases.count(Phase.LOSS) == 1


def test_every_weight_gets_a_gradient_and_an_sgd_update_with_momentum():
    g = build_graph("resnet18", 2, 32)
    updated = {t for op in g.ops if op.phase is Phase.UPDATE for t in op.writes}
    for t, tensor in enumerate(g.tensors):
        if tensor.kind is Kind.WEIGHT:
            grad = g.tensor_id(tensor.name + ".grad")
            assert g.tensors[grad].kind is Kind.GRADIENT and g.tensors[grad].shape == tensor.shape
            assert t in updated and g.tensor_id(tensor.name + ".momentum") in updated


def test_backward_reads_what_forward_declared_it_keeps():
    g = build_graph("vgg11", 2, 32)
    conv_bwd = g.ops[next(i for i, op in enumerate(g.ops) if op.name == "features.3.backward")]
    read = {g.tensors[t].name for t in conv_bwd.reads}
    assert read == {"features.2.out", "features.3.weight", "features.3.out.grad"}
    relu_bwd = g.ops[next(i for i, op in enumerate(g.ops) if op.name == "features.1.backward")]
    assert {g.tensors[t].name for t in relu_bwd.reads} == {"features.1.out", "features.1.out.grad"}


def test_a_tensor_with_two_consumers_gets_its_gradients_summed():
    g = build_graph("resnet18", 2, 32)
    sums = [op for op in g.ops if op.name == "maxpool.out.grad_sum"]
    assert len(sums) == 1 and len(sums[0].reads) == 2


def test_the_first_layer_computes_no_gradient_for_the_images():
    g = build_graph("alexnet", 2, 96)
    assert not any(t.name.startswith("input.images.grad") for t in g.tensors)


def test_footprint_is_the_peak_of_live_bytes_and_at_least_the_minimum_capacity():
    g = build_graph("vgg19", 4, 64)
    assert g.footprint == max(g.live_bytes)
    need, op = g.min_capacity
    assert need == max(g.working_set(k) for k in range(len(g.ops))) == g.working_set(op)
    assert g.footprint >= need


def test_footprint_grows_with_the_batch():
    assert build_graph("resnet50", 16).footprint > build_graph("resnet50", 8).footprint


@pytest.mark.parametrize("model,batch,size,message", [
    ("lenet", 1, 224, "unknown model 'lenet'"),
    ("vgg19", 0, 224, "batch must be a positive integer"),
    ("vgg19", -3, 224, "batch must be a positive integer"),
    ("vgg19", 10**9, 224, "beyond any sensible run"),
    ("vgg19", 500_000, 224, "beyond any sensible host memory"),
    ("alexnet", 2, 32, "image size 32 is too small"),
    ("resnet18", 2, 0, "image size must be a positive integer"),
])
def test_bad_model_arguments_are_refused_with_a_clear_message(model, batch, size, message):
    with pytest.raises(GraphError, match=message):
        build_graph(model, batch, size)
