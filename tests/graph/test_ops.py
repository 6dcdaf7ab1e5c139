"""The math of every op on numpy: gradients against finite differences, forwards against plain formulas.

As in Chainer's check_backward: for each op the table gives tiny float64 inputs; the analytic backward
must equal central differences of sum(forward(inputs) * R) for a random R. Operand orders are the
graph's (each op module records its op), and a test checks them against real graphs, so the engine can call
OPS[op.kind](xp, [arrays of op.reads], [arrays of op.writes], attrs) blindly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from vmexplorer.graph import MODELS, Graph, Kind, Op, Phase, Tensor, build_graph
from vmexplorer.graph.ops import OPS, AttrsError, op_attrs

Arrays = list[np.ndarray]


def run(kind: str, reads: Arrays, writes: Arrays, **attrs: Any) -> Arrays:
    OPS[kind](np, reads, writes, attrs)
    return writes


# --- the finite-difference gradient check ---------------------------------------------------------
@dataclass
class Case:
    name: str
    kind: str  # forward op kind; backward is kind + "_backward"
    inputs: Callable[[np.random.Generator], Arrays]  # forward reads
    outputs: Callable[[Arrays], list[tuple[tuple[int, ...], str]]]  # forward writes: (shape, dtype)
    wrt: tuple[int, ...]  # forward reads that get gradients, in backward's write order
    backward_reads: Callable[[Arrays, Arrays, np.ndarray], Arrays]  # (fwd reads, fwd writes, dy)
    attrs: dict[str, Any] = field(default_factory=dict)
    backward_attrs: dict[str, Any] = field(default_factory=dict)


def _conv_out(x: tuple[int, ...], w: tuple[int, ...], s: int, p: int) -> tuple[int, ...]:
    return (x[0], w[0], (x[2] + 2 * p - w[2]) // s + 1, (x[3] + 2 * p - w[3]) // s + 1)


def conv_case(name: str, x: tuple[int, ...], w: tuple[int, ...], s: int, p: int, bias: bool,
              input_grad: bool = True) -> Case:
    def inputs(rng: np.random.Generator) -> Arrays:
        arrays = [rng.standard_normal(x), rng.standard_normal(w)]
        return arrays + [rng.standard_normal(w[0])] if bias else arrays

    wrt = (0,) * input_grad + (1,) + (2,) * bias
    return Case(name, "conv2d", inputs, lambda r: [(_conv_out(x, w, s, p), "float64")], wrt,
                lambda r, o, dy: [r[0], r[1], dy],
                {"kernel": w[2], "stride": s, "padding": p, "bias": bias}, {"input_grad": input_grad})


def linear_case(name: str, x: tuple[int, ...], out: int, input_grad: bool = True) -> Case:
    features = math.prod(x[1:])
    return Case(name, "linear",
                lambda rng: [rng.standard_normal(x), rng.standard_normal((out, features)),
                             rng.standard_normal(out)],
                lambda r: [((x[0], out), "float64")], (0,) * input_grad + (1, 2),
                lambda r, o, dy: [r[0], r[1], dy], {"bias": True}, {"input_grad": input_grad})


def distinct(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values at least 0.1 apart, so no max-pool window has a near tie a finite difference could flip."""
    return rng.permutation(math.prod(shape)).reshape(shape) * 0.1 + 0.01


