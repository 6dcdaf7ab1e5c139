"""vmexplorer/graph/recompute.py: recomputing an activation is its forward op run again as an op of the
graph, before the op that reads it next; the original dies at its last forward use, the copy serves every
later use, and training on the graph is the same training, bit for bit."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from vmexplorer.graph import Graph, GraphError, Kind, Phase, build_graph
from vmexplorer.graph.ops import OPS, op_attrs
from vmexplorer.graph.recompute import SUFFIX, Recompute, recomputed


def _first_backward_use(g: Graph, t: int) -> int:
    return next(k for k in g.uses[t] if g.ops[k].phase is Phase.BACKWARD)


def _kept_for_backward(g: Graph, layers: tuple[str, ...]) -> list[Recompute]:
    """Every activation the forward ops of `layers` write that backward reads, made again before its first
    backward use: checkpointing those layers, whose inputs stay."""
    return [Recompute(t, _first_backward_use(g, t)) for t, tensor in enumerate(g.tensors)
            if tensor.kind is Kind.ACTIVATION and not tensor.persistent
            and g.ops[tensor.producer].phase is Phase.FORWARD and g.ops[tensor.producer].layer in layers
            and any(g.ops[k].phase is Phase.BACKWARD for k in g.uses[t])]


def test_a_recomputed_activation_dies_at_its_last_forward_use_and_its_copy_serves_the_backward_pass() -> None:
    g = build_graph("vgg11", 2, 32)
    t = g.tensor_id("features.1.out")  # a ReLU's output: the next convolution reads it, and so does backward
    before = _first_backward_use(g, t)
    r = recomputed(g, [Recompute(t, before)])
    assert len(r.ops) == len(g.ops) + 1
    rerun = r.ops[before]
    assert rerun.phase is Phase.RECOMPUTE and rerun.kind == g.ops[g.tensors[t].producer].kind
    assert r.ops[before + 1] == g.ops[before].__class__(**{**g.ops[before].__dict__, "reads": r.ops[before + 1].reads})
    copy = r.tensor_id("features.1.out" + SUFFIX)
    assert r.tensors[copy].producer == before
    assert all(r.ops[k].phase is not Phase.BACKWARD for k in r.uses[r.tensor_id("features.1.out")])
    assert all(r.ops[k].phase is Phase.BACKWARD for k in r.tensors[copy].consumers)
    # what it frees between its last forward use and its re-run, its input takes: the re-run reads it
    loss = next(k for k in range(before) if g.ops[k].phase is Phase.LOSS)
    conv = g.tensor_id("features.0.out")
    assert r.live_bytes[loss] == g.live_bytes[loss] and r.last_use[conv] == before
    # with its input made again too, from the images (kept anyway), the feature map is freed until then
    both = recomputed(g, [Recompute(conv, before), Recompute(t, before)])
    assert both.live_bytes[loss] == g.live_bytes[loss] - g.tensors[t].nbytes


def test_a_re_run_writes_what_its_op_writes_but_updates_no_running_statistics() -> None:
    g = build_graph("resnet18", 2, 32)
    r = recomputed(g, _kept_for_backward(g, ("layer1.0.bn1",)))
    rerun = next(op for op in r.ops if op.phase is Phase.RECOMPUTE)
    assert rerun.kind == "batch_norm2d"
    persistent_written = [r.tensors[w].name for w in rerun.writes if r.tensors[w].persistent]
    assert persistent_written == []
    # what it writes beyond the copies lives during the re-run only
    assert all(r.last_use[w] == r.ops.index(rerun) for w in rerun.writes
               if not r.tensors[w].name.endswith(SUFFIX))


def test_a_re_run_of_a_convolution_holds_a_workspace_of_its_own_fitted_like_the_forwards() -> None:
    g = build_graph("vgg11", 2, 32)
    conv, relu = g.tensor_id("features.0.out"), g.tensor_id("features.1.out")
    # the ReLU's output is what backward reads; its input, the convolution's, is made again just for it
    before = _first_backward_use(g, relu)
    steps = [Recompute(conv, before), Recompute(relu, before)]
    r = recomputed(g, steps)
    k = next(i for i, op in enumerate(r.ops) if op.phase is Phase.RECOMPUTE)
    assert r.ops[k].kind == "conv2d" and r.ops[k + 1].kind == "relu"
    assert r.workspace_bytes[k] == g.workspace_bytes[g.tensors[conv].producer] > 0
    assert [x.kind for x in r.tensors[-1:]] == [Kind.WORKSPACE] and r.tensors[-1].producer == k
    assert r.last_use[r.tensor_id("features.0.out" + SUFFIX)] == k + 1
    fitted = recomputed(g.fitted(g.footprint // 2), steps)
    assert fitted.capacity == g.footprint // 2 and fitted.workspace_bytes[k] <= r.workspace_bytes[k]


@pytest.mark.parametrize("step,why", [
    (lambda g: Recompute(g.tensor_id("features.0.weight"), 5), "not an activation"),
    (lambda g: Recompute(g.tensor_id("features.1.out"), 0), "not after"),
    (lambda g: Recompute(g.tensor_id("features.0.out"), len(g.ops) - 1), "after its last use"),
    (lambda g: Recompute(10**6, 3), "no such tensor"),
])
def test_a_step_that_cannot_run_is_refused_naming_the_tensor(step: object, why: str) -> None:
    g = build_graph("vgg11", 2, 32)
    with pytest.raises(GraphError, match=why):
        recomputed(g, [step(g)])  # type: ignore[operator]


def test_a_tensor_is_recomputed_once() -> None:
    g = build_graph("vgg11", 2, 32)
    t = g.tensor_id("features.1.out")
    with pytest.raises(GraphError, match="twice"):
        recomputed(g, [Recompute(t, _first_backward_use(g, t)), Recompute(t, g.last_use[t])])


# --- the same training, on numpy ------------------------------------------------------------------
def _initial(t: object) -> np.ndarray:
    """A tensor's starting value from its name alone, so two graphs of one model start alike."""
    name, shape, dtype, kind = t.name, t.shape, t.dtype, t.kind  # type: ignore[attr-defined]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    a = np.zeros(shape, dtype)
    if kind is Kind.WEIGHT and len(shape) > 1:
        a[...] = rng.standard_normal(shape, dtype=np.float32) * np.float32(math.sqrt(1 / math.prod(shape[1:])))
    elif kind is Kind.WEIGHT and name.endswith(".weight") or name.endswith(".running_var"):
        a[...] = 1
    elif name == "input.images":
        a[...] = rng.standard_normal(shape, dtype=np.float32)
    elif name == "input.labels":
        a[...] = rng.integers(0, 1000, shape)
    return a


def _train(g: Graph, iterations: int) -> dict[str, np.ndarray]:
    bufs = [_initial(t) for t in g.tensors]
    for it in range(iterations):
        for i, op in enumerate(g.ops):
            OPS[op.kind](np, [bufs[t] for t in op.reads], [bufs[t] for t in op.writes],
                         op_attrs(g, i, iteration=it, lr=1e-3, momentum=0.9, seed=7))
    return {t.name: b for t, b in zip(g.tensors, bufs) if t.persistent}


@pytest.mark.parametrize("model,size,layers", [
    ("resnet18", 32, ("layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu1", "layer1.0.conv2", "layer1.0.bn2")),
    ("alexnet", 64, ("classifier.0", "classifier.1", "classifier.2", "classifier.3")),  # dropout, linear, relu
])
def test_training_with_recomputation_leaves_every_weight_and_statistic_bit_identical(
        model: str, size: int, layers: tuple[str, ...]) -> None:
    g = build_graph(model, 2, size)
    steps = _kept_for_backward(g, layers)
    assert len(steps) >= 3
    plain, again = _train(g, 2), _train(recomputed(g, steps), 2)
    assert plain.keys() == again.keys()
    assert [name for name in plain if not np.array_equal(plain[name], again[name])] == []
