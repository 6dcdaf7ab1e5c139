"""Collectors on the GPU: what CUPTI measures against what the plan says, their overhead, and the
size of a long session, in one run.

    python3 bench/gpu/bench_collectors.py [--iterations 5] [--long 20]

1. VGG-19 b64 at 50% under uvm and autovm, with collectors: CUPTI's host->device and device->host
   bytes per iteration next to the plan's, and the GPU page-fault groups and faults per iteration.
2. The same uvm and device runs without collectors: the overhead, measured side by side.
3. Under uvm, where the overhead comes from: the same run with each part of the collectors on alone
   (kernels, migrations, faults, nvml), all, and all but the page-fault records, side by side.
4. Where CUPTI's host->device bytes fall short of the plan's, op by op (the five largest gaps), and
   the driver's remote-mapping, thrashing and throttling records.
5. A `--long`-iteration VGG-19 uvm run with everything on, saved: the session file's size.
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

from vmexplorer.collected import UM_KINDS, per_op  # noqa: E402
from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402
from vmexplorer.models import build_graph  # noqa: E402
from vmexplorer.plan import Direction, Mode  # noqa: E402
from vmexplorer.policies import compile_plan  # noqa: E402
from vmexplorer.records import summarize  # noqa: E402
from vmexplorer.session import new_session, save_session  # noqa: E402


def per_iteration(collected, kind: str, iterations: int) -> float:
    k = UM_KINDS.index(kind)
    rows = np.asarray(collected.um_kind) == k
    return float(np.asarray(collected.um_value)[rows].sum()) / max(iterations, 1)


def faulted_pages(collected, iterations: int) -> float:
    rows = np.asarray(collected.um_kind) == UM_KINDS.index("gpu_page_fault_groups")
    return float(np.asarray(collected.um_records)[rows].sum()) / iterations


def gaps(graph, plan, timeline, collected, iterations: int) -> list[dict]:
    """The ops whose planned bytes in (faults they take, prefetches that must land before them) exceed
    what CUPTI saw arrive during them the most, per iteration."""
    figures = per_op(graph, timeline, collected)
    seen = np.bincount(timeline.op_index, weights=figures["window_bytes_htod"], minlength=len(graph.ops)) / iterations
    planned = np.zeros(len(graph.ops))
    for m in plan.memops:
        if m.direction is Direction.TO_DEVICE:
            planned[m.complete_before if m.mode is not Mode.FAULT else m.issue_after + 1] += m.nbytes
    worst = np.argsort(seen - planned)[:5]
    return [{"op": graph.ops[k].name, "planned": int(planned[k]), "cupti": int(seen[k]),
             "fault_groups": int(np.bincount(timeline.op_index, weights=figures["fault_groups"],
                                             minlength=len(graph.ops))[k] / iterations)} for k in worst]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--long", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    graph = build_graph("vgg19", 64)
    half = graph.footprint // 2
    rows = {}
    for policy, capacity in (("device", graph.footprint), ("uvm", half), ("autovm", half)):
        plan = compile_plan(graph, capacity, policy)
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(1 if policy == "uvm" else min(args.reps, 2)):  # uvm's taking turns comes below, in more detail
            for collect in (False, True):
                result = execute(graph, plan, RunSettings(iterations=args.iterations, warmup=1, collect=collect))
                runs[collect].append(summarize(graph, plan, result.timeline)["iteration_ns"] / 1e6)
                if collect:
                    c = result.collected
        timed = {k: float(np.median(v)) for k, v in runs.items()}
        n = args.iterations
        planned_in = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE)
        planned_faults = sum(m.nbytes for m in plan.memops if m.mode is Mode.FAULT)
        planned_out = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
        row = {"without_ms": timed[False], "with_ms": timed[True], "overhead": timed[True] / timed[False] - 1,
               "cupti_htod_bytes": per_iteration(c, "bytes_htod", n), "plan_htod_bytes": planned_in,
               "plan_fault_bytes": planned_faults,
               "cupti_dtoh_bytes": per_iteration(c, "bytes_dtoh", n), "plan_dtoh_bytes": planned_out,
               "faulted_pages": faulted_pages(c, n), "fault_groups": per_iteration(c, "gpu_page_fault_groups", n),
               "remote_map_bytes": per_iteration(c, "remote_map", n),
               "thrashing_bytes": per_iteration(c, "thrashing", n),
               "throttling": per_iteration(c, "throttling", n),
               "kernels": len(c.kernel_start_ns) / n,
               "status": [(s.name, s.available, s.reason, s.dropped_records) for s in c.status]}
        if policy != "device":
            row["largest_gaps"] = gaps(graph, plan, result.timeline, c, n)
        rows[policy] = row
        print(f"vgg19 b64 {policy:>6}: {timed[False]:.1f} ms without collectors, {timed[True]:.1f} ms with "
              f"({row['overhead']:+.1%}); CUPTI htod {row['cupti_htod_bytes'] / 2**30:.2f} GiB/it vs plan "
              f"{planned_in / 2**30:.2f}; dtoh {row['cupti_dtoh_bytes'] / 2**30:.2f} vs {planned_out / 2**30:.2f}; "
              f"faulted pages {row['faulted_pages']:.0f}/it, fault groups {row['fault_groups']:.0f}/it; "
              f"remote-mapped {row['remote_map_bytes'] / 2**20:.1f} MiB/it, thrashing "
              f"{row['thrashing_bytes'] / 2**20:.1f} MiB/it, throttling {row['throttling']:.0f}/it; "
              f"largest gaps {row.get('largest_gaps')}; kernels {row['kernels']:.0f}/it; {row['status']}", flush=True)
    plan = compile_plan(graph, half, "uvm")
    # uvm iterations vary by 10% or more from run to run, so the configurations take turns, `--reps` times,
    # and each keeps its median
    configs = {"none": None, "all": RunSettings(iterations=args.iterations, warmup=1),
               "all, NVML every 200 ms": RunSettings(iterations=args.iterations, warmup=1, nvml_interval_s=0.2),
               "all but faults": RunSettings(iterations=args.iterations, warmup=1,
                                             collectors=("kernels", "migrations", "nvml")),
               "all but NVML": RunSettings(iterations=args.iterations, warmup=1,
                                           collectors=("kernels", "migrations", "faults")),
               "kernels and migrations": RunSettings(iterations=args.iterations, warmup=1,
                                                     collectors=("kernels", "migrations"))}
    samples: dict[str, list[float]] = {label: [] for label in configs}
    for _ in range(args.reps):
        for label, settings in configs.items():
            settings = settings or RunSettings(iterations=args.iterations, warmup=1, collect=False)
            result = execute(graph, plan, settings)
            samples[label].append(summarize(graph, plan, result.timeline)["iteration_ns"] / 1e6)
    breakdown = {label: float(np.median(v)) for label, v in samples.items()}
    for label, ms in breakdown.items():
        print(f"uvm, collectors {label}: {ms:.1f} ms ({ms / breakdown['none'] - 1:+.1%}; runs {samples[label]})",
              flush=True)
    rows["uvm_breakdown_runs_ms"] = samples
    rows["uvm"].update(without_ms=breakdown["none"], with_ms=breakdown["all"],
                       overhead=breakdown["all"] / breakdown["none"] - 1)
    rows["uvm_breakdown_ms"] = breakdown
    result = execute(graph, plan, RunSettings(iterations=args.long, warmup=1, collect=True))
    path = out / f"vgg19-b64-uvm-50pct-{args.long}it.measured.vms"
    save_session(new_session(graph, plan, result.timeline, environment=result.environment,
                             collected=result.collected), path, force=True)
    rows["long_session_bytes"] = path.stat().st_size
    print(f"{args.long}-iteration VGG-19 uvm session with collectors: {path.stat().st_size / 1e6:.1f} MB", flush=True)
    (out / "bench_collectors.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