def pool_case(name: str, x: tuple[int, ...], k: int, s: int, p: int) -> Case:
    ho, wo = ((x[i] + 2 * p - k) // s + 1 for i in (2, 3))
    return Case(name, "max_pool2d", lambda rng: [distinct(rng, x)], lambda r: [((*x[:2], ho, wo), "float64")],
                (0,), lambda r, o, dy: [r[0], o[0], dy], {"kernel": k, "stride": s, "padding": p})


def avg_case(name: str, x: tuple[int, ...], size: int) -> Case:
    return Case(name, "adaptive_avg_pool2d", lambda rng: [rng.standard_normal(x)],
                lambda r: [((*x[:2], size, size), "float64")], (0,), lambda r, o, dy: [dy], {"size": size})


def bn_case(name: str, x: tuple[int, ...], input_grad: bool = True) -> Case:
    c = x[1]
    return Case(name, "batch_norm2d",
                lambda rng: [rng.standard_normal(x) * 2 + 1, rng.standard_normal(c), rng.standard_normal(c),
                             np.zeros(c), np.ones(c)],
                lambda r: [(x, "float64"), ((c,), "float64"), ((c,), "float64"), ((c,), "float64"),
                           ((c,), "float64")],
                (0,) * input_grad + (1, 2), lambda r, o, dy: [r[0], r[1], o[1], o[2], dy],
                {"eps": 1e-5, "momentum": 0.1}, {"input_grad": input_grad})


CASES = [
    conv_case("conv3x3-same-bias", (2, 3, 5, 5), (4, 3, 3, 3), 1, 1, True),
    conv_case("conv3x3-stride2-nobias", (2, 2, 7, 7), (3, 2, 3, 3), 2, 1, False),
    conv_case("conv1x1-stride2-downsample", (2, 3, 6, 6), (4, 3, 1, 1), 2, 0, False),
    conv_case("conv-stride-leaves-a-row", (1, 2, 6, 6), (2, 2, 3, 3), 2, 0, True),
    conv_case("conv5x5-first-layer-no-dx", (2, 3, 8, 8), (2, 3, 5, 5), 3, 2, True, input_grad=False),
    linear_case("linear-2d", (3, 5), 4),
    linear_case("linear-flattens-4d", (2, 2, 2, 2), 3),
    linear_case("linear-no-dx", (3, 5), 2, input_grad=False),
    Case("relu", "relu",
         lambda rng: [rng.choice([-1.0, 1.0], (2, 3, 4)) * rng.uniform(0.1, 1.0, (2, 3, 4))],
         lambda r: [(r[0].shape, "float64")], (0,), lambda r, o, dy: [o[0], dy]),
    pool_case("maxpool3x3-stride2-pad1", (2, 2, 7, 7), 3, 2, 1),
    pool_case("maxpool2x2-stride2", (1, 2, 6, 6), 2, 2, 0),
    pool_case("maxpool3x3-stride2-odd", (1, 1, 8, 8), 3, 2, 0),
    avg_case("avgpool-uneven-windows", (1, 2, 5, 5), 3),
    avg_case("avgpool-out-larger-than-in", (1, 2, 2, 2), 7),
    avg_case("avgpool-global", (2, 2, 4, 4), 1),
    avg_case("avgpool-identity", (1, 1, 3, 3), 3),
    bn_case("batchnorm", (2, 3, 3, 2)),
    bn_case("batchnorm-no-dx", (3, 2, 2, 2), input_grad=False),
    Case("dropout", "dropout", lambda rng: [rng.standard_normal((3, 4, 5))],
         lambda r: [(r[0].shape, "float64"), (r[0].shape, "uint8")], (0,), lambda r, o, dy: [o[1], dy],
         {"p": 0.5, "seed": 7, "iteration": 3}),
]


def forward(case: Case, reads: Arrays) -> Arrays:
    writes = [np.zeros(shape, dtype) for shape, dtype in case.outputs(reads)]
    # batch norm updates running stats in place: give each call fresh copies so calls stay independent
    return run(case.kind, [r.copy() for r in reads], writes, **case.attrs)


def numerical_grad(f: Callable[[], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        keep = x[i]
        x[i] = keep + eps
        hi = f()
        x[i] = keep - eps
        lo = f()
        x[i] = keep
        g[i] = (hi - lo) / (2 * eps)
    return g


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backward_equals_finite_differences(case: Case) -> None:
    rng = np.random.default_rng(0)
    reads = case.inputs(rng)
    outs = forward(case, reads)
    weights = rng.standard_normal(outs[0].shape)  # L = sum(y * R), so dL/dy = R
    grads = [np.full(reads[i].shape, np.nan) for i in case.wrt]
    run(case.kind + "_backward", case.backward_reads(reads, outs, weights), grads,
        **case.attrs, **case.backward_attrs)
    for i, analytic in zip(case.wrt, grads):
        numeric = numerical_grad(lambda: float((forward(case, reads)[0] * weights).sum()), reads[i])
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=f"read {i}")


def test_loss_gradient_equals_finite_differences() -> None:
    rng = np.random.default_rng(1)
    logits, labels = rng.standard_normal((4, 6)) * 3, np.array([0, 5, 2, 2], dtype=np.int32)

    def loss() -> float:
        return float(run("softmax_cross_entropy", [logits, labels], [np.zeros(()), np.zeros((4, 6))])[0])

    dlogits = run("softmax_cross_entropy", [logits, labels], [np.zeros(()), np.zeros((4, 6))])[1]
    np.testing.assert_allclose(dlogits, numerical_grad(loss, logits), rtol=1e-6, atol=1e-8)


# --- forwards against plain formulas --------------------------------------------------------------
def test_conv_equals_a_naive_loop() -> None:
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    for stride, pad in ((1, 0), (1, 1), (2, 1), (2, 0)):
        ho = (5 + 2 * pad - 3) // stride + 1
        xp_ = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        want = np.zeros((1, 3, ho, ho))
        for o in range(3):
            for i in range(ho):
                for j in range(ho):
                    patch = xp_[0, :, i * stride:i * stride + 3, j * stride:j * stride + 3]
                    want[0, o, i, j] = (patch * w[o]).sum() + b[o]
        got = run("conv2d", [x, w, b], [np.zeros((1, 3, ho, ho))], kernel=3, stride=stride, padding=pad,
                  bias=True)[0]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"stride {stride} pad {pad}")


@pytest.mark.parametrize("h,w,size", [(5, 7, 3), (2, 2, 7), (1, 1, 6), (6, 6, 4), (7, 7, 7), (9, 4, 1)])
def test_adaptive_avg_pool_equals_pytorchs_explicit_windows(h: int, w: int, size: int) -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, h, w))
    want = np.zeros((2, 3, size, size))
    for i in range(size):
        for j in range(size):
            r0, r1 = math.floor(i * h / size), math.ceil((i + 1) * h / size)
            c0, c1 = math.floor(j * w / size), math.ceil((j + 1) * w / size)
            want[:, :, i, j] = x[:, :, r0:r1, c0:c1].mean(axis=(2, 3))
    got = run("adaptive_avg_pool2d", [x], [np.zeros((2, 3, size, size))], size=size)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_max_pool_routes_ties_to_the_first_maximum_of_each_window() -> None:
    x = np.zeros((1, 1, 3, 3))  # every window is one big tie
    y = run("max_pool2d", [x], [np.zeros((1, 1, 2, 2))], kernel=2, stride=1, padding=0)[0]
    dy = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    dx = run("max_pool2d_backward", [x, y, dy], [np.zeros((1, 1, 3, 3))], kernel=2, stride=1, padding=0)[0]
    # each window's first element in row-major order is its top-left corner
    np.testing.assert_array_equal(dx[0, 0], [[1, 2, 0], [3, 4, 0], [0, 0, 0]])


