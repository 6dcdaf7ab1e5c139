"""The standard CNNs, layer for layer as torchvision defines them, as training-iteration graphs."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any

from ..plugins import MODEL_GROUP, Registry, warn
from .builder import GraphBuilder
from .definition import Definition
from .graph import Graph, GraphError
from .ops.adaptive_avg_pool2d import adaptive_avg_pool2d
from .ops.add import add
from .ops.batch_norm2d import batch_norm2d
from .ops.conv2d import conv2d
from .ops.dropout import dropout
from .ops.linear import linear
from .ops.max_pool2d import max_pool2d
from .ops.relu import relu

NUM_CLASSES = 1000
DEFAULT_IMAGE_SIZE = 224
MAX_BATCH = 1 << 20
MAX_FOOTPRINT = 4 << 40  # beyond the host memory of any machine this could run on


def _begin(model: str, batch: int, image_size: int) -> tuple[GraphBuilder, int, int]:
    b = GraphBuilder(model, batch, image_size)
    images = b.input("input.images", (batch, 3, image_size, image_size))
    labels = b.input("input.labels", (batch,), "int32")
    return b, images, labels


def alexnet(batch: int, image_size: int = DEFAULT_IMAGE_SIZE) -> Graph:
    b, x, labels = _begin("alexnet", batch, image_size)
    x = relu(b, conv2d(b, x, "features.0", 64, 11, 4, 2), "features.1")
    x = max_pool2d(b, x, "features.2", 3, 2)
    x = relu(b, conv2d(b, x, "features.3", 192, 5, 1, 2), "features.4")
    x = max_pool2d(b, x, "features.5", 3, 2)
    x = relu(b, conv2d(b, x, "features.6", 384, 3, 1, 1), "features.7")
    x = relu(b, conv2d(b, x, "features.8", 256, 3, 1, 1), "features.9")
    x = relu(b, conv2d(b, x, "features.10", 256, 3, 1, 1), "features.11")
    x = max_pool2d(b, x, "features.12", 3, 2)
    x = adaptive_avg_pool2d(b, x, "avgpool", 6)
    x = dropout(b, x, "classifier.0")
    x = relu(b, linear(b, x, "classifier.1", 4096), "classifier.2")
    x = dropout(b, x, "classifier.3")
    x = relu(b, linear(b, x, "classifier.4", 4096), "classifier.5")
    return b.build(linear(b, x, "classifier.6", NUM_CLASSES), labels)


_VGG: dict[str, list[int | str]] = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


def vgg(name: str, batch: int, image_size: int = DEFAULT_IMAGE_SIZE) -> Graph:
    b, x, labels = _begin(name, batch, image_size)
    i = 0
    for v in _VGG[name]:
        if v == "M":
            x = max_pool2d(b, x, f"features.{i}", 2, 2)
            i += 1
        else:
            x = relu(b, conv2d(b, x, f"features.{i}", int(v), 3, 1, 1), f"features.{i + 1}")
            i += 2
    x = adaptive_avg_pool2d(b, x, "avgpool", 7)
    x = dropout(b, relu(b, linear(b, x, "classifier.0", 4096), "classifier.1"), "classifier.2")
    x = dropout(b, relu(b, linear(b, x, "classifier.3", 4096), "classifier.4"), "classifier.5")
    return b.build(linear(b, x, "classifier.6", NUM_CLASSES), labels)


def _basic_block(b: GraphBuilder, x: int, name: str, planes: int, stride: int) -> int:
    inplanes = b.shape(x)[1]
    out = relu(b, batch_norm2d(b, conv2d(b, x, f"{name}.conv1", planes, 3, stride, 1, bias=False),
                               f"{name}.bn1"), f"{name}.relu1")
    out = batch_norm2d(b, conv2d(b, out, f"{name}.conv2", planes, 3, 1, 1, bias=False), f"{name}.bn2")
    return relu(b, add(b, out, _shortcut(b, x, name, planes, stride, inplanes), f"{name}.add"),
                f"{name}.relu")


def _bottleneck(b: GraphBuilder, x: int, name: str, planes: int, stride: int) -> int:
    inplanes = b.shape(x)[1]
    out = relu(b, batch_norm2d(b, conv2d(b, x, f"{name}.conv1", planes, 1, 1, 0, bias=False),
                               f"{name}.bn1"), f"{name}.relu1")
    # torchvision's ResNet v1.5: the stride sits on the 3x3 convolution
    out = relu(b, batch_norm2d(b, conv2d(b, out, f"{name}.conv2", planes, 3, stride, 1, bias=False),
                               f"{name}.bn2"), f"{name}.relu2")
    out = batch_norm2d(b, conv2d(b, out, f"{name}.conv3", planes * 4, 1, 1, 0, bias=False), f"{name}.bn3")
    return relu(b, add(b, out, _shortcut(b, x, name, planes * 4, stride, inplanes), f"{name}.add"),
                f"{name}.relu")


def _shortcut(b: GraphBuilder, x: int, name: str, channels: int, stride: int, inplanes: int) -> int:
    if stride == 1 and inplanes == channels:
        return x
    down = conv2d(b, x, f"{name}.downsample.0", channels, 1, stride, 0, bias=False)
    return batch_norm2d(b, down, f"{name}.downsample.1")


_RESNET = {"resnet18": (_basic_block, 1, (2, 2, 2, 2)),
           "resnet50": (_bottleneck, 4, (3, 4, 6, 3)),
           "resnet152": (_bottleneck, 4, (3, 8, 36, 3))}


def resnet(name: str, batch: int, image_size: int = DEFAULT_IMAGE_SIZE) -> Graph:
    block, _, depths = _RESNET[name]
    b, x, labels = _begin(name, batch, image_size)
    x = relu(b, batch_norm2d(b, conv2d(b, x, "conv1", 64, 7, 2, 3, bias=False), "bn1"), "relu")
    x = max_pool2d(b, x, "maxpool", 3, 2, 1)
    for stage, (planes, depth) in enumerate(zip((64, 128, 256, 512), depths), start=1):
        for i in range(depth):
            x = block(b, x, f"layer{stage}.{i}", planes, 2 if (i == 0 and stage > 1) else 1)
    x = adaptive_avg_pool2d(b, x, "avgpool", 1)
    return b.build(linear(b, x, "fc", NUM_CLASSES), labels)




def _plugin(name: str, where: str, value: Any) -> tuple[str, Callable[[int, int], Graph]] | None:
    """A model from another package (entry point group `vmexplorer.models`): a builder (batch, image_size) ->
    Graph under a name like the built-in ones'; None, with a warning naming it, for anything else."""
    if not callable(value) or not re.fullmatch(r"[a-z][a-z0-9_.-]{0,39}", name):
        warn(f"the vmexplorer.models plugin {name!r} ({where}) is skipped: it should be a builder (batch, image_size) "
             "-> Graph, named in 1 to 40 lowercase letters, digits, '_', '.' or '-'")
        return None
    return name, value


