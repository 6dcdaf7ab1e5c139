"""Where CUPTI's host->device bytes go missing under uvm, and what counting costs, inside one process.

    python3 bench/gpu/diagnose_um_tail.py [--iterations 3] [--toggled 10]

1. Reading CUPTI three ways (VGG-19 b64, uvm at 50%, `--iterations` each, all collectors on): as
   the collector does; waiting 0.5 s before each iteration's flush (do late records arrive?); CUPTI's
   worker thread flushing every 5 ms. Per iteration, CUPTI's bytes each way against the plan's, and
   the ops where the plan's faulted bytes exceed what CUPTI saw arrive during them the most.
2. Overhead with no process-to-process noise: one run whose unified-memory counters are switched on
   and off on alternate iterations (kernel records and NVML on throughout), under uvm and autovm at
   50%: the median counted iteration against the median uncounted one, and the counted iterations'
   bytes against the plan's.
Writes $OUT/diagnose_um_tail.json.
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

from vmexplorer.collectors import cupti_collector  # noqa: E402
from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402
from vmexplorer.graph import build_graph  # noqa: E402
from vmexplorer.plan import Direction, Mode  # noqa: E402
from vmexplorer.policies import compile_plan  # noqa: E402
from vmexplorer.records.collected import BYTES_DTOH, BYTES_HTOD, per_op  # noqa: E402

GIB = 2**30


def per_iteration(result, n: int) -> list[dict]:
    c = result.collected
    return [{"htod_gib": round(float(c.um_value[(c.um_kind == BYTES_HTOD) & (c.um_iteration == i)].sum()) / GIB, 3),
             "dtoh_gib": round(float(c.um_value[(c.um_kind == BYTES_DTOH) & (c.um_iteration == i)].sum()) / GIB, 3),
             "ms": round(float(result.timeline.iteration_ns()[i]) / 1e6, 1)} for i in range(n)]


def shortfall(graph, plan, result, n: int) -> list[dict]:
    """The ops whose planned faulted bytes exceed CUPTI's bytes in during them the most, per iteration."""
    tl = result.timeline
    seen = np.bincount(tl.op_index, weights=per_op(graph, tl, result.collected)["window_bytes_htod"],
                       minlength=len(graph.ops)) / n
    planned = np.zeros(len(graph.ops))
    for m in plan.memops:
        if m.mode is Mode.FAULT:
            planned[m.complete_before] += m.nbytes
    worst = np.argsort(seen - planned)[:8]
    return [{"op": graph.ops[k].name, "position": int(k), "planned_mib": round(planned[k] / 2**20, 1),
             "cupti_mib": round(seen[k] / 2**20, 1)} for k in worst if planned[k] > seen[k]]


def toggled(graph, plan, iterations: int) -> dict:
    """One run, unified-memory counters on for every other iteration."""
    original = cupti_collector.CuptiCollector.flush
    counted: list[bool] = [True]  # the state each iteration ran in; the warm-up counts

    def flush(self) -> None:
        original(self)
        cupti = self._cupti
        kind = cupti.ActivityKind.UNIFIED_MEMORY_COUNTER
        if counted[-1]:
            cupti.activity_disable(kind)
            self._configure(cupti, self.want_um, enable=0)
        else:
            self._configure(cupti, self.want_um, enable=1)
            cupti.activity_enable(kind)
        counted.append(not counted[-1])

    cupti_collector.CuptiCollector.flush = flush
    try:
        result = execute(graph, plan, RunSettings(iterations=iterations, warmup=1))
    finally:
        cupti_collector.CuptiCollector.flush = original
    on = np.array(counted[1:1 + iterations])  # recorded iterations (after the warm-up)
    ms = result.timeline.iteration_ns() / 1e6
    rows = per_iteration(result, iterations)
    return {"counted_ms": [float(x) for x in ms[on]], "uncounted_ms": [float(x) for x in ms[~on]],
            "overhead": float(np.median(ms[on]) / np.median(ms[~on]) - 1),
            "counted_htod_gib": [r["htod_gib"] for r, o in zip(rows, on) if o],
            "counted_dtoh_gib": [r["dtoh_gib"] for r, o in zip(rows, on) if o],
            "uncounted_htod_gib": [r["htod_gib"] for r, o in zip(rows, on) if not o]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--toggled", type=int, default=10)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    graph = build_graph("vgg19", 64)
    half = graph.footprint // 2
    plans = {p: compile_plan(graph, half, p) for p in ("uvm", "autovm")}
    uvm = plans["uvm"]
    doc: dict = {"plan_fault_gib": sum(m.nbytes for m in uvm.memops if m.mode is Mode.FAULT) / GIB,
                 "plan_dtoh_gib": sum(m.nbytes for m in uvm.memops if m.direction is Direction.TO_HOST) / GIB,
                 "variants": {}, "toggled": {}}
    print(json.dumps({k: v for k, v in doc.items() if k.startswith("plan")}), flush=True)
    for label, settle, period in (("as collected", 0.0, 0), ("0.5 s before each flush", 0.5, 0),
                                  ("CUPTI flushing every 5 ms", 0.0, 5)):
        cupti_collector.SETTLE_S, cupti_collector.FLUSH_PERIOD_MS = settle, period
        try:
            result = execute(graph, uvm, RunSettings(iterations=args.iterations, warmup=1))
        finally:
            cupti_collector.SETTLE_S, cupti_collector.FLUSH_PERIOD_MS = 0.0, 0
        row = {"iterations": per_iteration(result, args.iterations),
               "shortfall": shortfall(graph, uvm, result, args.iterations),
               "status": [(s.name, s.available, s.reason, s.dropped_records) for s in result.collected.status]}
        doc["variants"][label] = row
        print(label, json.dumps(row), flush=True)
    for label, policy, period in (("uvm", "uvm", 0), ("autovm", "autovm", 0),
                                  ("uvm, CUPTI flushing every 5 ms", "uvm", 5)):
        cupti_collector.FLUSH_PERIOD_MS = period
        try:
            row = toggled(graph, plans[policy], args.toggled)
        finally:
            cupti_collector.FLUSH_PERIOD_MS = 0
        doc["toggled"][label] = row
        print("toggled", label, json.dumps(row), flush=True)
    (out / "diagnose_um_tail.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
