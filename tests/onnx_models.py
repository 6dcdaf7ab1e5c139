"""ONNX files as `torch.onnx.export(model, x, f, opset_version=17)` (the TorchScript exporter) writes
torchvision's CNNs, built with `onnx.helper` from a compact description, so that no test needs torch.

The conventions copied: node names `/features/features.0/Conv` (module path, a numbered child repeating
its parent's name), values `<node>_output_0`, parameters named `features.0.weight`; Conv with `pads`
[t, l, b, r], `dilations`, `group`, `kernel_shape`, `strides`; Gemm with transB=1; `torch.flatten(x, 1)`
as Flatten; AdaptiveAvgPool2d to 1 as GlobalAveragePool and to a divisor of the input as AveragePool with
kernel = stride; in training mode BatchNormalization with training_mode=1 and the running statistics as
outputs 1 and 2, and Dropout taking its ratio and training_mode from Constant nodes, with its mask as
output 1. `params` chooses where the weights go: "inputs" (`export_params=False`), "initializers"
(zeros, as real bytes: only for small nets) or "external" (initializers whose bytes are in a file that
is not there, which the importer never opens).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper


class Net:
    def __init__(self, params: str = "inputs", training: bool = True, batch: int | str = 1, size: int = 224,
                 channels: int = 3, opset: int = 17) -> None:
        self.params, self.training, self.opset = params, training, opset
        self.nodes: list[onnx.NodeProto] = []
        self.inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, channels, size, size])]
        self.inits: list[onnx.TensorProto] = []
        self.shape: dict[str, tuple[int, ...]] = {"input": (1, channels, size, size)}
        self.count: dict[str, int] = {}

    # --- plumbing ---------------------------------------------------------------------------------
    def node(self, op: str, scope: str, inputs: list[str], shape: tuple[int, ...], outputs: int = 1,
             **attrs: object) -> str:
        path = "/" + "/".join(_torch_path(scope)) + "/" if scope else "/"
        k = self.count.get(path + op, 0)
        self.count[path + op] = k + 1
        name = f"{path}{op}" + (f"_{k}" if k else "")
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        self.shape[outs[0]] = shape
        return outs[0]

    def param(self, name: str, shape: tuple[int, ...]) -> str:
        if self.params == "inputs":
            self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        elif self.params == "initializers":
            self.inits.append(helper.make_tensor(name, TensorProto.FLOAT, list(shape),
                                                 np.zeros(shape, np.float32).tobytes(), raw=True))
        else:
            t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape))
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", str(4 * int(np.prod(shape))))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            self.inits.append(t)
        return name

    def constant(self, scope: str, value: np.ndarray) -> str:
        tensor = helper.make_tensor("value", _TYPES[value.dtype.type], list(value.shape), value.ravel().tolist())
        return self.node("Constant", scope, [], tuple(value.shape), value=tensor)

    # --- layers -----------------------------------------------------------------------------------
    def conv(self, x: str, scope: str, out: int, k: int, s: int = 1, p: int = 0, bias: bool = True,
             group: int = 1, pads: list[int] | None = None) -> str:
        n, c, h, w = self.shape[x]
        ins = [x, self.param(f"{scope}.weight", (out, c // group, k, k))]
        if bias:
            ins.append(self.param(f"{scope}.bias", (out,)))
        pads = pads or [p] * 4
        ho, wo = ((h + pads[0] + pads[2] - k) // s + 1, (w + pads[1] + pads[3] - k) // s + 1)
        return self.node("Conv", scope, ins, (n, out, ho, wo), dilations=[1, 1], group=group,
                         kernel_shape=[k, k], pads=pads, strides=[s, s])

    def bn(self, x: str, scope: str) -> str:
        c = self.shape[x][1]
        ins = [x] + [self.param(f"{scope}.{p}", (c,)) for p in ("weight", "bias", "running_mean", "running_var")]
        if self.training:
            return self.node("BatchNormalization", scope, ins, self.shape[x], outputs=3, epsilon=1e-5,
                             momentum=0.9, training_mode=1)
        return self.node("BatchNormalization", scope, ins, self.shape[x], epsilon=1e-5, momentum=0.9)

    def relu(self, x: str, scope: str) -> str:
        return self.node("Relu", scope, [x], self.shape[x])

    def maxpool(self, x: str, scope: str, k: int, s: int, p: int = 0) -> str:
        n, c, h, w = self.shape[x]
        return self.node("MaxPool", scope, [x], (n, c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1),
                         ceil_mode=0, kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])

    def adaptive_avgpool(self, x: str, scope: str, size: int) -> str:
        n, c, h, w = self.shape[x]
        if size == 1:
            return self.node("GlobalAveragePool", scope, [x], (n, c, 1, 1))
        k = h // size
        return self.node("AveragePool", scope, [x], (n, c, size, size), ceil_mode=0, kernel_shape=[k, k],
                         strides=[k, k])

    def flatten(self, x: str) -> str:
        n, *rest = self.shape[x]
        return self.node("Flatten", "", [x], (n, int(np.prod(rest))), axis=1)

    def view_flat(self, x: str) -> str:
        """`x.view(x.size(0), -1)`: the target shape worked out from the input's shape."""
        n, *rest = self.shape[x]
        shape = self.node("Shape", "", [x], (4,))
        gathered = self.node("Gather", "", [shape, self.constant("", np.array(0, np.int64))], (), axis=0)
        batch = self.node("Unsqueeze", "", [gathered, self.constant("", np.array([0], np.int64))], (1,))
        target = self.node("Concat", "", [batch, self.constant("", np.array([-1], np.int64))], (2,), axis=0)
        return self.node("Reshape", "", [x, target], (n, int(np.prod(rest))))

    def dropout(self, x: str, scope: str, p: float = 0.5) -> str:
        if not self.training:  # torch's export in eval mode leaves dropout out
            return x
        ratio = self.constant(scope, np.array(p, np.float32))
        mode = self.constant(scope, np.array(True))
        return self.node("Dropout", scope, [x, ratio, mode], self.shape[x], outputs=2)

    def linear(self, x: str, scope: str, out: int) -> str:
        n, k = self.shape[x]
        ins = [x, self.param(f"{scope}.weight", (out, k)), self.param(f"{scope}.bias", (out,))]
        return self.node("Gemm", scope, ins, (n, out), alpha=1.0, beta=1.0, transB=1)

    def add(self, a: str, b: str, scope: str) -> str:
        return self.node("Add", scope, [a, b], self.shape[a])

    # --- the file ---------------------------------------------------------------------------------
    def model(self, output: str) -> onnx.ModelProto:
        out = helper.make_tensor_value_info(output, TensorProto.FLOAT, list(self.shape[output]))
        graph = helper.make_graph(self.nodes, "main_graph", self.inputs, [out], initializer=self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=8)

    def bytes(self, output: str) -> bytes:
        return self.model(output).SerializeToString()


