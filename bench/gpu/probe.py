"""What the lent GPU machine has: versions, and the memory APIs the engine relies on.

Run on the device: python3 bench/gpu/probe.py
"""

import importlib
import json
import os
import platform
import subprocess
import time
import traceback

out: dict = {"python": platform.python_version()}


def attempt(name, fn):
    try:
        out[name] = fn()
    except Exception as e:  # a probe reports what failed and goes on
        out[name] = f"FAILED: {type(e).__name__}: {e}"
        out[name + "_trace"] = traceback.format_exc(limit=3)


for mod in ["cupy", "cuda.bindings", "torch", "cudnn", "cupti", "nvtx", "pynvml", "numpy"]:
    attempt("version_" + mod, lambda mod=mod: getattr(importlib.import_module(mod), "__version__", "present"))
QUERY = "name,driver_version,memory.total,memory.free,pcie.link.gen.current,pcie.link.width.current"
attempt("nvidia_smi", lambda: subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader"],
                                             capture_output=True, text=True).stdout.strip())


def cupy_facts():
    import cupy as cp
    free, total = cp.cuda.runtime.memGetInfo()
    return {"runtime": cp.cuda.runtime.runtimeGetVersion(), "driver": cp.cuda.runtime.driverGetVersion(),
            "free": free, "total": total,
            "memPrefetchAsync_doc": (cp.cuda.runtime.memPrefetchAsync.__doc__ or "")[:300],
            "has_memAdvise": hasattr(cp.cuda.runtime, "memAdvise"),
            "cupy_config": str(cp.cuda.get_cudnn_path() if hasattr(cp.cuda, "get_cudnn_path") else "n/a")}


attempt("cupy", cupy_facts)


def managed_prefetch():
    """Allocate 256 MiB managed, prefetch to host and back with the CUDA 13 API; time both."""
    import cupy as cp
    from cuda.bindings import runtime as rt
    n = 256 << 20
    mem = cp.cuda.malloc_managed(n)
    a = cp.ndarray((n // 4,), cp.float32, mem)
    a.fill(1.0)
    cp.cuda.Device().synchronize()
    s = cp.cuda.Stream(non_blocking=True)
    res = {}
    for name, loc_type, dev in [("to_host", rt.cudaMemLocationType.cudaMemLocationTypeHost, 0),
                                ("to_device", rt.cudaMemLocationType.cudaMemLocationTypeDevice, 0)] * 2:
        loc = rt.cudaMemLocation()
        loc.type = loc_type
        loc.id = dev
        t = time.perf_counter()
        err = rt.cudaMemPrefetchAsync(a.data.ptr, n, loc, 0, s.ptr)
        call = time.perf_counter() - t
        s.synchronize()
        res[name] = {"err": str(err[0] if isinstance(err, tuple) else err), "call_s": call,
                     "GBps": n / (time.perf_counter() - t) / 1e9}
    return res


attempt("managed_prefetch", managed_prefetch)


def cupti_probe():
    from cupti import cupti
    return {"timestamp": cupti.get_timestamp(), "version": cupti.get_version()}


attempt("cupti", cupti_probe)


def cudnn_probe():
    import cudnn
    return {"backend": cudnn.backend_version(), "attrs": [a for a in dir(cudnn) if "conv" in a.lower()][:20]}


attempt("cudnn", cudnn_probe)
attempt("torch", lambda: f"{__import__('torch').version.cuda} cudnn {__import__('torch').backends.cudnn.version()}")
attempt("torchvision", lambda: __import__("torchvision").__version__)
attempt("meminfo", lambda: open("/proc/meminfo").read().splitlines()[:3])
print(json.dumps(out, indent=1, default=str))
path = os.environ.get("OUT")
if path:
    with open(os.path.join(path, "probe.json"), "w") as f:
        json.dump(out, f, indent=1, default=str)
