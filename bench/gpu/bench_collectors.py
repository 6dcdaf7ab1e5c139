"""Collectors on the GPU, in one process: what they cost, what CUPTI counts against the plan, and how
large a long session is.

    python3 -m bench.gpu.bench_collectors [--iterations 6] [--reps 5] [--long 20]
                                          [--policies device,uvm,autovm] [--into FILE]

1. Overhead. VGG-19 b64 under `device` (whole footprint), `uvm` and `autovm` at 50%, three ways taking
   turns `--reps` times: no collectors; every collector, unified memory counted in one iteration after
   the timed ones (the default, `RunSettings.counted=1`); every collector, unified memory counted in every
   iteration (`counted=0`, how runs were recorded before). Each run gives the median of its timed
   iterations; each way, the median over its runs. The counted iteration of a default run against that
   run's timed median is what counting costs inside one run.
2. CUPTI in the counted iterations against the plan, per iteration: bytes each way, faulted pages and
   fault groups, remote-mapped bytes, and the ops where CUPTI saw the fewest bytes arrive. The first
   paging run of the process is a default run with no uncounted paging run before it.
3. Session sizes: a `--long`-iteration VGG-19 `uvm` run with everything on, saved, counted the default
   way and in every iteration.
Writes FILE (default $OUT/bench_collectors.json; bench/report_h100.py renders it) after each policy: an
existing FILE keeps the policies this run does not measure, so a long benchmark can be run in parts
(`--long 0` skips part 3).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from vmexplorer.engine.executor import RunResult, RunSettings, execute, measured_session
from vmexplorer.graph import build_graph
from vmexplorer.plan import Direction, Mode
from vmexplorer.policies import compile_plan
from vmexplorer.records import summarize
from vmexplorer.records.collected import collected_summary, migration_shares, per_op
from vmexplorer.session import save_session

WAYS = ("counted after", "none", "counted throughout")  # the first paging run of the process counts after


def settings(way: str, iterations: int) -> RunSettings:
    if way == "none":
        return RunSettings(iterations=iterations, warmup=1, collect=False)
    return RunSettings(iterations=iterations, warmup=1, counted=1 if way == "counted after" else 0)


def gaps(graph, plan, result) -> list[dict]:
    """The ops whose planned bytes in (faults they take, prefetches that must land before them) exceed
    what CUPTI saw arrive during them the most, per counted iteration."""
    tl, c = result.timeline, result.collected
    counted = tl.op_iteration >= (tl.timed_iterations if tl.counted else 0)
    n = tl.counted or tl.iterations
    figures = per_op(graph, tl, c)
    seen = np.bincount(tl.op_index[counted], weights=figures["window_bytes_htod"][counted],
                       minlength=len(graph.ops)) / n
    groups = np.bincount(tl.op_index[counted], weights=figures["fault_groups"][counted], minlength=len(graph.ops)) / n
    planned = np.zeros(len(graph.ops))
    for m in plan.memops:
        if m.direction is Direction.TO_DEVICE:
            planned[m.complete_before if m.mode is not Mode.FAULT else m.issue_after + 1] += m.nbytes
    worst = np.argsort(seen - planned)[:5]
    return [{"op": graph.ops[k].name, "planned": int(planned[k]), "cupti": int(seen[k]),
             "fault_groups": int(groups[k])} for k in worst]


def one_run(graph, plan, way: str, iterations: int) -> tuple[dict, RunResult]:
    result = execute(graph, plan, settings(way, iterations))
    tl = result.timeline
    run = {"timed_ms": float(summarize(graph, plan, tl)["iteration_ns"]) / 1e6,
           "timed_all_ms": [round(float(x) / 1e6, 1) for x in tl.timed_ns()]}
    if tl.counted:
        run["counted_ms"] = [round(float(x) / 1e6, 1) for x in tl.iteration_ns()[tl.timed_iterations:]]
    if result.collected is not None:
        summary = collected_summary(tl, result.collected)
        run["cupti"] = {k: summary[k] for k in ("bytes_htod", "bytes_dtoh", "fault_groups", "faulted_pages",
                                                "remote_map_bytes", "thrashing_bytes", "throttling", "kernels",
                                                "dropped_records") if k in summary}
        run["shares"] = migration_shares(plan, tl, result.collected, summary)
    return run, result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--long", type=int, default=20)
    ap.add_argument("--policies", default="device,uvm,autovm")
    ap.add_argument("--into", type=Path)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    into = args.into or out / "bench_collectors.json"
    graph = build_graph("vgg19", 64)
    half = graph.footprint // 2
    doc: dict = json.loads(into.read_text()) if into.exists() else {"policies": {}}
    doc.update(iterations=args.iterations, reps=args.reps)
    wanted = args.policies.split(",")
    for policy, capacity in (("device", graph.footprint), ("uvm", half), ("autovm", half)):
        if policy not in wanted:
            continue
        plan = compile_plan(graph, capacity, policy)
        runs: dict[str, list[dict]] = {way: [] for way in WAYS}
        last: RunResult | None = None
        for rep in range(args.reps if policy != "device" else min(args.reps, 3)):
            for way in WAYS:
                run, result = one_run(graph, plan, way, args.iterations)
                runs[way].append(run)
                if way == "counted after":
                    last = result
                print(policy, rep, way, json.dumps(run), flush=True)
        assert last is not None  # every policy runs `counted after` at least once
        median = {way: float(np.median([r["timed_ms"] for r in rs])) for way, rs in runs.items()}
        counted = [float(np.median(r["counted_ms"])) / r["timed_ms"] - 1 for r in runs["counted after"]]
        row = {"runs": runs, "median_ms": median,
               "overhead": median["counted after"] / median["none"] - 1,
               "overhead_counted_throughout": median["counted throughout"] / median["none"] - 1,
               "counting_cost_in_run": float(np.median(counted)),
               "plan_htod_bytes": sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE),
               "plan_dtoh_bytes": sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST),
               "plan_fault_bytes": sum(m.nbytes for m in plan.memops if m.mode is Mode.FAULT),
               "status": [(s.name, s.available, s.reason, s.dropped_records) for s in last.collected.status]}
        if policy != "device":
            row["largest_gaps"] = gaps(graph, plan, last)
        doc["policies"][policy] = row
        print(f"vgg19 b64 {policy}: none {median['none']:.1f} ms, counted after {median['counted after']:.1f} ms "
              f"({row['overhead']:+.1%}), counted throughout {median['counted throughout']:.1f} ms "
              f"({row['overhead_counted_throughout']:+.1%}); counted iteration vs timed "
              f"{row['counting_cost_in_run']:+.1%}", flush=True)
        into.write_text(json.dumps(doc, indent=1, default=str))
    plan = compile_plan(graph, half, "uvm")
    for way in ("counted after", "counted throughout") if args.long else ():
        result = execute(graph, plan, settings(way, args.long))
        path = out / f"vgg19-b64-uvm-50pct-{args.long}it-{way.replace(' ', '-')}.measured.vms"
        save_session(measured_session(graph, plan, result, notes=(f"bench_collectors: {way}",)), path, force=True)
        doc.setdefault("long", {})[way] = {"iterations": args.long, "counted": result.timeline.counted,
                            "bytes": path.stat().st_size}
        print(f"{args.long}-iteration VGG-19 uvm session, {way}: {path.stat().st_size / 1e6:.2f} MB", flush=True)
        path.unlink()
        into.write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
