"""Every op on cupy against PyTorch on the same GPU, forward and backward.

Relative error (Frobenius norm of the difference over that of PyTorch's result) must stay below 1e-5
with TF32 off on both sides and below 1e-3 with TF32 allowed. Convolutions run through the cuDNN
frontend (nvidia-cudnn-frontend), whose engine filter follows the `allow_tf32` attr as PyTorch's
follows torch.backends.cudnn.allow_tf32. CuPy's matmuls use TF32 only when CUPY_TF32=1 is set before
cupy is imported, so with TF32 "allowed" the linear layer may still run in full fp32; both pass 1e-3.

Run on the device:  python -m pytest -q -m gpu tests/gpu
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

cp = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")
F = torch.nn.functional


def _gpu_count() -> int:
    try:
        return int(cp.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device: cupy raises its own CUDA errors
        return 0


if _gpu_count() == 0 or not torch.cuda.is_available():
    pytest.skip("no CUDA device for cupy and torch", allow_module_level=True)

from vmexplorer.graph.ops import OPS  # noqa: E402  (after the skip: importing is fine, running is not)

pytestmark = pytest.mark.gpu


@pytest.fixture(params=[False, True], ids=["fp32", "tf32"])
def tf32(request: pytest.FixtureRequest) -> Iterator[bool]:
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = request.param
    yield request.param
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def tolerance(tf32: bool) -> float:
    return 1e-3 if tf32 else 1e-5


def rel_err(ours: Any, ref: Any) -> float:
    a = cp.asnumpy(ours).astype(np.float64)
    b = ref.detach().double().cpu().numpy()
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def close(ours: Any, ref: Any, tol: float, what: str) -> None:
    err = rel_err(ours, ref)
    assert err < tol, f"{what}: relative error {err:.2e} >= {tol:.0e}"


def rand(rng: np.random.Generator, *shape: int) -> tuple[Any, Any]:
    """The same float32 values as a cupy array and as a torch leaf tensor that wants a gradient."""
    a = rng.standard_normal(shape).astype(np.float32)
    return cp.asarray(a), torch.tensor(a, device="cuda", requires_grad=True)


def run(kind: str, reads: list[Any], writes: list[Any], **attrs: Any) -> list[Any]:
    OPS[kind](cp, reads, writes, attrs)
    cp.cuda.get_current_stream().synchronize()
    return writes


def empty(*shape: int, dtype: Any = np.float32) -> Any:
    return cp.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0, dtype=dtype)  # unwritten shows


CONVS = [  # (x shape, out channels, kernel, stride, padding, bias): the layer shapes of the models
    ((4, 3, 64, 64), 16, 7, 2, 3, False),  # resnet conv1
    ((2, 3, 96, 96), 16, 11, 4, 2, True),  # alexnet features.0
    ((4, 16, 28, 28), 32, 3, 1, 1, True),  # vgg
    ((4, 16, 28, 28), 32, 3, 2, 1, False),  # resnet stride-2 3x3
    ((4, 16, 14, 14), 32, 1, 2, 0, False),  # resnet downsample
    ((2, 8, 13, 13), 8, 5, 1, 2, True),  # alexnet features.3, odd size
]


@pytest.mark.parametrize("shape,out,k,s,p,bias", CONVS)
@pytest.mark.parametrize("input_grad", [True, False])
def test_conv2d(shape: tuple[int, ...], out: int, k: int, s: int, p: int, bias: bool, input_grad: bool,
                tf32: bool) -> None:
    rng = np.random.default_rng(0)
    x, tx = rand(rng, *shape)
    w, tw = rand(rng, out, shape[1], k, k)
    b, tb = rand(rng, out)
    ty = F.conv2d(tx, tw, tb if bias else None, stride=s, padding=p)
    dy, tdy = rand(rng, *ty.shape)
    ty.backward(tdy)
    attrs = dict(kernel=k, stride=s, padding=p, bias=bias, input_grad=input_grad, allow_tf32=tf32)
    (y,) = run("conv2d", [x, w] + [b] * bias, [empty(*ty.shape)], **attrs)
    grads = run("conv2d_backward", [x, w, dy],
                [empty(*shape)] * input_grad + [empty(*w.shape)] + [empty(out)] * bias, **attrs)
    tol = tolerance(tf32)
    close(y, ty, tol, "y")
    refs = [tx.grad] * input_grad + [tw.grad] + [tb.grad] * bias
    for name, ours, ref in zip(["dx"] * input_grad + ["dW"] + ["db"] * bias, grads, refs):
        close(ours, ref, tol, name)


@pytest.mark.parametrize("shape,out", [((8, 256, 2, 2), 100), ((8, 300), 50)])
def test_linear(shape: tuple[int, ...], out: int, tf32: bool) -> None:
    rng = np.random.default_rng(1)
    x, tx = rand(rng, *shape)
    w, tw = rand(rng, out, math.prod(shape[1:]))
    b, tb = rand(rng, out)
    ty = F.linear(tx.flatten(1), tw, tb)
    dy, tdy = rand(rng, *ty.shape)
    ty.backward(tdy)
    attrs = dict(bias=True, input_grad=True, allow_tf32=tf32)
    (y,) = run("linear", [x, w, b], [empty(*ty.shape)], **attrs)
    dx, dw, db = run("linear_backward", [x, w, dy], [empty(*shape), empty(*w.shape), empty(out)], **attrs)
    tol = tolerance(tf32)
    for name, ours, ref in (("y", y, ty), ("dx", dx, tx.grad), ("dW", dw, tw.grad), ("db", db, tb.grad)):
        close(ours, ref, tol, name)


def test_relu() -> None:
    rng = np.random.default_rng(2)
    x, tx = rand(rng, 4, 8, 9, 9)
    ty = F.relu(tx)
    dy, tdy = rand(rng, *ty.shape)
    ty.backward(tdy)
    (y,) = run("relu", [x], [empty(*x.shape)])
    (dx,) = run("relu_backward", [y, dy], [empty(*x.shape)])
    close(y, ty, 1e-7, "y")
    close(dx, tx.grad, 1e-7, "dx")


@pytest.mark.parametrize("shape,k,s,p", [((4, 8, 32, 32), 3, 2, 1), ((4, 8, 27, 27), 3, 2, 0),
                                         ((4, 8, 16, 16), 2, 2, 0)])
def test_max_pool2d(shape: tuple[int, ...], k: int, s: int, p: int) -> None:
    rng = np.random.default_rng(3)
    x, tx = rand(rng, *shape)
    ty = F.max_pool2d(tx, k, s, p)
    dy, tdy = rand(rng, *ty.shape)
    ty.backward(tdy)
    (y,) = run("max_pool2d", [x], [empty(*ty.shape)], kernel=k, stride=s, padding=p)
    (dx,) = run("max_pool2d_backward", [x, y, dy], [empty(*shape)], kernel=k, stride=s, padding=p)
    close(y, ty, 1e-7, "y")
    close(dx, tx.grad, 1e-6, "dx")


@pytest.mark.parametrize("shape,size", [((4, 8, 13, 13), 6), ((2, 8, 1, 1), 7), ((2, 8, 2, 3), 7),
                                        ((4, 8, 7, 7), 1), ((2, 4, 10, 10), 7), ((2, 8, 6, 6), 6)])
def test_adaptive_avg_pool2d(shape: tuple[int, ...], size: int) -> None:
    rng = np.random.default_rng(4)
    x, tx = rand(rng, *shape)
    ty = F.adaptive_avg_pool2d(tx, size)
    dy, tdy = rand(rng, *ty.shape)
    ty.backward(tdy)
    (y,) = run("adaptive_avg_pool2d", [x], [empty(*ty.shape)], size=size)
    (dx,) = run("adaptive_avg_pool2d_backward", [dy], [empty(*shape)], size=size)
    close(y, ty, 1e-5, "y")
    close(dx, tx.grad, 1e-5, "dx")


def test_batch_norm2d() -> None:
    rng = np.random.default_rng(5)
    x, tx = rand(rng, 4, 16, 10, 10)
    gamma, tgamma = rand(rng, 16)
    beta, tbeta = rand(rng, 16)
    rm, rv = cp.zeros(16, cp.float32), cp.ones(16, cp.float32)
    trm, trv = torch.zeros(16, device="cuda"), torch.ones(16, device="cuda")
    ty = F.batch_norm(tx, trm, trv, tgamma, tbeta, training=True, momentum=0.1, eps=1e-5)
    dy, tdy = rand(rng, *ty.shape)
    ty.backward(tdy)
    y, mean, invstd, _, _ = run("batch_norm2d", [x, gamma, beta, rm, rv],
                                [empty(*x.shape), empty(16), empty(16), rm, rv], eps=1e-5, momentum=0.1)
    dx, dgamma, dbeta = run("batch_norm2d_backward", [x, gamma, mean, invstd, dy],
                            [empty(*x.shape), empty(16), empty(16)], input_grad=True)
    var = tx.detach().var(dim=(0, 2, 3), unbiased=False)
    for name, ours, ref in (("y", y, ty), ("running_mean", rm, trm), ("running_var", rv, trv),
                            ("saved_mean", mean, tx.detach().mean(dim=(0, 2, 3))),
                            ("saved_invstd", invstd, 1 / torch.sqrt(var + 1e-5)),
                            ("dx", dx, tx.grad), ("dgamma", dgamma, tgamma.grad), ("dbeta", dbeta, tbeta.grad)):
        close(ours, ref, 1e-5, name)


def test_dropout_is_pytorchs_inverted_dropout_with_the_same_mask_as_numpy() -> None:
    # torch's generator cannot be replayed, so check the semantics on our mask, which must be the CPU's
    rng = np.random.default_rng(6)
    x, _ = rand(rng, 64, 1024)
    dy, _ = rand(rng, 64, 1024)
    y, mask = run("dropout", [x], [empty(64, 1024), empty(64, 1024, dtype=np.uint8)], p=0.5, seed=1,
                  iteration=0)
    (dx,) = run("dropout_backward", [mask, dy], [empty(64, 1024)], p=0.5)
    assert abs(float(mask.mean()) - 0.5) < 0.01
    cp.testing.assert_array_equal(y, x * mask * 2)
    cp.testing.assert_array_equal(dx, dy * mask * 2)
    again = run("dropout", [x], [empty(64, 1024), empty(64, 1024, dtype=np.uint8)], p=0.5, seed=1, iteration=0)
    cp.testing.assert_array_equal(again[1], mask)
    x_np = cp.asnumpy(x)
    on_cpu = [np.zeros_like(x_np), np.zeros(x_np.shape, np.uint8)]
    OPS["dropout"](np, [x_np], on_cpu, {"p": 0.5, "seed": 1, "iteration": 0})
    np.testing.assert_array_equal(cp.asnumpy(mask), on_cpu[1])


def test_softmax_cross_entropy() -> None:
    rng = np.random.default_rng(7)
    logits, tlogits = rand(rng, 16, 1000)
    labels_np = rng.integers(0, 1000, 16).astype(np.int32)
    tloss = F.cross_entropy(tlogits, torch.tensor(labels_np, device="cuda").long())
    tloss.backward()
    loss, dlogits = run("softmax_cross_entropy", [logits, cp.asarray(labels_np)], [empty(), empty(16, 1000)])
    close(loss, tloss, 1e-6, "loss")
    close(dlogits, tlogits.grad, 1e-5, "dlogits")


def test_add() -> None:
    rng = np.random.default_rng(8)
    parts = [rand(rng, 4, 8, 5, 5) for _ in range(3)]
    (y,) = run("add", [p for p, _ in parts], [empty(4, 8, 5, 5)])
    close(y, parts[0][1] + parts[1][1] + parts[2][1], 1e-6, "y")


def test_sgd_momentum_two_steps_equal_torch_optim_sgd() -> None:
    rng = np.random.default_rng(9)
    w, tw = rand(rng, 64, 32)
    b, tb = rand(rng, 64)
    opt = torch.optim.SGD([tw, tb], lr=0.1, momentum=0.9, weight_decay=1e-4)
    mw, mb = cp.zeros_like(w), cp.zeros_like(b)
    for _ in range(2):
        gw, tgw = rand(rng, 64, 32)
        gb, tgb = rand(rng, 64)
        tw.grad, tb.grad = tgw.detach(), tgb.detach()
        opt.step()
        run("sgd_momentum", [w, gw, mw, b, gb, mb], [w, mw, b, mb], lr=0.1, momentum=0.9, weight_decay=1e-4)
    close(w, tw, 1e-6, "W")
    close(b, tb, 1e-6, "b")
    close(mw, opt.state[tw]["momentum_buffer"], 1e-6, "momentum")


# --- the CUDA fast paths (graph/ops/cuda_kernels/) against the numpy path, and their determinism ---
# On cupy with float32 operands relu, add, sgd_momentum, max_pool2d and batch_norm2d (and backwards) run
# hand-written kernels; numpy runs the generic bodies. Where the numpy body fixes every rounding (all but
# the batch-norm sums) the kernels must give the same values exactly.
def on_host(kind: str, reads: list[Any], writes: list[Any], dtype: Any = None, **attrs: Any) -> list[np.ndarray]:
    """Run the numpy body on host copies (optionally cast to dtype); a buffer both read and written stays one."""
    copies: dict[int, np.ndarray] = {}

    def host(a: Any) -> np.ndarray:
        if id(a) not in copies:
            h = cp.asnumpy(a)
            copies[id(a)] = h.astype(dtype) if dtype is not None else h
        return copies[id(a)]

    r, w = [host(a) for a in reads], [host(a) for a in writes]
    OPS[kind](np, r, w, attrs)
    return w


def bits(a: Any) -> np.ndarray:
    return cp.asnumpy(a).view(np.uint32)


def assert_same_values(ours: Any, ref: np.ndarray, what: str) -> None:
    np.testing.assert_array_equal(cp.asnumpy(ours), ref, err_msg=what)


def unaligned(shape: tuple[int, ...], values: np.ndarray | None = None) -> Any:
    """A C-contiguous float32 array 4 bytes off 16-byte alignment: the kernels' scalar path."""
    n = math.prod(shape)
    a = cp.empty(n + 1, cp.float32)[1:].reshape(shape)
    a[...] = cp.nan if values is None else cp.asarray(values)
    return a


