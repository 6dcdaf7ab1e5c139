"""Does CUPTI see every byte of managed pages that come back to the GPU after a prefetch to the host?

    python3 bench/gpu/diagnose_um_round_trips.py [--mib 256] [--trips 8] [--pause 3.0]

The sample sessions' CUPTI records lack bytes to the device, most of all at the end of each
iteration: the SGD updates of VGG-19's classifier, whose weights already came back once in the same
iteration (forward), show no migration and no fault at all, while the op still takes the time of
moving them. Either CUPTI loses records, or the driver did not migrate those pages: the nvidia-uvm
driver has a thrashing heuristic (module parameters uvm_perf_thrashing_*) that pins a page migrating
too often within an epoch and maps it remotely, and a GPU access to a remote mapping crosses PCIe
without a migration record.

This asks with no engine in the way: one managed buffer, in one process with CUPTI's unified-memory
counters on (vmexplorer's CuptiCollector); per round trip, a prefetch to the host, then a kernel on
the GPU that touches every page (a read, or a read-modify-write like an SGD update), and the bytes
CUPTI saw each way, its fault groups and its thrashing, throttling and remote-map counters. The trips
run back to back, then spaced by `--pause` seconds (beyond the driver's thrashing epoch). Two timings
say where the pages really went, without CUPTI: the eviction (a full buffer's worth only if every page
was on the GPU) and a second read right after the trip (at HBM speed only if the trip migrated every
page). Prints one JSON line per trip and writes $OUT/diagnose_um_round_trips.json, with the driver's
module parameters and the libcupti the process loaded (to try another CUPTI: install cupti-python and
nvidia-cuda-cupti of that version and LD_PRELOAD its libcupti.so, or the one beside CuPy loads first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vmexplorer.collectors import CuptiCollector  # noqa: E402
from vmexplorer.engine import gpu  # noqa: E402


def driver_parameters() -> dict[str, str]:
    folder = Path("/sys/module/nvidia_uvm/parameters")
    out = {}
    for path in sorted(folder.glob("uvm_perf_*")) if folder.is_dir() else []:
        try:
            out[path.name] = path.read_text().strip()
        except OSError as e:
            out[path.name] = f"unreadable: {e}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--trips", type=int, default=8)
    ap.add_argument("--pause", type=float, default=3.0, help="seconds between trips in the spaced runs")
    args = ap.parse_args()
    cp = gpu.cupy()
    collector = CuptiCollector(kernels=False, memcpy=False)
    collector.start()  # before allocating: CUPTI follows managed memory allocated after its counters
    if not collector.available:
        print(json.dumps({"cupti": collector.reason}))
        return 1
    n = args.mib << 18  # int32 elements
    stream = cp.cuda.Stream(non_blocking=True)
    maps = Path("/proc/self/maps").read_text().splitlines() if Path("/proc/self/maps").exists() else []
    libcupti = next((line.split()[-1] for line in maps if "libcupti" in line), "unknown")
    report: dict = {"driver": driver_parameters(), "libcupti": libcupti, "mib": args.mib, "trips": args.trips,
                    "pause_s": args.pause, "runs": []}
    print(json.dumps({"driver": report["driver"]}), flush=True)
    for access in ("read", "update"):
        for spacing in ("back to back", "spaced"):
            memory = cp.cuda.malloc_managed(n * 4)
            x = cp.ndarray((n,), cp.int32, memory)
            x.fill(1)
            cp.cuda.Device().synchronize()
            trips = []
            for trip in range(args.trips if spacing == "back to back" else max(args.trips // 2, 2)):
                if spacing == "spaced" and trip:
                    time.sleep(args.pause)
                first = len(collector.rows["um_kind"])
                with stream:
                    marks = [cp.cuda.Event() for _ in range(5)]
                    marks[0].record(stream)
                    gpu.prefetch(memory.ptr, n * 4, to_device=False, stream=stream)
                    marks[1].record(stream)
                    stream.synchronize()
                    marks[2].record(stream)
                    if access == "read":
                        total = int(x.sum(dtype=cp.int64))
                        ok = total == n
                    else:
                        x += 1
                    marks[3].record(stream)
                    # the same pages read again at once: at HBM speed if the trip migrated them all,
                    # at PCIe speed if the GPU reached them where they lay on the host
                    x.sum(dtype=cp.int64)
                    marks[4].record(stream)
                    stream.synchronize()
                evict_ms = cp.cuda.get_elapsed_time(marks[0], marks[1])
                kernel_ms = cp.cuda.get_elapsed_time(marks[2], marks[3])
                again_ms = cp.cuda.get_elapsed_time(marks[3], marks[4])
                collector.flush()
                kinds, values = collector.rows["um_kind"][first:], collector.rows["um_value"][first:]
                seen: dict[str, int] = {}
                for k, v in zip(kinds, values):
                    seen[k] = seen.get(k, 0) + v
                if access == "update":
                    ok = bool((x[:: 1 << 18] == trip + 2).all())  # every 1 MiB: was each update applied?
                row = {"access": access, "spacing": spacing, "trip": trip, "evict_ms": round(evict_ms, 2),
                       "kernel_ms": round(kernel_ms, 2), "again_ms": round(again_ms, 3),
                       "htod_mib": round(seen.get("bytes_htod", 0) / 2**20, 1),
                       "dtoh_mib": round(seen.get("bytes_dtoh", 0) / 2**20, 1),
                       "fault_groups": seen.get("gpu_page_fault_groups", 0),
                       "thrashing": seen.get("thrashing", 0), "throttling": seen.get("throttling", 0),
                       "remote_map": seen.get("remote_map", 0), "correct": ok}
                trips.append(row)
                print(json.dumps(row), flush=True)
            report["runs"].append(trips)
            del x, memory
    collector.stop()
    report["dropped_records"] = collector.dropped
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    (out / "diagnose_um_round_trips.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
