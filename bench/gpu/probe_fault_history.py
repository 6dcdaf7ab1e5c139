"""Does a managed buffer that keeps coming back to the device by demand faults evict more slowly than one
that comes back by prefetches (the UVM driver's thrashing heuristics act on faulted pages only)?

Buffer A goes to the host and back by a kernel touching every page (demand faults); buffer B to the host
and back by cudaMemPrefetchAsync. After both have been through that cycle six times, their evictions are
timed alternately, each buffer keeping its own way back. Prints one JSON object, with the nvidia_uvm
module's parameters as this machine has them.

Run on the device: python3 bench/gpu/probe_fault_history.py
"""

import json
from pathlib import Path

import cupy as cp
from cuda.bindings import runtime as rt

N = 2 << 30
stream = cp.cuda.Stream(non_blocking=True)


def loc(to_device):
    location = rt.cudaMemLocation()
    location.type = (rt.cudaMemLocationType.cudaMemLocationTypeDevice if to_device
                     else rt.cudaMemLocationType.cudaMemLocationTypeHost)
    location.id = 0
    return location


def timed(fn):
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3


def prefetch(mem, to_device):
    (err,) = rt.cudaMemPrefetchAsync(mem.ptr, N, loc(to_device), 0, stream.ptr)
    assert err == rt.cudaError_t.cudaSuccess, err


def buffer():
    mem = cp.cuda.malloc_managed(N)
    return mem, cp.ndarray((N // 4,), cp.float32, mem)


(a_mem, a), (b_mem, b) = buffer(), buffer()
with stream:
    a.fill(1.0)
    b.fill(1.0)
stream.synchronize()


def _touch(x):
    with stream:
        x += 1.0


out = {"uvm_parameters": {p.name: p.read_text().strip() for p in
                          sorted(Path("/sys/module/nvidia_uvm/parameters").glob("*"))
                          if p.is_file() and p.stat().st_mode & 0o444}}
series = {"faulted_back": [], "prefetched_back": [], "faulted_back_return_GBps": [], "prefetched_back_return_GBps": []}
for i in range(16):
    ea = timed(lambda: prefetch(a_mem, False))
    ra = timed(lambda: _touch(a))
    eb = timed(lambda: prefetch(b_mem, False))
    rb = timed(lambda: prefetch(b_mem, True))
    if i >= 6:  # the first six cycles build each buffer's history
        series["faulted_back"].append(round(N / ea / 1e9, 2))
        series["prefetched_back"].append(round(N / eb / 1e9, 2))
        series["faulted_back_return_GBps"].append(round(N / ra / 1e9, 2))
        series["prefetched_back_return_GBps"].append(round(N / rb / 1e9, 2))
out["evict_GBps"] = series
print(json.dumps(out, indent=1))