ELEMENTWISE_SHAPES = [(4, 8, 9, 9), (1001,), (2, 3), (64, 4096)]


@pytest.mark.parametrize("shape", ELEMENTWISE_SHAPES, ids=str)
@pytest.mark.parametrize("aligned", [True, False], ids=["float4", "scalar"])
def test_relu_kernels_equal_numpy(shape: tuple[int, ...], aligned: bool) -> None:
    rng = np.random.default_rng(10)
    x_np = rng.standard_normal(shape).astype(np.float32)
    x_np.flat[::7] = 0.0
    x_np.flat[3::11] = np.nan
    x_np.flat[5::13] = -np.inf
    dy_np = rng.standard_normal(shape).astype(np.float32)
    make = (lambda v: cp.asarray(v)) if aligned else (lambda v: unaligned(shape, v))
    x, dy = make(x_np), make(dy_np)
    y = make(np.full(shape, np.nan, np.float32))
    dx = make(np.full(shape, np.nan, np.float32))
    run("relu", [x], [y])
    (y_ref,) = on_host("relu", [x], [y])
    assert_same_values(y, y_ref, "y")
    run("relu_backward", [y, dy], [dx])
    (dx_ref,) = on_host("relu_backward", [y, dy], [dx])
    assert_same_values(dx, dx_ref, "dx")