def test_max_pool_padding_never_wins_over_negative_inputs() -> None:
    x = np.full((1, 1, 4, 4), -5.0)  # a zero-padded pool would output 0 at the borders
    y = run("max_pool2d", [x], [np.zeros((1, 1, 2, 2))], kernel=3, stride=2, padding=1)[0]
    np.testing.assert_array_equal(y, -5.0)


def test_batch_norm_normalises_and_updates_running_stats_like_pytorch() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 5, 5)) * 3 + 2
    gamma, beta = np.array([1.0, 2.0, 0.5]), np.array([0.0, -1.0, 3.0])
    running_mean, running_var = np.array([0.5, 0.0, -1.0]), np.array([1.0, 2.0, 0.5])
    writes = [np.zeros_like(x)] + [np.zeros(3) for _ in range(4)]
    y, saved_mean, saved_invstd, new_mean, new_var = run(
        "batch_norm2d", [x, gamma, beta, running_mean, running_var], writes, eps=1e-5, momentum=0.1)
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(saved_mean, mean)
    np.testing.assert_allclose(saved_invstd, 1 / np.sqrt(var + 1e-5))
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), beta, atol=1e-12)
    np.testing.assert_allclose(y.std(axis=(0, 2, 3)), gamma * np.sqrt(var / (var + 1e-5)))
    np.testing.assert_allclose(new_mean, 0.9 * running_mean + 0.1 * mean)
    unbiased = x.var(axis=(0, 2, 3), ddof=1)  # PyTorch's running_var uses the unbiased variance
    np.testing.assert_allclose(new_var, 0.9 * running_var + 0.1 * unbiased)


