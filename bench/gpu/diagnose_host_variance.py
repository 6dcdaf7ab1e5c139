"""Why does a run with no paging vary from process to process? ResNet-50 b64 under `device` (host-bound:
many small ops launched from Python) with each collector alone, taking turns.

    python3 bench/gpu/diagnose_host_variance.py [--reps 3] [--iterations 10] [--tag NAME]

Ways: no collectors; NVML's sampler thread alone; CUPTI's kernel records alone; every collector. Per run,
the median and the spread (slowest / fastest) of its iterations, and the CPU the process ran on. Run it
in several processes to see the variation between them next to the variation between ways. Appends a
line per run to $OUT/diagnose_host_variance.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402
from vmexplorer.graph import build_graph  # noqa: E402
from vmexplorer.policies import compile_plan  # noqa: E402

WAYS = {"none": dict(collect=False), "nvml": dict(collectors=("nvml",)), "kernels": dict(collectors=("kernels",)),
        "all": dict()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--tag", default=str(os.getpid()))
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp()) / "diagnose_host_variance.jsonl"
    graph = build_graph("resnet50", 64)
    plan = compile_plan(graph, graph.footprint, "device")
    for rep in range(args.reps):
        for way, kw in WAYS.items():
            result = execute(graph, plan, RunSettings(iterations=args.iterations, warmup=2, **kw))
            ms = result.timeline.timed_ns() / 1e6
            row = {"process": args.tag, "rep": rep, "way": way, "median_ms": round(float(np.median(ms)), 2),
                   "spread": round(float(ms.max() / ms.min()), 2), "cpu": os.sched_getaffinity(0).__len__()}
            print(json.dumps(row), flush=True)
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
