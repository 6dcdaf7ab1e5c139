"""PyTorch as the reference: run a graph's forward ops with torch.nn.functional, let autograd do the rest.

Shares the engine's starting values (vmexplorer.engine.init), so an engine run and this reference
start from the same bits; returns the loss and the gradient of every weight by the engine's names.
"""

from __future__ import annotations

from typing import Any

from vmexplorer.engine.init import initial_value
from vmexplorer.graph import Graph, Kind, Phase


def reference_gradients(graph: Graph, masks: dict[str, Any], seed: int = 0, allow_tf32: bool = True,
                        device: str = "cuda", float64: bool = False) -> tuple[float, dict[str, Any]]:
    """`masks`: the engine's dropout masks by tensor name, since two generators never draw alike."""
    import torch

    torch.backends.cudnn.allow_tf32 = allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # the engine's matmuls (CuPy) are full fp32
    values: dict[int, Any] = {}
    for t, tensor in enumerate(graph.tensors):
        v = initial_value(graph, t, seed)
        if v is not None:
            values[t] = torch.from_numpy(v).to(device)
            if float64 and values[t].is_floating_point():
                values[t] = values[t].double()
            if tensor.kind is Kind.WEIGHT:
                values[t].requires_grad_(True)
    loss = forward_loss(graph, values, masks)
    loss.backward()
    grads = {graph.tensors[t].name + ".grad": v.grad.detach().cpu().numpy()
             for t, v in values.items() if graph.tensors[t].kind is Kind.WEIGHT}
    return float(loss.detach()), grads


def forward_loss(graph: Graph, values: dict[int, Any], masks: dict[str, Any] | None = None) -> Any:
    """The graph's forward ops and loss in torch.nn.functional, autograd recording; `values` holds the
    persistent tensors by id and gains each activation until its last forward use, as a module's
    forward lets go of it (what autograd saves for backward stays, as it would). Dropout uses the
    engine's `masks` when given, else PyTorch's own (for timing, where the draws do not matter)."""
    import torch.nn.functional as F

    forward = (Phase.FORWARD, Phase.LOSS)
    last_read = {t: i for i, op in enumerate(graph.ops) if op.phase in forward for t in op.reads}
    for i, op in enumerate(graph.ops):
        x = [values[t] for t in op.reads]
        if op.kind == "softmax_cross_entropy":
            return F.cross_entropy(x[0], x[1].long())
        y = apply_op(graph, op, x, masks)
        del x
        for t in op.reads:  # only what no later op reads: a plain dict would hold every activation at once
            if last_read[t] == i and not graph.tensors[t].persistent:
                values.pop(t, None)
        values[op.writes[0]] = y
    raise ValueError(f"{graph.model}: no loss op")


def apply_op(graph: Graph, op: Any, x: list[Any], masks: dict[str, Any] | None = None) -> Any:
    """A forward op in torch.nn.functional on its inputs `x` (tensors in the op's read order)."""
    import torch
    import torch.nn.functional as F

    a = dict(op.attrs)
    if op.kind == "conv2d":
        return F.conv2d(x[0], x[1], x[2] if a["bias"] else None, stride=a["stride"], padding=a["padding"])
    if op.kind == "linear":
        return F.linear(x[0].reshape(x[0].shape[0], -1), x[1], x[2])
    if op.kind == "relu":
        return F.relu(x[0])
    if op.kind == "max_pool2d":
        return F.max_pool2d(x[0], a["kernel"], a["stride"], a["padding"])
    if op.kind == "adaptive_avg_pool2d":
        return F.adaptive_avg_pool2d(x[0], graph.tensors[op.writes[0]].shape[2:])
    if op.kind == "batch_norm2d":
        return F.batch_norm(x[0], x[3].clone(), x[4].clone(), x[1], x[2], training=True,
                            momentum=a["momentum"], eps=a["eps"])
    if op.kind == "dropout" and masks is None:
        return F.dropout(x[0], a["p"], training=True)
    if op.kind == "dropout":
        assert masks is not None  # the branch above took the other case
        mask = torch.from_numpy(masks[graph.tensors[op.writes[1]].name]).to(x[0].device).to(x[0].dtype)
        return x[0] * mask / (1.0 - a["p"])
    if op.kind == "add":
        return x[0] + x[1]
    raise NotImplementedError(op.kind)