def test_batch_norm_updates_running_stats_in_place_when_reads_and_writes_share_buffers() -> None:
    x = np.random.default_rng(5).standard_normal((2, 2, 3, 3))
    rm, rv = np.zeros(2), np.ones(2)
    before = rm.copy(), rv.copy()
    run("batch_norm2d", [x, np.ones(2), np.zeros(2), rm, rv],
        [np.zeros_like(x), np.zeros(2), np.zeros(2), rm, rv], eps=1e-5, momentum=0.1)
    np.testing.assert_allclose(rm, 0.1 * x.mean(axis=(0, 2, 3)) + 0.9 * before[0])
    np.testing.assert_allclose(rv, 0.1 * x.var(axis=(0, 2, 3), ddof=1) + 0.9 * before[1])


def test_batch_norm_refuses_one_value_per_channel() -> None:
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        run("batch_norm2d", [np.ones((1, 2, 1, 1)), np.ones(2), np.zeros(2), np.zeros(2), np.ones(2)],
            [np.zeros((1, 2, 1, 1))] + [np.zeros(2) for _ in range(4)], op="bn")


def _dropout(x: np.ndarray, seed: int, iteration: int) -> tuple[np.ndarray, np.ndarray]:
    y, mask = run("dropout", [x], [np.zeros_like(x), np.zeros(x.shape, np.uint8)], p=0.5, seed=seed,
                  iteration=iteration)
    return y, mask


def test_dropout_masks_are_reproducible_per_seed_and_iteration_and_scaled() -> None:
    x = np.random.default_rng(6).standard_normal((100, 100)).astype(np.float32)
    y, mask = _dropout(x, 3, 0)
    assert mask.dtype == np.uint8 and set(np.unique(mask)) == {0, 1}
    assert abs(mask.mean() - 0.5) < 0.02
    np.testing.assert_array_equal(y, x * mask * np.float32(2.0))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(_dropout(x, 3, 0)[1], mask)
    assert (_dropout(x, 3, 1)[1] != mask).mean() > 0.4  # a new iteration draws a new mask
    assert (_dropout(x, 4, 0)[1] != mask).mean() > 0.4


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 1.0])
def test_dropout_keeps_a_fraction_one_minus_p_with_no_pattern(p: float) -> None:
    x = np.ones((50, 2000), np.float32)
    y, mask = run("dropout", [x], [np.zeros_like(x), np.zeros(x.shape, np.uint8)], p=p, seed=11, iteration=2)
    assert abs(mask.mean() - (1 - p)) < 0.005
    np.testing.assert_array_equal(y, mask * np.float32(0 if p == 1 else 1 / (1 - p)))
    if 0 < p < 1:  # neighbours in memory are independent draws
        m = mask.ravel().astype(np.float64)
        assert abs(np.corrcoef(m[:-1], m[1:])[0, 1]) < 0.01


def test_dropout_backward_uses_the_saved_mask_not_the_seed() -> None:
    rng = np.random.default_rng(7)
    mask = (rng.random((4, 5)) < 0.3).astype(np.uint8)
    dy = rng.standard_normal((4, 5))
    dx = run("dropout_backward", [mask, dy], [np.zeros((4, 5))], p=0.5)[0]
    np.testing.assert_array_equal(dx, dy * mask * 2.0)