def test_relu_in_place() -> None:
    x_np = np.random.default_rng(11).standard_normal((3, 5, 7)).astype(np.float32)
    x = cp.asarray(x_np)
    run("relu", [x], [x])
    assert_same_values(x, np.maximum(x_np, 0), "y")


@pytest.mark.parametrize("parts", [2, 3, 5])
@pytest.mark.parametrize("shape", [(4, 8, 5, 5), (1001,), (64, 256, 14, 14)], ids=str)
def test_add_kernel_equals_numpy(parts: int, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(12)
    reads = [cp.asarray(rng.standard_normal(shape).astype(np.float32)) for _ in range(parts)]
    (y,) = run("add", reads, [empty(*shape)])
    (ref,) = on_host("add", reads, [empty(*shape)])
    np.testing.assert_array_equal(bits(y), ref.view(np.uint32))


@pytest.mark.parametrize("weight_decay", [0.0, 1e-4])
def test_sgd_kernel_equals_numpy_bit_for_bit(weight_decay: float) -> None:
    rng = np.random.default_rng(13)
    shapes = [(64, 32, 3, 3), (1001,), (3,)]
    params = [cp.asarray(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    moms = [cp.zeros(s, cp.float32) for s in shapes]
    host_params = [cp.asnumpy(p) for p in params]
    host_moms = [cp.asnumpy(m) for m in moms]
    attrs = dict(lr=0.1, momentum=0.9, weight_decay=weight_decay)
    for _ in range(3):
        grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        reads = [a for p, g, m in zip(params, grads, moms) for a in (p, cp.asarray(g), m)]
        run("sgd_momentum", reads, [a for p, m in zip(params, moms) for a in (p, m)], **attrs)
        OPS["sgd_momentum"](np, [a for p, g, m in zip(host_params, grads, host_moms) for a in (p, g, m)],
                            [a for p, m in zip(host_params, host_moms) for a in (p, m)], attrs)
    for ours, ref in zip(params + moms, host_params + host_moms):
        np.testing.assert_array_equal(bits(ours), ref.view(np.uint32))


def test_sgd_kernel_with_separate_output_buffers() -> None:
    rng = np.random.default_rng(14)
    w, g, m = (cp.asarray(rng.standard_normal(100).astype(np.float32)) for _ in range(3))
    w0, m0 = w.copy(), m.copy()
    w_out, m_out = run("sgd_momentum", [w, g, m], [empty(100), empty(100)], lr=0.1, momentum=0.9,
                       weight_decay=1e-4)
    ref_w, ref_m = on_host("sgd_momentum", [w, g, m], [empty(100), empty(100)], lr=0.1, momentum=0.9,
                           weight_decay=1e-4)
    np.testing.assert_array_equal(bits(w_out), ref_w.view(np.uint32))
    np.testing.assert_array_equal(bits(m_out), ref_m.view(np.uint32))
    np.testing.assert_array_equal(bits(w), bits(w0))  # the inputs are left alone
    np.testing.assert_array_equal(bits(m), bits(m0))


POOLS = [((4, 8, 32, 32), 3, 2, 1), ((4, 8, 27, 27), 3, 2, 0), ((4, 8, 16, 16), 2, 2, 0),
         ((2, 3, 9, 11), 3, 1, 1), ((2, 3, 8, 8), 2, 1, 0), ((1, 2, 7, 7), 5, 2, 2), ((2, 4, 1, 1), 1, 1, 0)]


@pytest.mark.parametrize("shape,k,s,p", POOLS)
@pytest.mark.parametrize("data", ["normal", "ties", "negative"])
def test_max_pool_kernels_equal_numpy(shape: tuple[int, ...], k: int, s: int, p: int, data: str) -> None:
    rng = np.random.default_rng(15)
    if data == "ties":  # few distinct values: most windows hold their maximum more than once
        x_np = rng.integers(-2, 3, shape).astype(np.float32)
    elif data == "negative":  # padding must never win over all-negative windows
        x_np = -1 - rng.random(shape).astype(np.float32)
    else:
        x_np = rng.standard_normal(shape).astype(np.float32)
    x = cp.asarray(x_np)
    ho, wo = (shape[2] + 2 * p - k) // s + 1, (shape[3] + 2 * p - k) // s + 1
    out = (*shape[:2], ho, wo)
    dy = cp.asarray(rng.standard_normal(out).astype(np.float32))
    attrs = dict(kernel=k, stride=s, padding=p)
    (y,) = run("max_pool2d", [x], [empty(*out)], **attrs)
    (y_ref,) = on_host("max_pool2d", [x], [empty(*out)], **attrs)
    np.testing.assert_array_equal(bits(y), y_ref.view(np.uint32))
    (dx,) = run("max_pool2d_backward", [x, y, dy], [empty(*shape)], **attrs)
    (dx_ref,) = on_host("max_pool2d_backward", [x, y, dy], [empty(*shape)], **attrs)
    np.testing.assert_array_equal(bits(dx), dx_ref.view(np.uint32))  # same winners, same summation order


@pytest.mark.parametrize("k,s,p", [(3, 2, 1), (3, 1, 1), (2, 2, 0)])
def test_max_pool_kernels_follow_pytorch_on_ties_and_nan(k: int, s: int, p: int) -> None:
    rng = np.random.default_rng(16)
    x_np = rng.integers(-2, 3, (2, 3, 9, 9)).astype(np.float32)
    x_np.flat[rng.choice(x_np.size, 12, replace=False)] = np.nan
    x, tx = cp.asarray(x_np), torch.tensor(x_np, device="cuda", requires_grad=True)
    ty = F.max_pool2d(tx, k, s, p)
    dy_np = rng.integers(-4, 5, tuple(ty.shape)).astype(np.float32)  # integers: any summation order is exact
    ty.backward(torch.tensor(dy_np, device="cuda"))
    attrs = dict(kernel=k, stride=s, padding=p)
    (y,) = run("max_pool2d", [x], [empty(*ty.shape)], **attrs)
    (dx,) = run("max_pool2d_backward", [x, y, cp.asarray(dy_np)], [empty(*x.shape)], **attrs)
    np.testing.assert_array_equal(cp.asnumpy(y), ty.detach().cpu().numpy())
    np.testing.assert_array_equal(cp.asnumpy(dx), tx.grad.cpu().numpy())


# one kernel per channel (at most 16384 values a channel) and the multi-block path, each with float4 and
# scalar loads (H*W % 4 == 0 or not)
BN_SHAPES = [(4, 16, 10, 10), (2, 8, 7, 7), (8, 32, 28, 28), (2, 3, 1, 1), (3, 5, 6, 2), (64, 4, 56, 56),
             (32, 16, 28, 28), (400, 3, 7, 7)]


def bn_inputs(rng: np.random.Generator, shape: tuple[int, ...]) -> list[Any]:
    c = shape[1]
    x = rng.standard_normal(shape) * 3 + 5  # an offset: the variance must not cancel away
    return [cp.asarray(a.astype(np.float32)) for a in
            (x, rng.standard_normal(c), rng.standard_normal(c), rng.standard_normal(c), 1 + rng.random(c))]


def rel(ours: Any, ref: np.ndarray) -> float:
    a, b = cp.asnumpy(ours).astype(np.float64), ref.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("shape", BN_SHAPES, ids=str)
@pytest.mark.parametrize("input_grad", [True, False])
def test_batch_norm_kernels_equal_numpy(shape: tuple[int, ...], input_grad: bool) -> None:
    """Against the numpy body in float64 (the kernels sum in double, numpy's float32 sums are the less exact)."""
    rng = np.random.default_rng(17)
    c = shape[1]
    x, gamma, beta, rm, rv = bn_inputs(rng, shape)
    dy = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    reads = [x, gamma, beta, rm, rv]
    ref = on_host("batch_norm2d", reads, [empty(*shape), empty(c), empty(c), rm, rv], np.float64, eps=1e-5,
                  momentum=0.1)
    y, mean, invstd, _, _ = run("batch_norm2d", reads, [empty(*shape), empty(c), empty(c), rm, rv], eps=1e-5,
                                momentum=0.1)
    for name, ours, r in zip(["y", "saved_mean", "saved_invstd", "running_mean", "running_var"],
                             [y, mean, invstd, rm, rv], ref):
        assert rel(ours, r) < 1e-6, f"{name}: {rel(ours, r):.2e}"
    writes = [empty(*shape)] * input_grad + [empty(c), empty(c)]
    bwd_reads = [x, gamma, mean, invstd, dy]
    grads = run("batch_norm2d_backward", bwd_reads, writes, input_grad=input_grad)
    grads_ref = on_host("batch_norm2d_backward", bwd_reads, writes, np.float64, input_grad=input_grad)
    for name, ours, r in zip(["dx"] * input_grad + ["dgamma", "dbeta"], grads, grads_ref):
        if name == "dx" and x.size // c == 2:  # two values per channel: dx is 0 up to rounding, compare to dy
            assert float(cp.abs(ours).max()) < 1e-5 * float(cp.abs(dy).max())
            continue
        assert rel(ours, r) < 1e-5, f"{name}: {rel(ours, r):.2e}"


def test_batch_norm_kernel_running_stats_round_as_numpy() -> None:
    """Given the same batch statistics, running stats, invstd and y come out of the same float32 roundings."""
    rng = np.random.default_rng(18)
    shape = (4, 16, 10, 10)
    x, gamma, beta, rm, rv = bn_inputs(rng, shape)
    x = cp.asarray(rng.integers(-8, 9, shape).astype(np.float32))  # small integers: exact float32 mean
    ref = on_host("batch_norm2d", [x, gamma, beta, rm, rv], [empty(*shape), empty(16), empty(16), rm, rv],
                  eps=1e-5, momentum=0.1)
    y, mean, invstd, _, _ = run("batch_norm2d", [x, gamma, beta, rm, rv],
                                [empty(*shape), empty(16), empty(16), rm, rv], eps=1e-5, momentum=0.1)
    np.testing.assert_array_equal(cp.asnumpy(mean), ref[1])
    if np.array_equal(cp.asnumpy(invstd), ref[2]):  # numpy's float32 variance may round differently
        np.testing.assert_array_equal(bits(y), ref[0].view(np.uint32))
    np.testing.assert_array_equal(cp.asnumpy(rm), ref[3])


@pytest.mark.parametrize("shape", [(8, 32, 28, 28), (16, 64, 7, 7), (32, 16, 28, 28)], ids=str)
def test_fast_kernels_are_deterministic(shape: tuple[int, ...]) -> None:
    """The same op twice on the same inputs gives the same bits (no atomics, fixed summation orders)."""
    rng = np.random.default_rng(19)
    c = shape[1]
    x, gamma, beta, _, _ = bn_inputs(rng, shape)
    dy = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    ties = cp.asarray(rng.integers(-2, 3, shape).astype(np.float32))
    pooled = (*shape[:2], (shape[2] - 1) // 2 + 1, (shape[3] - 1) // 2 + 1)
    dpool = cp.asarray(rng.standard_normal(pooled).astype(np.float32))

    def once() -> list[np.ndarray]:
        rm, rv = cp.zeros(c, cp.float32), cp.ones(c, cp.float32)
        y, mean, invstd, _, _ = run("batch_norm2d", [x, gamma, beta, rm, rv],
                                    [empty(*shape), empty(c), empty(c), rm, rv], eps=1e-5, momentum=0.1)
        grads = run("batch_norm2d_backward", [x, gamma, mean, invstd, dy], [empty(*shape), empty(c), empty(c)],
                    input_grad=True)
        attrs = dict(kernel=3, stride=2, padding=1)
        (py,) = run("max_pool2d", [ties], [empty(*pooled)], **attrs)
        (pdx,) = run("max_pool2d_backward", [ties, py, dpool], [empty(*shape)], **attrs)
        (r,) = run("relu", [x], [empty(*shape)])
        (rdx,) = run("relu_backward", [r, dy], [empty(*shape)])
        (s,) = run("add", [x, dy, r], [empty(*shape)])
        w, m = x.copy(), dy.copy()
        run("sgd_momentum", [w, r, m], [w, m], lr=0.1, momentum=0.9, weight_decay=1e-4)
        return [bits(a) for a in (y, mean, invstd, rm, rv, *grads, py, pdx, r, rdx, s, w, m)]

    for first, second in zip(once(), once()):
        np.testing.assert_array_equal(first, second)


def test_fast_paths_are_taken_on_cupy() -> None:
    from vmexplorer.graph.ops import cuda_kernels

    x = cp.ones((2, 4, 4, 4), cp.float32)
    run("relu", [x], [empty(*x.shape)])
    run("max_pool2d", [x], [empty(2, 4, 2, 2)], kernel=2, stride=2, padding=0)
    run("batch_norm2d", [x, cp.ones(4, cp.float32), cp.zeros(4, cp.float32), cp.zeros(4, cp.float32),
                         cp.ones(4, cp.float32)], [empty(*x.shape), empty(4), empty(4), empty(4), empty(4)],
        eps=1e-5, momentum=0.1)
    run("linear", [x, cp.ones((3, 64), cp.float32), cp.ones(3, cp.float32)], [empty(2, 3)], bias=True)
    run("dropout", [x], [empty(*x.shape), empty(*x.shape, dtype=np.uint8)], p=0.5, seed=1, iteration=0)
    assert {"flat", "pool", "bn", "bias", "dropout"} <= set(cuda_kernels.compiled())
    x64 = cp.ones((2, 3), cp.float64)  # other dtypes take the generic body
    (y64,) = run("relu", [x64], [cp.zeros((2, 3), cp.float64)])
    cp.testing.assert_array_equal(y64, x64)


BIAS_SHAPES = [(4, 8, 9, 9), (4, 16, 8, 8), (3, 100), (16, 8, 64, 64)]


@pytest.mark.parametrize("shape", BIAS_SHAPES, ids=str)
@pytest.mark.parametrize("aligned", [True, False], ids=["float4", "scalar"])
def test_bias_add_kernel_equals_numpy(shape: tuple[int, ...], aligned: bool) -> None:
    from vmexplorer.graph.ops import cuda_kernels

    rng = np.random.default_rng(20)
    y_np = rng.standard_normal(shape).astype(np.float32)
    b_np = rng.standard_normal(shape[1]).astype(np.float32)
    y = cp.asarray(y_np) if aligned else unaligned(shape, y_np)
    cuda_kernels.bias_add(y, cp.asarray(b_np))
    ref = y_np + b_np.reshape(1, -1, *(1,) * (len(shape) - 2))
    np.testing.assert_array_equal(bits(y), ref.view(np.uint32))


@pytest.mark.parametrize("shape", BIAS_SHAPES, ids=str)
@pytest.mark.parametrize("aligned", [True, False], ids=["float4", "scalar"])
def test_channel_sum_kernel_is_deterministic_and_sums_in_double(shape: tuple[int, ...], aligned: bool) -> None:
    from vmexplorer.graph.ops import cuda_kernels

    rng = np.random.default_rng(21)
    dy_np = (rng.standard_normal(shape) + 3.0).astype(np.float32)  # an offset, so rounding would show
    dy = cp.asarray(dy_np) if aligned else unaligned(shape, dy_np)
    first, second = empty(shape[1]), empty(shape[1])
    cuda_kernels.channel_sum(dy, first)
    cuda_kernels.channel_sum(dy, second)
    np.testing.assert_array_equal(bits(first), bits(second))
    axes = tuple(a for a in range(len(shape)) if a != 1)
    truth = dy_np.astype(np.float64).sum(axis=axes).astype(np.float32)  # the double sum, rounded once
    np.testing.assert_allclose(cp.asnumpy(first), truth, rtol=2.5e-7, atol=0)  # at most an ulp


def test_dropout_kernels_equal_numpy_at_other_rates() -> None:
    rng = np.random.default_rng(22)
    x_np = rng.standard_normal((3, 1001)).astype(np.float32)
    for p in (0.1, 0.5, 0.9):
        y, mask = run("dropout", [cp.asarray(x_np)], [empty(3, 1001), empty(3, 1001, dtype=np.uint8)], p=p, seed=3,
                      iteration=2)
        (dx,) = run("dropout_backward", [mask, cp.asarray(x_np)], [empty(3, 1001)], p=p)
        y_ref, mask_ref = on_host("dropout", [cp.asarray(x_np)], [empty(3, 1001), empty(3, 1001, dtype=np.uint8)],
                                  p=p, seed=3, iteration=2)
        (dx_ref,) = on_host("dropout_backward", [mask, cp.asarray(x_np)], [empty(3, 1001)], p=p)
        np.testing.assert_array_equal(cp.asnumpy(mask), mask_ref)
        np.testing.assert_array_equal(bits(y), y_ref.view(np.uint32))
        np.testing.assert_array_equal(bits(dx), dx_ref.view(np.uint32))


@pytest.mark.parametrize("input_grad", [True, False])
def test_convolutions_launched_through_the_backend_call_give_the_frontends_results(input_grad: bool) -> None:
    """The raw launch (operand pointers in uid order, straight to the backend) computes what the
    frontend's own execute computes with the same plan, for each of fprop, dgrad and wgrad."""
    from vmexplorer.graph.ops import conv2d

    rng = np.random.default_rng(23)
    x, _ = rand(rng, 4, 16, 28, 28)
    w, _ = rand(rng, 32, 16, 3, 3)
    dy, _ = rand(rng, 4, 32, 14, 14)
    attrs = dict(kernel=3, stride=2, padding=1, bias=False, input_grad=input_grad, allow_tf32=False,
                 deterministic=True)
    (y,) = run("conv2d", [x, w], [empty(4, 32, 14, 14)], **attrs)
    grads = run("conv2d_backward", [x, w, dy], [empty(*x.shape)] * input_grad + [empty(*w.shape)], **attrs)
    ours = {"fprop": (x, w, y), "wgrad": (x, grads[-1], dy)} | ({"dgrad": (grads[0], w, dy)} if input_grad else {})
    for which, (a, b, c) in ours.items():
        conv = next(v for k, v in conv2d._GRAPHS.items()
                    if k[:4] == (which, a.shape, b.shape, c.shape) and k[6] == (False, True, False))
        assert conv.launch is not None, f"{which}: the raw launch is not available with this cuDNN frontend"
        again = [a.copy(), b.copy(), c.copy()]
        out = {"fprop": 2, "dgrad": 0, "wgrad": 1}[which]
        again[out][...] = cp.nan
        workspace = cp.empty(conv.workspace_bytes, cp.uint8)
        conv.graph.execute(dict(zip(conv.tensors, (v.data.ptr for v in again))), workspace.data.ptr,
                           handle=conv2d.cudnn_handle(cp.cuda.runtime.getDevice()))
        cp.cuda.get_current_stream().synchronize()
        np.testing.assert_array_equal(bits(again[out]), bits((a, b, c)[out]), err_msg=which)
