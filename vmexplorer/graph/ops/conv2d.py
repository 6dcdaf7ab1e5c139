"""2-D convolution (cross-correlation, NCHW, no dilation or groups): y = x * W + b.

reads (x, W[, b]) writes (y); backward reads (x, W, dy) writes ([dx], dW, [db]).
Backward keeps: x (wgrad needs it for dW) and W (dgrad needs it for dx); y is not needed.
attrs: kernel, stride, padding, bias; backward also input_grad; allow_tf32, deterministic and autotune
from the run (GPU only: they choose the cuDNN engine).

On numpy the reference is im2col (a strided window view) + tensordot. On cupy the convolutions run
through NVIDIA's cuDNN frontend graph API on raw device pointers (CuPy 14 ships no cuDNN); the bias
add and its gradient (a sum over N, H, W) are an elementwise pass and a reduction, on cupy CUDA kernels
of their own (cuda_kernels/biases.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph import GraphError
from . import cuda_kernels
from .kernel import Kernel, run_numerics
from .recorder import Recorder

Array = Any


def conv2d(b: Recorder, x: int, layer: str, out_channels: int, kernel: int, stride: int = 1,
           padding: int = 0, bias: bool = True) -> int:
    """Record a convolution of tensor `x` with new weights (and bias) named after `layer`; returns y."""
    n, c, h, w = b.shape(x)
    ho = out_size(b, layer, h, kernel, stride, padding)
    wo = out_size(b, layer, w, kernel, stride, padding)
    weight = b.param(layer, "weight", (out_channels, c, kernel, kernel))
    params = (weight, b.param(layer, "bias", (out_channels,))) if bias else (weight,)
    macs = n * out_channels * ho * wo * c * kernel * kernel
    bias_flops = n * out_channels * ho * wo if bias else 0
    y, _ = b.forward("conv2d", layer, (x,), params, (n, out_channels, ho, wo), 2 * macs + bias_flops,
                     keeps=(x, weight), backward_flops=4 * macs + bias_flops, input_grad_flops=2 * macs,
                     attrs=(("kernel", kernel), ("stride", stride), ("padding", padding), ("bias", bias)),
                     workspace=True)
    return y


def out_size(b: Recorder, layer: str, size: int, k: int, stride: int, pad: int) -> int:
    """Output size of a k x k sliding window along one side of `size`; too small an input is refused."""
    out = (size + 2 * pad - k) // stride + 1
    if out < 1:
        raise GraphError(f"{b.model}: image size {b.image_size} is too small: {layer} gets a "
                         f"{size}x{size} input for a {k}x{k} window; try a larger --image-size")
    return out


def forward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    bias = bool(attrs["bias"])
    writes, workspace = _workspace(writes, attrs)
    _expect(attrs, "conv2d", reads, 3 if bias else 2, writes, 1)
    x, w = reads[0], reads[1]
    (y,) = writes
    stride, pad = int(attrs["stride"]), int(attrs["padding"])
    if _on_gpu(xp):
        _cudnn_conv("fprop", x, w, y, stride, pad, _numerics(attrs), workspace)
    else:
        win = windows(xp, x, w.shape[2], stride, pad)  # (N, C, Ho, Wo, k, k)
        y[...] = xp.tensordot(win, w, axes=((1, 4, 5), (1, 2, 3))).transpose(0, 3, 1, 2)
    if bias:
        _add_bias(xp, y, reads[2])


def backward(xp: Any, reads: list[Array], writes: list[Array], attrs: dict[str, Any]) -> None:
    bias, input_grad = bool(attrs["bias"]), bool(attrs["input_grad"])
    writes, workspace = _workspace(writes, attrs)
    _expect(attrs, "conv2d_backward", reads, 3, writes, 1 + bias + input_grad)
    x, w, dy = reads
    dx = writes[0] if input_grad else None
    dw = writes[1 if input_grad else 0]
    stride, pad = int(attrs["stride"]), int(attrs["padding"])
    if _on_gpu(xp):
        tf32 = _numerics(attrs)
        if dx is not None:  # one after the other on one stream: they share the op's workspace
            _cudnn_conv("dgrad", dx, w, dy, stride, pad, tf32, workspace)
        _cudnn_conv("wgrad", x, dw, dy, stride, pad, tf32, workspace)
    else:
        k = w.shape[2]
        dw[...] = xp.tensordot(dy, windows(xp, x, k, stride, pad), axes=((0, 2, 3), (0, 2, 3)))
        if dx is not None:
            dx[...] = _col2im(xp, xp.tensordot(dy, w, axes=((1,), (0,))), x.shape, k, stride, pad)
    if bias:
        if cuda_kernels.fast(xp, dy, writes[-1]):
            cuda_kernels.channel_sum(dy, writes[-1])  # one deterministic pass, summed in double
        else:
            xp.sum(dy, axis=(0, 2, 3), out=writes[-1])


def _workspace(writes: list[Array], attrs: dict[str, Any]) -> tuple[list[Array], Array | None]:
    """(the op's outputs, its workspace tensor or None): a graph's op has one as its last write where the
    graph holds workspaces (attr `workspace`)."""
    if attrs.get("workspace"):
        return writes[:-1], writes[-1]
    return writes, None


def _add_bias(xp: Any, y: Array, b: Array) -> None:
    if cuda_kernels.fast(xp, y, b):
        cuda_kernels.bias_add(y, b)  # the same rounding as below, in one vectorised pass
    else:
        y += b.reshape(1, -1, 1, 1)


KERNELS = (
    Kernel("conv2d", forward, ("kernel", "stride", "padding", "bias"), run_numerics),
    Kernel("conv2d_backward", backward, ("kernel", "stride", "padding", "bias", "input_grad"), run_numerics),
)


def windows(xp: Any, x: Array, k: int, stride: int, pad: int, fill: float = 0.0) -> Array:
    """Every k x k window of x (N, C, H, W) as a strided view (N, C, Ho, Wo, k, k); no copy but the pad."""
    if pad:
        x = xp.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    win = xp.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return win[:, :, ::stride, ::stride]


def _col2im(xp: Any, cols: Array, x_shape: tuple[int, ...], k: int, stride: int, pad: int) -> Array:
    """Scatter-add window gradients (N, Ho, Wo, C, k, k) back onto the input (N, C, H, W)."""
    n, c, h, w = x_shape
    ho, wo = cols.shape[1], cols.shape[2]
    out = xp.zeros((n, c, h + 2 * pad, w + 2 * pad), dtype=cols.dtype)
    for i in range(k):  # windows overlap when stride < k, so each offset accumulates
        for j in range(k):
            out[:, :, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride] += \
                cols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return out[:, :, pad:pad + h, pad:pad + w]


def _expect(attrs: dict[str, Any], kind: str, reads: list[Array], n_reads: int, writes: list[Array],
            n_writes: int) -> None:
    if len(reads) != n_reads or len(writes) != n_writes:
        raise ValueError(f"{attrs.get('op', kind)}: {kind} with bias={attrs.get('bias')}, "
                         f"input_grad={attrs.get('input_grad')} expects {n_reads} reads and {n_writes} writes, "
                         f"got {len(reads)} and {len(writes)}; do the op's attrs match its graph op?")


def _on_gpu(xp: Any) -> bool:
    return getattr(xp, "__name__", "") == "cupy"


# --- the GPU path: cuDNN frontend graphs, built once per shape ------------------------------------
@dataclass
class _Conv:
    """One convolution problem's cuDNN graph, the plan it runs, and how to launch it."""

    graph: Any
    tensors: tuple[Any, Any, Any]  # the graph's x, w, y tensors
    index: int  # the plan autotuning chose, or -1: cuDNN's heuristic choice
    workspace_bytes: int
    launch: Callable[[int, int, int, int], None] | None  # (x, w, y, workspace) pointers; None: no raw path


@dataclass(frozen=True)
class PlanTiming:
    """One cuDNN execution plan of a convolution problem: its place in cuDNN's ranking, the workspace it
    needs and its measured time (nan where it could not run)."""

    index: int
    workspace_bytes: int
    ms: float


# (which, x shape, w shape, y shape, stride, padding, numerics, workspace limit, device) -> its _Conv
_GRAPHS: dict[tuple[Any, ...], _Conv] = {}
_HANDLES: dict[int, Any] = {}
_STREAMS: dict[int, int] = {}  # device -> the stream its handle was last set to
_F32 = np.dtype(np.float32)


def _numerics(attrs: dict[str, Any]) -> tuple[bool, bool, bool]:
    """(allow_tf32, deterministic, autotune): part of the cache key, since they choose the engine."""
    return (bool(attrs.get("allow_tf32", True)), bool(attrs.get("deterministic", False)),
            bool(attrs.get("autotune", False)))


def _cudnn_conv(which: str, x: Array, w: Array, y: Array, stride: int, pad: int,
                numerics: tuple[bool, bool, bool], workspace: Array | None = None) -> None:
    """fprop writes y from (x, w); dgrad writes x from (w, y=dy); wgrad writes w from (x, y=dy).

    All three take the arrays in the same (x, w, y) slots so one cache key describes the problem.
    `workspace`, the op's workspace tensor from the run's memory, bounds the plans cuDNN may choose to
    its bytes; without one (a graph recorded before workspaces were graph tensors) the plan takes what it
    asks for from CuPy's pool."""
    import cupy

    for a in (x, w, y):
        if a.dtype != _F32 or not a.flags.c_contiguous:
            raise ValueError(f"cuDNN conv {which}: expects contiguous float32 NCHW arrays, got {a.dtype} "
                             f"{a.shape} (contiguous={a.flags.c_contiguous})")
    dev = cupy.cuda.runtime.getDevice()
    handle = cudnn_handle(dev)
    stream = cupy.cuda.get_current_stream().ptr
    if _STREAMS.get(dev) != stream:  # the handle follows CuPy's current stream, as the engine's other kernels
        import cudnn

        cudnn.set_stream(handle=handle, stream=stream)
        _STREAMS[dev] = stream
    limit = None if workspace is None else int(workspace.nbytes)
    key = (which, x.shape, w.shape, y.shape, stride, pad, numerics, limit, dev)
    conv = _GRAPHS.get(key)
    if conv is None:
        conv = _GRAPHS[key] = _prepare(which, x, w, y, stride, pad, numerics, workspace, handle)
    if workspace is None:
        workspace = cupy.empty(conv.workspace_bytes, dtype=cupy.uint8)
    ptr = workspace.data.ptr
    if conv.launch is not None:
        conv.launch(x.data.ptr, w.data.ptr, y.data.ptr, ptr)
        return
    tx, tw, ty = conv.tensors
    pack = {tx: x.data.ptr, tw: w.data.ptr, ty: y.data.ptr}
    if conv.index < 0:  # cuDNN's heuristic choice, like PyTorch's default (benchmark off)
        conv.graph.execute(pack, ptr, handle=handle)
    else:
        conv.graph.execute_plan_at_index(pack, ptr, index=conv.index, handle=handle)


def _prepare(which: str, x: Array, w: Array, y: Array, stride: int, pad: int, numerics: tuple[bool, bool, bool],
             workspace: Array | None, handle: Any) -> _Conv:
    limit = None if workspace is None else int(workspace.nbytes)
    graph, tensors = _build(which, x.shape, w.shape, y.shape, stride, pad, numerics, handle, limit)
    pack = dict(zip(tensors, (x.data.ptr, w.data.ptr, y.data.ptr)))
    index = _fastest(time_plans(graph, pack, handle, workspace=workspace)) if numerics[2] else -1
    size = graph.get_workspace_size() if index < 0 else graph.get_workspace_size_plan_at_index(index)
    if limit is not None and size > limit:  # the frontend filtered by the limit: this would be its bug
        raise RuntimeError(f"cuDNN conv {which} x={x.shape}: the plan chosen needs {size} bytes of workspace, "
                           f"more than the {limit} its op has")
    return _Conv(graph, tensors, index, max(int(size), 1), _raw_launch(graph, tensors, index, handle))


def _raw_launch(graph: Any, tensors: tuple[Any, Any, Any], index: int,
                handle: Any) -> Callable[[int, int, int, int], None] | None:
    """The backend call the frontend's execute ends in, given the operands' pointers in uid order.

    The frontend's execute inspects every buffer in Python on every call (about 100 us of host time a
    convolution on the H200's host, so ResNet-50 b64's 159 convolutions alone took 13 ms of host time
    per 31 ms iteration); its pointers and plan never change for one of our graphs, so they are worked
    out here once. This reaches under the frontend's public API (nvidia-cudnn-frontend 1.32): where
    anything differs, None, and the public execute runs."""
    try:
        plan = graph._plan_index if index < 0 else index
        if graph._engine_for(graph._plans[plan]) is not None:  # a Python engine: only execute runs it
            return None
        order = [int(u) for u in graph._variant_pack_uids()]
        uids = [int(t.get_uid()) for t in tensors]
        if sorted(uids) != order:
            return None
        slots = [order.index(u) for u in uids]
        cfg = graph._materialize_backend_plan(plan)
        cpp = -1 if cfg is None or cfg.cpp_index is None else int(cfg.cpp_index)
        run = graph._lowered_graph._execute_with_raw_ptrs
        backend = int(handle.backend_handle)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None
    ptrs = np.zeros(len(order), dtype=np.uint64)
    address = ptrs.ctypes.data

    def launch(x: int, w: int, y: int, workspace: int) -> None:
        ptrs[slots[0]], ptrs[slots[1]], ptrs[slots[2]] = x, w, y
        run(address, len(order), workspace, backend, cpp)

    return launch


AUTOTUNE_RUNS = 3


def time_plans(graph: Any, pack: dict[Any, int], handle: Any, runs: int = AUTOTUNE_RUNS,
               workspace: Array | None = None) -> list[PlanTiming]:
    """Time every plan cuDNN built on the real buffers, as PyTorch's benchmark mode does, in `workspace`
    where the op has one (the plans were chosen within it), else in scratch from CuPy's pool. Plans cuDNN
    could not build are left out; one that fails to run has a nan time. The output buffer is overwritten by
    the real execution right after."""
    import cupy

    sizes = {}
    for i in range(graph.get_execution_plan_count()):
        try:
            sizes[i] = int(graph.get_workspace_size_plan_at_index(i))
        except Exception:  # plans cuDNN could not build answer with an error: they are not candidates
            continue
    if not sizes:
        return []
    if workspace is None or workspace.nbytes < max(sizes.values()):
        workspace = cupy.empty(max(max(sizes.values()), 1), dtype=cupy.uint8)
    stream = cupy.cuda.get_current_stream()
    out = []
    for i, size in sizes.items():
        try:
            graph.execute_plan_at_index(pack, workspace.data.ptr, index=i, handle=handle)
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            for _ in range(runs):
                graph.execute_plan_at_index(pack, workspace.data.ptr, index=i, handle=handle)
            stop.record(stream)
            stop.synchronize()
            ms = cupy.cuda.get_elapsed_time(start, stop) / runs
        except Exception:  # a plan that cannot run here is simply not chosen
            ms = float("nan")
        out.append(PlanTiming(i, size, ms))
    return out


def _fastest(plans: list[PlanTiming]) -> int:
    """The fastest plan that ran (it runs once per shape, on first use: the engine's warm-up iteration;
    within a process every later run reuses the choice, so runs of different policies compute with the same
    kernels); the first built where none did."""
    ran = [p for p in plans if p.ms == p.ms]
    if ran:
        return min(ran, key=lambda p: p.ms).index
    return plans[0].index if plans else 0


def plan_table(which: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], y_shape: tuple[int, ...],
               stride: int, pad: int, numerics: tuple[bool, bool, bool] = (True, False, True),
               limit: int | None = None, runs: int = AUTOTUNE_RUNS) -> tuple[PlanTiming, list[PlanTiming]]:
    """Every plan cuDNN has for one convolution problem (all it can build), timed on fresh buffers, and the
    plan its heuristics choose (index -1), timed the same way: what a workspace limit costs is read off it."""
    import cupy

    handle = cudnn_handle(cupy.cuda.runtime.getDevice())
    arrays = [cupy.ones(s, dtype=cupy.float32) for s in (x_shape, w_shape, y_shape)]
    ptrs = [a.data.ptr for a in arrays]
    graph, tensors = _build(which, x_shape, w_shape, y_shape, stride, pad, (numerics[0], numerics[1], True),
                            handle, limit)
    table = time_plans(graph, dict(zip(tensors, ptrs)), handle, runs)
    heuristic, tensors = _build(which, x_shape, w_shape, y_shape, stride, pad, (numerics[0], numerics[1], False),
                                handle, limit)
    size = int(heuristic.get_workspace_size())
    workspace = cupy.empty(max(size, 1), dtype=cupy.uint8)
    pack = dict(zip(tensors, ptrs))
    stream = cupy.cuda.get_current_stream()
    heuristic.execute(pack, workspace.data.ptr, handle=handle)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    for _ in range(runs):
        heuristic.execute(pack, workspace.data.ptr, handle=handle)
    stop.record(stream)
    stop.synchronize()
    return PlanTiming(-1, size, cupy.cuda.get_elapsed_time(start, stop) / runs), table