_TYPES = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL}


def _torch_path(scope: str) -> list[str]:
    """torch's scope path of a module: `layer1.0.conv1` -> layer1, layer1.0, conv1."""
    out: list[str] = []
    parts = scope.split(".")
    for i, p in enumerate(parts):
        out.append(f"{parts[i - 1]}.{p}" if p.isdigit() and i else p)
    return out


# --- torchvision's models, as their exports --------------------------------------------------------
def alexnet(net: Net) -> str:
    x = "input"
    for i, (out, k, s, p) in zip((0, 3, 6, 8, 10), ((64, 11, 4, 2), (192, 5, 1, 2), (384, 3, 1, 1),
                                                     (256, 3, 1, 1), (256, 3, 1, 1))):
        x = net.relu(net.conv(x, f"features.{i}", out, k, s, p), f"features.{i + 1}")
        if i in (0, 3, 10):
            x = net.maxpool(x, f"features.{i + 2}", 3, 2)
    x = net.flatten(net.adaptive_avgpool(x, "avgpool", 6))
    x = net.relu(net.linear(net.dropout(x, "classifier.0"), "classifier.1", 4096), "classifier.2")
    x = net.relu(net.linear(net.dropout(x, "classifier.3"), "classifier.4", 4096), "classifier.5")
    return net.linear(x, "classifier.6", 1000)


def vgg11(net: Net) -> str:
    x, i = "input", 0
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            x, i = net.maxpool(x, f"features.{i}", 2, 2), i + 1
        else:
            x, i = net.relu(net.conv(x, f"features.{i}", int(v), 3, 1, 1), f"features.{i + 1}"), i + 2
    x = net.flatten(net.adaptive_avgpool(x, "avgpool", 7))
    x = net.dropout(net.relu(net.linear(x, "classifier.0", 4096), "classifier.1"), "classifier.2")
    x = net.dropout(net.relu(net.linear(x, "classifier.3", 4096), "classifier.4"), "classifier.5")
    return net.linear(x, "classifier.6", 1000)


def resnet18(net: Net, flatten: str = "Flatten") -> str:
    x = net.relu(net.bn(net.conv("input", "conv1", 64, 7, 2, 3, bias=False), "bn1"), "relu")
    x = net.maxpool(x, "maxpool", 3, 2, 1)
    for stage, planes in enumerate((64, 128, 256, 512), start=1):
        for i in range(2):
            name, stride = f"layer{stage}.{i}", 2 if (i == 0 and stage > 1) else 1
            out = net.relu(net.bn(net.conv(x, f"{name}.conv1", planes, 3, stride, 1, bias=False), f"{name}.bn1"),
                           f"{name}.relu")
            out = net.bn(net.conv(out, f"{name}.conv2", planes, 3, 1, 1, bias=False), f"{name}.bn2")
            if stride != 1 or net.shape[x][1] != planes:
                x = net.bn(net.conv(x, f"{name}.downsample.0", planes, 1, stride, 0, bias=False),
                           f"{name}.downsample.1")
            x = net.relu(net.add(out, x, name), f"{name}.relu")
    x = net.adaptive_avgpool(x, "avgpool", 1)
    x = net.flatten(x) if flatten == "Flatten" else net.view_flat(x)
    return net.linear(x, "fc", 1000)


def small(net: Net, classes: int = 10) -> str:
    """A small CNN for tests of single nodes: conv, BN, ReLU, max pool, global pool, flatten, linear."""
    x = net.relu(net.bn(net.conv("input", "conv", 8, 3, 1, 1, bias=False), "bn"), "relu")
    x = net.maxpool(x, "pool", 2, 2)
    return net.linear(net.flatten(net.adaptive_avgpool(x, "avgpool", 1)), "fc", classes)
