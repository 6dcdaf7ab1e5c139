"""Batch normalisation over (N, H, W) per channel, training mode, as PyTorch's BatchNorm2d.

forward reads (x, gamma, beta, running_mean, running_var)
        writes (y, saved_mean, saved_invstd, running_mean, running_var)
  y = (x - mean) * invstd * gamma + beta with the batch's biased variance; the running statistics
  are updated in place with momentum (default 0.1) and the *unbiased* variance, as PyTorch does.
backward reads (x, gamma, saved_mean, saved_invstd, dy) writes ([dx], dgamma, dbeta).
Backward keeps: x, gamma, saved_mean and saved_invstd, cuDNN's batch-norm backward inputs (the saved
statistics are two per-channel vectors: keeping them costs next to nothing); beta and y are not needed.
attrs: eps (default 1e-5), momentum (default 0.1); backward also input_grad.
On cupy with float32 operands: deterministic CUDA kernels, sums in double (cuda_kernels/batch_norm.py).
"""

from __future__ import annotations

from typing import Any

from ..graph import Kind
from . import cuda_kernels
from .kernel import Kernel
from .recorder import Recorder

Array = Any

AXES = (0, 2, 3)


def batch_norm2d(b: Recorder, x: int, layer: str, eps: float = 1e-5, momentum: float = 0.1) -> int:
    """Record a batch normalisation of tensor `x` with new gamma, beta and running statistics; returns y.
    `momentum` is PyTorch's: the weight of the batch's statistics in the running ones."""
    n, c, h, w = b.shape(x)
    gamma = b.param(layer, "weight", (c,))
    beta = b.param(layer, "bias", (c,))
    running = tuple(b.new_tensor(f"{layer}.{s}", Kind.BUFFER, (c,)) for s in ("running_mean", "running_var"))
    numel = n * c * h * w
    # keeps: -2 and -3 are the saved tensors, made by this op after y (-1)
    y, _ = b.forward("batch_norm2d", layer, (x,), (gamma, beta), (n, c, h, w), 8 * numel,
                     keeps=(x, gamma, -2, -3), backward_flops=12 * numel, input_grad_flops=8 * numel,
                     saved=(("saved_mean", (c,), "float32"), ("saved_invstd", (c,), "float32")),
                     reads=running, updates=running, attrs=(("eps", eps), ("momentum", momentum)))
    return y


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    x, gamma, beta, running_mean, running_var = reads
    y, saved_mean, saved_invstd, new_mean, new_var = writes
    eps, momentum = float(attrs.get("eps", 1e-5)), float(attrs.get("momentum", 0.1))
    m = x.size // x.shape[1]
    if m < 2:
        raise ValueError(f"{attrs.get('op', 'batch_norm2d')}: expected more than 1 value per channel when "
                         f"training, got input of shape {x.shape}; use a larger batch or image size")
    if cuda_kernels.fast(xp, *reads, *writes):
        cuda_kernels.batch_norm_forward(x, gamma, beta, running_mean, running_var, y, saved_mean, saved_invstd,
                                        new_mean, new_var, eps, momentum)
        return
    mean = x.mean(axis=AXES)
    centred = x - mean.reshape(1, -1, 1, 1)
    var = (centred * centred).mean(axis=AXES)  # two passes: no cancellation from E[x^2] - E[x]^2
    saved_mean[...] = mean
    saved_invstd[...] = 1.0 / xp.sqrt(var + eps)
    scale = (gamma * saved_invstd).reshape(1, -1, 1, 1)
    xp.multiply(centred, scale, out=y)
    y += beta.reshape(1, -1, 1, 1)
    # reads and writes name the same buffers in the graph; written this way it also works when they differ
    new_mean[...] = (1.0 - momentum) * running_mean + momentum * mean
    new_var[...] = (1.0 - momentum) * running_var + momentum * var * (m / (m - 1))


def backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    x, gamma, mean, invstd, dy = reads
    input_grad = bool(attrs["input_grad"])
    if len(writes) != 2 + input_grad:
        raise ValueError(f"{attrs.get('op', 'batch_norm2d_backward')}: expects {2 + input_grad} writes "
                         f"(input_grad={input_grad}), got {len(writes)}")
    dgamma, dbeta = writes[-2], writes[-1]
    if cuda_kernels.fast(xp, *reads, *writes):
        cuda_kernels.batch_norm_backward(x, gamma, mean, invstd, dy, writes[0] if input_grad else None, dgamma, dbeta)
        return
    m = x.size // x.shape[1]
    xhat = (x - mean.reshape(1, -1, 1, 1)) * invstd.reshape(1, -1, 1, 1)
    xp.sum(dy, axis=AXES, out=dbeta)
    xp.sum(dy * xhat, axis=AXES, out=dgamma)
    if input_grad:
        # dx = gamma * invstd / m * (m * dy - sum(dy) - xhat * sum(dy * xhat))
        dx = writes[0]
        xp.multiply(xhat, (dgamma / m).reshape(1, -1, 1, 1), out=dx)
        xp.subtract(dy, dx, out=dx)
        dx -= (dbeta / m).reshape(1, -1, 1, 1)
        dx *= (gamma * invstd).reshape(1, -1, 1, 1)


KERNELS = (
    Kernel("batch_norm2d", forward, ("eps", "momentum")),
    Kernel("batch_norm2d_backward", backward, ("input_grad",)),
)
