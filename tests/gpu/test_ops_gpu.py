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

from vmexplorer.engine.ops import OPS  # noqa: E402  (after the skip: importing is fine, running is not)

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
                                        ((4, 8, 7, 7), 1), ((2, 4, 10, 10), 7)])
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
