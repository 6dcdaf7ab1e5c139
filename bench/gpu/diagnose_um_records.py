"""Do CUPTI's unified-memory records account for every byte the plan moves, in a fresh process?

    python3 bench/gpu/diagnose_um_records.py [--model vgg19] [--policy uvm] [--reps 3]

In one new process: the same plan recorded twice with every collector on, each time printing per
iteration CUPTI's bytes each way and fault records next to the plan's, and the collector's counts of
unreadable, unexpected and dropped records. Then the overhead under the policy, the configurations
taking turns `--reps` times (iterations vary by 10% from run to run). Writes $OUT/diagnose_um.json.
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

from vmexplorer.engine import executor  # noqa: E402
from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402
from vmexplorer.graph import build_graph  # noqa: E402
from vmexplorer.plan import Direction  # noqa: E402
from vmexplorer.policies import compile_plan  # noqa: E402
from vmexplorer.records import summarize  # noqa: E402
from vmexplorer.records.collected import UM_KINDS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vgg19")
    ap.add_argument("--policy", default="uvm")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warm-first", action="store_true",
                    help="run the same plan once without collectors first, as bench_collectors.py does")
    ap.add_argument("--device-first", action="store_true",
                    help="run the device policy (with collectors) first, as bench_collectors.py does")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    graph = build_graph(args.model, 64)
    plan = compile_plan(graph, graph.footprint // 2, args.policy)
    plan_in = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE)
    plan_out = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
    seen: list = []
    original = executor._start_collectors

    def spy(*a, **k):
        collectors = original(*a, **k)
        seen.append(collectors[0])
        return collectors

    executor._start_collectors = spy
    report: dict = {"plan_htod": plan_in, "plan_dtoh": plan_out, "runs": []}
    if args.warm_first:
        execute(graph, plan, RunSettings(iterations=1, warmup=1, collect=False))
    if args.device_first:
        execute(graph, compile_plan(graph, graph.footprint, "device"), RunSettings(iterations=1, warmup=1))
    for run in range(2):
        result = execute(graph, plan, RunSettings(iterations=3, warmup=1))
        c, cupti = result.collected, seen[-1]
        n = result.timeline.iterations
        row = {"raw_um_records": len(cupti.rows["um_value"]), "unreadable": cupti.unreadable,
               "unexpected": cupti.unexpected, "dropped": cupti.dropped}
        for kind in ("bytes_htod", "bytes_dtoh", "gpu_page_fault_groups"):
            mask = c.um_kind == UM_KINDS.index(kind)
            row[kind] = np.bincount(c.um_iteration[mask], weights=c.um_value[mask], minlength=n).tolist()
        raw_kinds = {k: cupti.rows["um_kind"].count(k) for k in set(cupti.rows["um_kind"])}
        raw_bytes = {k: sum(v for kk, v in zip(cupti.rows["um_kind"], cupti.rows["um_value"]) if kk == k)
                     for k in ("bytes_htod", "bytes_dtoh")}
        row.update(raw_kinds=raw_kinds, raw_bytes_all_iterations_and_warmup=raw_bytes)
        report["runs"].append(row)
        print(f"run {run}: plan htod {plan_in / 2**30:.2f} GiB, dtoh {plan_out / 2**30:.2f} GiB per iteration; "
              f"CUPTI per iteration htod {[round(x / 2**30, 2) for x in row['bytes_htod']]}, dtoh "
              f"{[round(x / 2**30, 2) for x in row['bytes_dtoh']]}, fault groups {row['gpu_page_fault_groups']}; "
              f"raw records {row['raw_um_records']} by kind {raw_kinds}, raw bytes (with warm-up) "
              f"{ {k: round(v / 2**30, 2) for k, v in raw_bytes.items()} }; unreadable {cupti.unreadable}, "
              f"unexpected {cupti.unexpected}, dropped {cupti.dropped}", flush=True)
    configs = {"none": RunSettings(iterations=3, warmup=1, collect=False),
               "all": RunSettings(iterations=3, warmup=1),
               "all but faults": RunSettings(iterations=3, warmup=1, collectors=("kernels", "migrations", "nvml"))}
    times: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(args.reps):
        for label, settings in configs.items():
            result = execute(graph, plan, settings)
            times[label].append(summarize(graph, plan, result.timeline)["iteration_ns"] / 1e6)
    med = {k: float(np.median(v)) for k, v in times.items()}
    for k, v in med.items():
        print(f"{args.policy}, collectors {k}: {v:.1f} ms ({v / med['none'] - 1:+.1%}; runs "
              f"{[round(x, 1) for x in times[k]]})", flush=True)
    report["overhead_runs_ms"] = times
    (out / "diagnose_um.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
