"""The few long-lived GPU handles and calls the engine needs, behind one small surface.

CuPy and cuda-bindings are imported here only, and only when a run starts, so the package imports
on a machine with no GPU.
"""

from __future__ import annotations

import platform
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


def prefetch(ptr: int, nbytes: int, to_device: bool, stream: Any, device: int = 0) -> None:
    """cudaMemPrefetchAsync (CUDA 13 signature) of a managed range to the device or to the host."""
    if nbytes <= 0:
        return
    from cuda.bindings import runtime as rt

    location = rt.cudaMemLocation()
    location.type = (rt.cudaMemLocationType.cudaMemLocationTypeDevice if to_device
                     else rt.cudaMemLocationType.cudaMemLocationTypeHost)
    location.id = device if to_device else 0
    (err,) = rt.cudaMemPrefetchAsync(ptr, nbytes, location, 0, stream.ptr)
    if err != rt.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaMemPrefetchAsync of {nbytes} bytes {'to device' if to_device else 'to host'} "
                           f"failed: {err}")


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
