"""Why eviction bandwidth differs from process to process, and whether placing the host pages fixes it.

    python3 bench/gpu/diagnose_transfer_variance.py [--processes 5] [--mib 256]

Each measurement is a fresh process: a managed buffer of `--mib` MiB, filled on the GPU, moved to the
host and back five times with cudaMemPrefetchAsync, each move timed alone. The destination on the host
is either "host" (what the engine asks for: the driver picks the pages) or one NUMA node
(cudaMemLocationTypeHostNuma); and "host" again under `numactl --membind` to the GPU's node when numactl
is there. Processes of the different kinds take turns. Writes $OUT/diagnose_transfer_variance.json
with the machine's NUMA layout, the GPU's node and every process's rates.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(location: str, mib: int) -> dict:
    import cupy as cp
    from cuda.bindings import runtime as rt

    size = mib << 20
    memory = cp.cuda.malloc_managed(size)
    stream = cp.cuda.Stream(non_blocking=True)
    cp.ndarray((size,), cp.uint8, memptr=memory).fill(1)
    cp.cuda.Device().synchronize()

    def move(to_device: bool) -> float:
        loc = rt.cudaMemLocation()
        if to_device:
            loc.type, loc.id = rt.cudaMemLocationType.cudaMemLocationTypeDevice, 0
        elif location == "host":
            loc.type, loc.id = rt.cudaMemLocationType.cudaMemLocationTypeHost, 0
        else:
            loc.type, loc.id = rt.cudaMemLocationType.cudaMemLocationTypeHostNuma, int(location.removeprefix("numa"))
        t = time.perf_counter_ns()
        (err,) = rt.cudaMemPrefetchAsync(int(memory.ptr), size, loc, 0, stream.ptr)
        if err != rt.cudaError_t.cudaSuccess:
            raise RuntimeError(str(err))
        stream.synchronize()
        return size / (time.perf_counter_ns() - t)  # bytes per ns = GB/s

    out: dict[str, list[float]] = {"evict": [], "prefetch": []}
    for _ in range(5):
        out["evict"].append(round(move(False), 2))
        out["prefetch"].append(round(move(True), 2))
    return out


def gpu_node() -> int | None:
    import cupy as cp

    bus = cp.cuda.runtime.deviceGetPCIBusId(0).lower()
    for candidate in (bus, bus.replace("0000", "00000000", 1) if bus.startswith("0000") else bus):
        path = Path("/sys/bus/pci/devices") / candidate / "numa_node"
        if path.exists():
            return int(path.read_text())
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.mib)))
        return 0
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    nodes = sorted(int(p.name.removeprefix("node")) for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    node = gpu_node()
    doc: dict = {"numa_nodes": nodes, "gpu_numa_node": node, "numactl": bool(shutil.which("numactl")),
                 "lscpu": subprocess.run(["lscpu"], capture_output=True, text=True).stdout, "runs": []}
    print(json.dumps({k: v for k, v in doc.items() if k != "lscpu"}), flush=True)
    kinds = [("host", [])] + [(f"numa{n}", []) for n in nodes]
    if doc["numactl"] and node is not None and node >= 0:
        kinds.append(("host", ["numactl", f"--membind={node}", f"--cpunodebind={node}"]))
    for k in range(args.processes):
        for location, prefix in kinds:
            cmd = [*prefix, sys.executable, __file__, "--child", location, "--mib", str(args.mib)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            row = {"location": location, "numactl": " ".join(prefix[1:]) if prefix else "", "process": k}
            try:
                row.update(json.loads(done.stdout.strip().splitlines()[-1]))
            except (IndexError, json.JSONDecodeError):
                row["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1]
            doc["runs"].append(row)
            print(json.dumps(row), flush=True)
    (out / "diagnose_transfer_variance.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
