"""Compiling and launching the CUDA kernels: each source compiled once per process (cupy imported only
then), grids sized to the GPU, and the checks every launcher makes of its operands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Array = Any

BLOCK = 256  # threads per block for every kernel here (a multiple of 32, as block_sum2 needs)
MAX_BLOCKS_PER_SM = 32  # grid-stride kernels launch at most this many blocks per SM
STAT_BLOCKS_PER_SM = 8  # batch-norm partial sums: about one wave of 256-thread blocks

_MODULES: dict[str, Any] = {}  # source name -> compiled cupy.RawModule
_FUNCTIONS: dict[tuple[str, str], Any] = {}  # (source name, kernel name) -> cupy kernel
_SM_COUNT: dict[int, int] = {}  # device id -> multiprocessors
_SOURCES: dict[str, Callable[[], str]] = {}  # source name -> its CUDA code, declared by the module launching it


def _cp() -> Any:
    import cupy

    return cupy


def is_cupy(xp: Any) -> bool:
    return getattr(xp, "__name__", "") == "cupy"


_F32 = np.dtype(np.float32)  # a dtype compared with a dtype: no conversion on every call


def fast(xp: Any, *arrays: Array) -> bool:
    """True when an op should take its CUDA kernel: xp is cupy and every operand is float32."""
    return is_cupy(xp) and all(a.dtype == _F32 for a in arrays)


def compiled() -> list[str]:
    """Names of the sources compiled so far in this process (for tests)."""
    return sorted(_MODULES)


_COMMON = r"""
// float and float4 seen as 1 or 4 lanes, so one template body serves the scalar and the vector path
#define LANES(V) ((int)(sizeof(V) / sizeof(float)))
// x != x is NaN's test (no fast-math here); -inf without math.h's INFINITY, which NVRTC may lack
__device__ __forceinline__ bool is_nan(float v) { return v != v; }
#define NEG_INF __int_as_float(0xff800000)
__device__ __forceinline__ float& lane(float& v, int) { return v; }
__device__ __forceinline__ float& lane(float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
"""


def declare(name: str, code: Callable[[], str]) -> None:
    """Source `name` is `code()`, compiled after the common definitions when one of its kernels is first used."""
    _SOURCES[name] = code


def _source(name: str) -> str:
    return _COMMON + _SOURCES[name]()


def _kernel(source: str, name: str) -> Any:
    """Kernel `name` of source `source`, compiling the source on first use."""
    key = (source, name)
    fn = _FUNCTIONS.get(key)
    if fn is None:
        module = _MODULES.get(source)
        if module is None:
            module = _MODULES[source] = _cp().RawModule(code=_source(source))
        fn = _FUNCTIONS[key] = module.get_function(name)
    return fn


def _sm_count() -> int:
    cp = _cp()
    dev = cp.cuda.runtime.getDevice()
    if dev not in _SM_COUNT:
        _SM_COUNT[dev] = int(cp.cuda.Device(dev).attributes["MultiProcessorCount"])
    return _SM_COUNT[dev]


def _grid(units: int) -> int:
    return max(1, min(-(-units // BLOCK), _sm_count() * MAX_BLOCKS_PER_SM))


def _aligned(*arrays: Array) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


def _index(*arrays: Array) -> tuple[str, Any]:
    """Kernel suffix and numpy type of the flat index: 32-bit when every array is below 2^31 elements."""
    return ("i32", np.uint32) if max(a.size for a in arrays) < 2**31 else ("i64", np.uint64)


def _check(op: str, *arrays: Array) -> None:
    for a in arrays:
        if a.dtype != _F32 or not a.flags.c_contiguous:
            raise ValueError(f"{op}: the CUDA kernel needs C-contiguous float32 arrays, got {a.dtype} "
                             f"{'contiguous' if a.flags.c_contiguous else 'strided'} {a.shape}")


def _same_size(op: str, arrays: list[Array]) -> int:
    n = int(arrays[0].size)
    if any(a.size != n for a in arrays):
        raise ValueError(f"{op}: operands differ in size: {[tuple(a.shape) for a in arrays]}")
    return n