def test_softmax_cross_entropy_equals_the_log_sum_exp_formula_even_for_huge_logits() -> None:
    rng = np.random.default_rng(8)
    logits = rng.standard_normal((5, 7)) * 4 + np.array([[1000.0]])  # exp would overflow unshifted
    labels = np.array([0, 6, 3, 3, 1], dtype=np.int32)
    loss, dlogits = run("softmax_cross_entropy", [logits, labels], [np.zeros(()), np.zeros((5, 7))])
    m = logits.max(axis=1)
    lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=1))
    assert float(loss) == pytest.approx(np.mean(lse - logits[np.arange(5), labels]), rel=1e-12)
    softmax = np.exp(logits - lse[:, None])
    np.testing.assert_allclose(dlogits, (softmax - np.eye(7)[labels]) / 5, atol=1e-15)


def test_add_sums_every_operand() -> None:
    a, b, c = (np.full((2, 3), v) for v in (1.0, 2.0, 4.0))
    np.testing.assert_array_equal(run("add", [a, b], [np.zeros((2, 3))])[0], 3.0)
    np.testing.assert_array_equal(run("add", [a, b, c], [np.zeros((2, 3))])[0], 7.0)


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_sgd_two_steps_equal_pytorchs_update_rule(weight_decay: float) -> None:
    rng = np.random.default_rng(9)
    params = [rng.standard_normal((3, 2)), rng.standard_normal(3)]
    grads = [[rng.standard_normal(p.shape) for p in params] for _ in range(2)]
    lr, momentum = 0.1, 0.9
    # torch.optim.SGD, written out: the buffer is created on the first step as a copy of the gradient
    want = [p.copy() for p in params]
    bufs: list[np.ndarray | None] = [None, None]
    for step in grads:
        for k, (p, g) in enumerate(zip(want, step)):
            d = g + weight_decay * p
            bufs[k] = d.copy() if bufs[k] is None else momentum * bufs[k] + d
            p -= lr * bufs[k]
    ws, ms = [p.copy() for p in params], [np.zeros_like(p) for p in params]  # engine zero-fills momentum
    for step in grads:
        reads = [a for k in range(2) for a in (ws[k], step[k], ms[k])]
        writes = [a for k in range(2) for a in (ws[k], ms[k])]
        run("sgd_momentum", reads, writes, lr=lr, momentum=momentum, weight_decay=weight_decay)
    for got, expected, buf, m in zip(ws, want, bufs, ms):
        np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(m, buf, rtol=1e-14, atol=1e-15)


def test_ops_name_the_op_when_the_operands_do_not_match_the_attrs() -> None:
    x, w = np.zeros((1, 1, 3, 3)), np.zeros((1, 1, 3, 3))
    with pytest.raises(ValueError, match="layer1.conv.*expects 3 reads"):
        run("conv2d", [x, w], [np.zeros((1, 1, 1, 1))], op="layer1.conv", kernel=3, stride=1, padding=0,
            bias=True)


