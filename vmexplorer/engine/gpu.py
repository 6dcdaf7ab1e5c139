"""The few long-lived GPU handles and calls the engine needs, behind one small surface.

CuPy and cuda-bindings are imported here only, and only when a run starts, so the package imports
on a machine with no GPU.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from functools import lru_cache
from typing import Any


class NoGPU(RuntimeError):
    """No usable NVIDIA GPU, driver or GPU packages: the message says which."""


@lru_cache(maxsize=1)
def cupy() -> Any:
    try:
        import cupy as cp
    except ImportError as e:
        raise NoGPU("the GPU engine needs CuPy for CUDA 13 (pip install -e '.[gpu]'); "
                    f"it could not be imported: {e}") from None
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise NoGPU("no NVIDIA GPU is visible to CUDA")
    except cp.cuda.runtime.CUDARuntimeError as e:
        raise NoGPU(f"no usable NVIDIA GPU or driver: {e}") from None
    return cp


def _location(to_device: bool, device: int = 0) -> Any:
    from cuda.bindings import runtime as rt

    location = rt.cudaMemLocation()
    location.type = (rt.cudaMemLocationType.cudaMemLocationTypeDevice if to_device
                     else rt.cudaMemLocationType.cudaMemLocationTypeHost)
    location.id = device if to_device else 0
    return location


def _check(err: Any, what: str) -> None:
    from cuda.bindings import runtime as rt

    if err != rt.cudaError_t.cudaSuccess:
        raise RuntimeError(f"{what} failed: {err}")


def prefetch(ptr: int, nbytes: int, to_device: bool, stream: Any, device: int = 0) -> None:
    """cudaMemPrefetchAsync (CUDA 13 signature) of a managed range to the device or to the host.

    One call per range: on the H200 cudaMemPrefetchBatchAsync moved 16 ranges no faster than 16 calls, and
    to the device it held the host for the whole transfer where single calls returned at once."""
    if nbytes <= 0:
        return
    from cuda.bindings import runtime as rt

    (err,) = rt.cudaMemPrefetchAsync(ptr, nbytes, _location(to_device, device), 0, stream.ptr)
    _check(err, f"cudaMemPrefetchAsync of {nbytes} bytes {'to device' if to_device else 'to host'}")


DISCARD_CALLS = ("cudaMemDiscardBatchAsync", "cudaMemDiscardAndPrefetchBatchAsync")


@lru_cache(maxsize=1)
def discard_unavailable() -> str | None:
    """None when managed pages can be discarded here (CUDA 13's batch calls in cuda-bindings, and a GPU
    with concurrent managed access); otherwise why not, for the run's environment."""
    try:
        import cuda.bindings
        from cuda.bindings import runtime as rt
    except ImportError as e:
        return f"cuda-bindings could not be imported: {e}"
    missing = [name for name in DISCARD_CALLS if not hasattr(rt, name)]
    if missing:
        return f"cuda-bindings {getattr(cuda.bindings, '__version__', '?')} has no {', '.join(missing)} (CUDA 13)"
    err, value = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrConcurrentManagedAccess, 0)
    if err != rt.cudaError_t.cudaSuccess or not value:
        return "the GPU has no concurrent managed access, which discarding needs"
    return None


def discard(ranges: list[tuple[int, int]], stream: Any) -> None:
    """cudaMemDiscardBatchAsync of managed (pointer, bytes) ranges: their contents are dropped, wherever
    they were, and nothing is written back."""
    if ranges:
        from cuda.bindings import runtime as rt

        ptrs, sizes = [p for p, _ in ranges], [n for _, n in ranges]
        (err,) = rt.cudaMemDiscardBatchAsync(ptrs, sizes, len(ranges), 0, stream.ptr)
        _check(err, f"cudaMemDiscardBatchAsync of {sum(sizes)} bytes in {len(ranges)} ranges")


def populate(ranges: list[tuple[int, int]], stream: Any, device: int = 0) -> None:
    """cudaMemDiscardAndPrefetchBatchAsync of managed ranges to the device: pages for data about to be
    written, with no old contents migrated."""
    if ranges:
        from cuda.bindings import runtime as rt

        ptrs, sizes = [p for p, _ in ranges], [n for _, n in ranges]
        (err,) = rt.cudaMemDiscardAndPrefetchBatchAsync(ptrs, sizes, len(ranges), [_location(True, device)], [0], 1,
                                                        0, stream.ptr)
        _check(err, f"cudaMemDiscardAndPrefetchBatchAsync of {sum(sizes)} bytes in {len(ranges)} ranges")


# Run in a process of its own: NVML's used memory before and after the CUDA context and the handles the
# engine makes (cuBLAS through CuPy, cuDNN through its frontend), nothing else allocated.
_CONTEXT_PROBE = """
import sys, pynvml
pynvml.nvmlInit()
device = pynvml.nvmlDeviceGetHandleByPciBusId(sys.argv[1])
before = pynvml.nvmlDeviceGetMemoryInfo(device).used
import cupy
cupy.cuda.Device(int(sys.argv[2])).use()
cupy.cuda.runtime.free(0)
cupy.cuda.device.get_cublas_handle()
try:
    import cudnn
    cudnn.create_handle()
except ImportError:
    pass
cupy.cuda.runtime.deviceSynchronize()
print(pynvml.nvmlDeviceGetMemoryInfo(device).used - before)
"""


@lru_cache(maxsize=8)
def context_bytes(device: int = 0) -> int | None:
    """The device memory a CUDA context and the engine's library handles take, measured once per process
    on their own (a process of their own, by NVML); None where that cannot be measured. Other work on
    the GPU in that second would be counted too: the lent GPU runs ours alone."""
    cp = cupy()
    bus = cp.cuda.runtime.deviceGetPCIBusId(device)
    try:
        out = subprocess.run([sys.executable, "-c", _CONTEXT_PROBE, bus, str(device)], capture_output=True,
                             text=True, timeout=120, check=True)
        taken = int(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return taken if taken > 0 else None


def make_handles(device: int = 0) -> None:
    """The library handles a run uses, made before its memory is first read, so that they count with the
    context and not with the run."""
    from ..graph.ops.conv2d import cudnn_handle

    cp = cupy()
    cp.cuda.device.get_cublas_handle()
    try:
        cudnn_handle(device)
    except ImportError:  # no convolutions can run: the run will say so at its first
        pass


def environment() -> dict[str, str]:
    cp = cupy()
    props = cp.cuda.runtime.getDeviceProperties(0)
    env = {
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
        "gpu_memory_bytes": str(props["totalGlobalMem"]),
        "cuda_driver": str(cp.cuda.runtime.driverGetVersion()),
        "cuda_runtime": str(cp.cuda.runtime.runtimeGetVersion()),
        "cupy": cp.__version__,
        "host": platform.node(),
    }
    try:
        import cudnn

        env["cudnn"] = str(cudnn.backend_version())
    except Exception:  # the frontend is optional until a convolution runs
        pass
    return env


class Ranges:
    """NVTX ranges when the nvtx package is there; nothing otherwise."""

    def __init__(self) -> None:
        try:
            import nvtx

            self._nvtx: Any = nvtx
        except ImportError:
            self._nvtx = None

    def push(self, name: str) -> None:
        if self._nvtx is not None:
            self._nvtx.push_range(name)

    def pop(self) -> None:
        if self._nvtx is not None:
            self._nvtx.pop_range()