# the built-in models, then those of other packages (`vmexplorer.plugins`), on first use
MODELS: Registry[Callable[[int, int], Graph]] = Registry({
    "alexnet": alexnet,
    **{name: partial(vgg, name) for name in _VGG},
    **{name: partial(resnet, name) for name in _RESNET},
}, MODEL_GROUP, _plugin)


def build_graph(model: str, batch: int, image_size: int = DEFAULT_IMAGE_SIZE, workspaces: bool = True,
                definition: Definition | None = None) -> Graph:
    """The graph of one training iteration; raises GraphError with a fix for any bad argument. Without
    `workspaces`, the graph of sessions recorded before they were graph tensors (schema 10 and older).
    `definition`: the forward layers of `model` where it is not built in (a model from a file)."""
    if definition is None and model not in MODELS:
        raise GraphError(f"unknown model {model!r}; choose one of: {', '.join(MODELS)}")
    if definition is not None and (model != definition.name or model in MODELS):
        raise GraphError(f"the model {model!r} is not the one its definition names ({definition.name!r}), or "
                         "takes a built-in model's name")
    if not isinstance(batch, int) or batch <= 0:
        raise GraphError(f"batch must be a positive integer, not {batch!r}")
    if batch > MAX_BATCH:
        raise GraphError(f"batch {batch} is beyond any sensible run (at most {MAX_BATCH})")
    if not isinstance(image_size, int) or image_size <= 0:
        raise GraphError(f"image size must be a positive integer, not {image_size!r}")
    graph = _built(model, batch, image_size) if definition is None else definition.graph(batch, image_size)
    if not workspaces:
        graph = graph.without_workspaces()
    if graph.footprint > MAX_FOOTPRINT:
        raise GraphError(f"{model} at batch {batch} needs {graph.footprint / 2**40:.1f} TiB, beyond any "
                         f"sensible host memory (at most {MAX_FOOTPRINT >> 40} TiB); use a smaller batch")
    return graph


def _built(model: str, batch: int, image_size: int) -> Graph:
    """The model's graph; a plugin's failure is a GraphError naming it, not a traceback."""
    if model not in MODELS.plugins:
        return MODELS[model](batch, image_size)
    try:
        graph = MODELS[model](batch, image_size)
    except GraphError:
        raise
    except Exception as e:
        raise GraphError(f"the model {model!r} (a plugin) failed to build at batch {batch} with {image_size}px "
                         f"images: {type(e).__name__}: {e}") from None
    if not isinstance(graph, Graph) or graph.key != (model, batch, image_size):
        raise GraphError(f"the model {model!r} (a plugin) gave {type(graph).__name__} "
                         f"{getattr(graph, 'key', '')}, not the Graph of {(model, batch, image_size)}")
    return graph