# --- the graph's operand orders are the ones the ops assume ---------------------------------------
def _forward_of(g: Graph) -> dict[str, Op]:
    return {op.layer: op for op in g.ops if op.phase is Phase.FORWARD}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_operand_orders_match_the_graph(model: str) -> None:
    g = build_graph(model, 2, 96 if model == "alexnet" else 64)
    fwd = _forward_of(g)
    shape = [t.shape for t in g.tensors]
    assert set(OPS) >= {op.kind for op in g.ops}
    for op in g.ops:
        # a convolution's workspace is its last write, and an overlapping max pool's backward's; no other op has one
        ws = [t for t in op.writes if g.tensors[t].kind is Kind.WORKSPACE]
        scratch = op.kind.startswith("conv2d") or op.kind == "max_pool2d_backward" and "scratch" in dict(op.attrs)
        assert ws == (list(op.writes[-1:]) if scratch else []), op.name
        r, w = op.reads, op.writes[:len(op.writes) - len(ws)]
        if op.kind.endswith("_backward"):
            f = fwd[op.layer]
            assert op.kind == f.kind + "_backward"
            dy = r[-1]
            assert g.tensors[dy].kind is Kind.GRADIENT and shape[dy] == shape[f.writes[0]], op.name
            grads = [shape[t] for t in w]
            if op.kind in ("conv2d_backward", "linear_backward"):
                assert r == (f.reads[0], f.reads[1], dy)
                want = [shape[t] for t in f.reads if g.tensors[t].kind is not Kind.WORKSPACE]
                assert grads in (want, want[1:]), op.name
            elif op.kind == "relu_backward":
                assert r == (f.writes[0], dy) and grads == [shape[f.reads[0]]]
            elif op.kind == "max_pool2d_backward":
                assert r == (f.reads[0], f.writes[0], dy) and grads == [shape[f.reads[0]]]
            elif op.kind == "adaptive_avg_pool2d_backward":
                assert r == (dy,) and grads == [shape[f.reads[0]]]
            elif op.kind == "batch_norm2d_backward":
                assert r == (f.reads[0], f.reads[1], f.writes[1], f.writes[2], dy)
                assert grads == [shape[t] for t in f.reads[:3]]
            elif op.kind == "dropout_backward":
                assert r == (f.writes[1], dy) and g.tensors[f.writes[1]].dtype == "uint8"
            else:
                raise AssertionError(f"no operand-order check for {op.kind}")
        elif op.kind == "batch_norm2d":
            assert len(r) == 5 and len(w) == 5 and r[3:] == w[3:]  # running stats updated in place
            assert [shape[t] for t in w[1:]] == [shape[r[1]]] * 4
        elif op.kind == "dropout":
            assert len(r) == 1 and len(w) == 2 and shape[w[1]] == shape[r[0]]
        elif op.kind in ("conv2d", "linear"):
            assert len(r) in (2, 3) and len(w) == 1 and g.tensors[r[1]].kind is Kind.WEIGHT
        elif op.kind == "softmax_cross_entropy":
            assert g.tensors[r[1]].dtype == "int32" and shape[w[0]] == () and shape[w[1]] == shape[r[0]]
        elif op.kind == "sgd_momentum":
            triples = [r[i:i + 3] for i in range(0, len(r), 3)]
            assert [t for W, _, m in triples for t in (W, m)] == list(w)
            assert all(g.tensors[d].kind is Kind.GRADIENT and shape[d] == shape[W] for W, d, _ in triples)
        elif op.kind == "add":
            assert len(r) >= 2 and len(w) == 1 and all(shape[t] == shape[w[0]] for t in r)
        else:
            assert len(r) == 1 and len(w) == 1, op.name


def test_op_attrs_refuses_an_op_whose_layer_recorded_nothing() -> None:
    x = Tensor("x", Kind.INPUT, (1, 1, 3, 3), "float32", 36, -1, (0,))
    conv = Op("c", "conv2d", Phase.FORWARD, "c", (0,), (0,), 0, 0)
    with pytest.raises(AttrsError, match="lacks attrs kernel, stride, padding, bias"):
        op_attrs(Graph("toy", 1, 3, (x,), (conv,)), 0)


# --- a whole training iteration, op by op, on numpy -----------------------------------------------
def allocate(g: Graph, rng: np.random.Generator) -> Arrays:
    """One buffer per tensor, as the engine will. Weights as torchvision's VGG: He-normal convolutions,
    N(0, 0.01) linears, zero biases; batch norm at identity; momentum zero-filled."""
    bufs = []
    for t in g.tensors:
        a = np.zeros(t.shape, t.dtype)
        if t.kind is Kind.WEIGHT and len(t.shape) > 1:
            std = math.sqrt(2 / math.prod(t.shape[1:])) if len(t.shape) == 4 else 0.01
            a[...] = rng.standard_normal(t.shape, dtype=np.float32) * np.float32(std)
        elif t.kind is Kind.WEIGHT and t.name.endswith(".weight"):  # batch-norm gamma
            a[...] = 1
        elif t.name.endswith(".running_var"):
            a[...] = 1
        elif t.name == "input.images":
            a[...] = rng.standard_normal(t.shape, dtype=np.float32)
        elif t.name == "input.labels":
            a[...] = rng.integers(0, 1000, t.shape)
        bufs.append(a)
    return bufs