def cudnn_handle(dev: int) -> Any:
    """The device's cuDNN handle, made once."""
    if dev not in _HANDLES:
        try:
            import cudnn
        except ImportError as e:
            raise ImportError("nvidia-cudnn-frontend is needed for convolutions on the GPU "
                              "(pip install nvidia-cudnn-frontend)") from e
        _HANDLES[dev] = cudnn.create_handle()
    return _HANDLES[dev]


def _build(which: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], y_shape: tuple[int, ...],
           stride: int, pad: int, numerics: tuple[bool, bool, bool], handle: Any,
           limit: int | None = None) -> tuple[Any, tuple[Any, Any, Any]]:
    import cudnn

    f32 = cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=f32, intermediate_data_type=f32, compute_data_type=f32, handle=handle)

    def tensor(name: str, shape: tuple[int, ...]) -> Any:
        return g.tensor(name=name, dim=list(shape), stride=_strides(shape), data_type=f32)

    conv = {"padding": [pad, pad], "stride": [stride, stride], "dilation": [1, 1], "compute_data_type": f32}
    if which == "fprop":
        tx, tw = tensor("x", x_shape), tensor("w", w_shape)
        ty = g.conv_fprop(image=tx, weight=tw, **conv)
        out, out_shape = ty, y_shape
    elif which == "dgrad":
        tw, ty = tensor("w", w_shape), tensor("dy", y_shape)
        tx = g.conv_dgrad(loss=ty, filter=tw, **conv)
        out, out_shape = tx, x_shape  # cuDNN cannot infer dx's size when stride > 1: say it
    else:
        tx, ty = tensor("x", x_shape), tensor("dy", y_shape)
        tw = g.conv_wgrad(image=tx, loss=ty, **conv)
        out, out_shape = tw, w_shape
    out.set_output(True).set_dim(list(out_shape)).set_stride(_strides(out_shape))
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    # PyTorch's filter: never engines that down-convert fp32 inputs; with TF32 off, no tensor-core engines
    allow_tf32, deterministic, autotune = numerics
    note = cudnn.numerical_note
    notes = [note.DOWN_CONVERT_INPUTS]
    if not allow_tf32:  # strict fp32: no tensor cores, and none of the transforms that trade accuracy
        notes += [note.TENSOR_CORE] + [getattr(note, n) for n in ("FFT", "WINOGRAD") if hasattr(note, n)]
    if deterministic:  # engines that accumulate with atomics give other bits run to run
        notes.append(cudnn.numerical_note.NONDETERMINISTIC)
    g.deselect_numeric_notes(notes)
    if limit is not None:
        g.deselect_workspace_greater_than(limit)
    try:
        g.check_support()
        if autotune:
            g.build_plans(cudnn.build_plan_policy.ALL)
        else:
            g.build_plans()
    except Exception as e:
        said = (f"cuDNN has no engine for conv {which} x={x_shape} w={w_shape} y={y_shape} stride={stride} "
                f"padding={pad} allow_tf32={allow_tf32} deterministic={deterministic}")
        if limit is not None:  # the room the plan left this op: one error that says so (exit 2), not a crash
            raise GraphError(f"{said} within the {limit} bytes of workspace its op has: {e}; plan with more "
                             "room") from e
        raise RuntimeError(f"{said}: {e}") from e
    return g, (tx, tw, ty)


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return out[::-1]
