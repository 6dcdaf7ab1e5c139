"""Why the UVM driver's evictions run in two states on the H200: what the rate of one eviction follows.

Each trial evicts a managed buffer resident on the device to the host (cudaMemPrefetchAsync, CUDA events
around it) and brings it back. What varies: the idle time before the eviction (freed host pages handed back
to the hypervisor by a guest's free page reporting would come back slowly), whether host pages were freed
just before (another buffer's trip to the device), the CPU the calling thread runs on, and, in a series of
back-to-back evictions, whether the rate persists from one to the next. Prints one JSON object.

Run on the device: python3 bench/gpu/probe_eviction_state.py
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path

import cupy as cp
from cuda.bindings import runtime as rt

GiB = 1 << 30


def loc(to_device: bool):
    location = rt.cudaMemLocation()
    location.type = (rt.cudaMemLocationType.cudaMemLocationTypeDevice if to_device
                     else rt.cudaMemLocationType.cudaMemLocationTypeHost)
    location.id = 0
    return location


stream = cp.cuda.Stream(non_blocking=True)


def move(mem, nbytes: int, to_device: bool) -> float:
    """Seconds the prefetch took on the GPU."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    (err,) = rt.cudaMemPrefetchAsync(mem.ptr, nbytes, loc(to_device), 0, stream.ptr)
    assert err == rt.cudaError_t.cudaSuccess, err
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3


def managed(nbytes: int):
    mem = cp.cuda.malloc_managed(nbytes)
    cp.ndarray((nbytes // 4,), cp.float32, mem).fill(1.0)
    cp.cuda.Device().synchronize()
    return mem


def read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        return f"unreadable: {e}"


def vmstat() -> dict[str, int]:
    out = {}
    for line in read("/proc/vmstat").splitlines():
        k, _, v = line.partition(" ")
        out[k] = int(v)
    return out


def meminfo() -> dict[str, str]:
    keep = ("MemTotal", "MemFree", "MemAvailable", "AnonHugePages", "Hugepagesize")
    return {k: v.strip() for k, _, v in (line.partition(":") for line in read("/proc/meminfo").splitlines())
            if k in keep}


out: dict = {
    "system": {
        "cpus": os.cpu_count(), "affinity": sorted(os.sched_getaffinity(0)),
        "numa_nodes": sorted(p.name for p in Path("/sys/devices/system/node").glob("node*")),
        "thp": read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "page_reporting_order": read("/sys/module/page_reporting/parameters/page_reporting_order"),
        "balloon": sorted(p.name for p in Path("/sys/bus/virtio/drivers").glob("*")),
        "meminfo": meminfo(),
        "lscpu": subprocess.run(["lscpu"], capture_output=True, text=True).stdout[-1500:],
    }
}

N = 2 * GiB
buf = managed(N)
other = managed(N)
rate = lambda s: round(N / s / 1e9, 2)  # noqa: E731

# 1. Back-to-back evictions: does a rate persist from one eviction to the next?
series = []
v0 = vmstat()
for _ in range(16):
    series.append(rate(move(buf, N, False)))
    move(buf, N, True)
v1 = vmstat()
out["back_to_back_GBps"] = series
out["vmstat_delta_back_to_back"] = {k: v1[k] - v0.get(k, 0) for k in v1 if v1[k] - v0.get(k, 0) and
                                    any(s in k for s in ("pgalloc", "pgfree", "thp", "fault", "report", "balloon",
                                                         "compact", "numa"))}

# 2. Idle before the eviction, in random order.
gaps = [0.0, 0.2, 1.0, 3.0] * 3
random.Random(0).shuffle(gaps)
by_gap: dict[str, list[float]] = {}
for gap in gaps:
    time.sleep(gap)
    by_gap.setdefault(str(gap), []).append(rate(move(buf, N, False)))
    move(buf, N, True)
out["after_idle_GBps"] = by_gap

# 3. Host pages just freed: `other` goes host -> device (its host pages freed), then `buf` is evicted at once.
recycled, fresh = [], []
move(other, N, False)
for _ in range(4):
    move(other, N, True)
    recycled.append(rate(move(buf, N, False)))
    move(buf, N, True)
    move(other, N, False)
    fresh.append(rate(move(buf, N, False)))  # other holds host pages now; buf takes others
    move(buf, N, True)
out["evict_right_after_host_pages_freed_GBps"] = recycled
out["evict_while_other_holds_host_pages_GBps"] = fresh
move(other, N, True)

# 4. The CPU the calling thread runs on.
by_cpu = {}
cpus = sorted(os.sched_getaffinity(0))
for cpu in [] if os.environ.get('SKIP_CPUS') else cpus:
    os.sched_setaffinity(0, {cpu})
    r = []
    for _ in range(3):
        r.append(rate(move(buf, N, False)))
        move(buf, N, True)
    by_cpu[str(cpu)] = r
os.sched_setaffinity(0, set(cpus))
out["by_calling_cpu_GBps"] = by_cpu

# 5. Smaller evictions (the runs' are 16 MiB to a few hundred), back to back, 64 x 32 MiB.
small = []
for i in range(64):
    small.append(round((32 << 20) / move(type("M", (), {"ptr": buf.ptr + (i % 64) * (32 << 20)})(), 32 << 20,
                                         False) / 1e9, 2))
move(buf, N, True)
out["back_to_back_32MiB_GBps"] = small

# 6. Free page reporting: a guest hands freed 2 MiB blocks back to the hypervisor about 2 s after they are
# freed, and a block handed back costs the host a fault when it is next used. Just before each eviction,
# 8 GiB of anonymous memory is touched and freed (blocks the host still backs); the eviction follows at
# once ("warm") or 4 s later ("cold", after reporting has run), alternating.
import mmap  # noqa: E402

reporting: dict[str, list[float]] = {"warm": [], "cold": []}
for i in range(10):
    region = mmap.mmap(-1, 8 * GiB)
    for off in range(0, 8 * GiB, 4096):
        region[off] = 1
    region.close()
    kind = "warm" if i % 2 == 0 else "cold"
    if kind == "cold":
        time.sleep(4.0)
    reporting[kind].append(rate(move(buf, N, False)))
    move(buf, N, True)
out["after_freeing_8GiB_GBps"] = reporting
out["meminfo_after"] = meminfo()
print(json.dumps(out, indent=1))