def train(g: Graph, iterations: int, lr: float) -> list[float]:
    bufs = allocate(g, np.random.default_rng(0))
    loss = g.tensor_id("loss.value")
    losses = []
    for it in range(iterations):
        for i, op in enumerate(g.ops):
            OPS[op.kind](np, [bufs[t] for t in op.reads], [bufs[t] for t in op.writes],
                         op_attrs(g, i, iteration=it, lr=lr, momentum=0.9))
        losses.append(float(bufs[loss]))
    for t, b in zip(g.tensors, bufs):
        assert np.isfinite(b).all(), t.name
    return losses


# Two images and ~100M weights memorise the batch in one step; with dropout drawing a new mask every
# iteration a large step then overshoots, so the models without batch norm take small steps.
@pytest.mark.parametrize("model,size,lr", [("resnet18", 32, 0.05), ("vgg11", 32, 3e-4), ("alexnet", 96, 3e-4)])
def test_training_on_one_batch_lowers_the_loss(model: str, size: int, lr: float) -> None:
    losses = train(build_graph(model, 2, size), 5, lr)
    assert losses[-1] < losses[0] / 2, losses


def test_the_whole_backward_pass_is_the_gradient_of_the_loss() -> None:
    """Directional derivative of the loss along a random direction of every weight, in float64:
    checks the glue (gradient sums, residual adds, operand orders) that single-op tests cannot."""
    g = build_graph("resnet18", 2, 32)
    bufs = [b.astype(np.float64) if b.dtype == np.float32 else b for b in allocate(g, np.random.default_rng(1))]
    attrs = [op_attrs(g, i) for i in range(len(g.ops))]

    def run_phases(phases: tuple[Phase, ...]) -> float:
        for i, op in enumerate(g.ops):
            if op.phase in phases:
                OPS[op.kind](np, [bufs[t] for t in op.reads], [bufs[t] for t in op.writes], attrs[i])
        return float(bufs[g.tensor_id("loss.value")])

    run_phases((Phase.FORWARD, Phase.LOSS, Phase.BACKWARD))
    grad_of = {op.reads[k]: op.reads[k + 1] for op in g.ops if op.kind == "sgd_momentum"
               for k in range(0, len(op.reads), 3)}
    rng = np.random.default_rng(2)
    direction = {w: rng.standard_normal(bufs[w].shape) for w in grad_of}
    norm = math.sqrt(sum(float((v * v).sum()) for v in direction.values()))
    direction = {w: v / norm for w, v in direction.items()}  # a step of eps in all weights together
    analytic = sum(float((bufs[d] * direction[w]).sum()) for w, d in grad_of.items())
    eps, base = 1e-6, {w: bufs[w].copy() for w in grad_of}
    losses = []
    for sign in (1, -1):
        for w in grad_of:
            bufs[w][...] = base[w] + sign * eps * direction[w]
        losses.append(run_phases((Phase.FORWARD, Phase.LOSS)))
    assert (losses[0] - losses[1]) / (2 * eps) == pytest.approx(analytic, rel=1e-5)


def test_op_attrs_merge_the_run_settings() -> None:
    g = build_graph("alexnet", 2, 96)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for i, op in enumerate(g.ops):
        by_kind.setdefault(op.kind, []).append(op_attrs(g, i, iteration=4, seed=1, lr=0.5, allow_tf32=False))
    assert by_kind["conv2d"][0] == {"op": "features.0", "kernel": 11, "stride": 4, "padding": 2, "bias": True,
                                    "allow_tf32": False, "deterministic": False,
                                    "autotune": False, "workspace": True}
    assert by_kind["conv2d_backward"][-1]["input_grad"] is False  # the first layer's input is the batch
    assert all(a["input_grad"] for a in by_kind["conv2d_backward"][:-1])
    seeds = {a["seed"] for a in by_kind["dropout"]}
    assert len(seeds) == 2 and all(a["iteration"] == 4 for a in by_kind["dropout"])
    assert all(a["lr"] == 0.5 and a["momentum"] == 0.9 for a in by_kind["sgd_momentum"])
