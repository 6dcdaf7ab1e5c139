"""Does draining CUPTI during an iteration recover the unified-memory records it loses?

    python3 bench/gpu/diagnose_um_drain.py [--iterations 2] [--variants drain|parts|all]

The recorded samples lose records in a pattern that repeats process after process: VGG-19 under uvm at
60% keeps exactly 1,023 device->host records per iteration (0.66 of the bytes), ResNet-50 under uvm at
50% none at all. 1,023 is a full ring of 1,024 entries, as if a queue filled between drains. Each
case runs with every collector on, reading CUPTI four ways: as the collector does (one forced flush
after each iteration); CUPTI's worker flushing every 1 ms; a thread asking CUPTI to flush (unforced)
every 10 ms; a thread forcing a flush every 50 ms (`drain`). And asking CUPTI for less: no page-fault
records; migration counters alone, no kernel records or NVML (`parts`). Per variant: CUPTI's bytes
each way as a share of the plan's, the records CUPTI says it dropped, and the iteration time.
Writes $OUT/diagnose_um_VARIANTS.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vmexplorer.collectors import cupti_collector  # noqa: E402
from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402
from vmexplorer.graph import build_graph  # noqa: E402
from vmexplorer.plan import Direction  # noqa: E402
from vmexplorer.policies import compile_plan  # noqa: E402
from vmexplorer.records.collected import BYTES_DTOH, BYTES_HTOD  # noqa: E402


def drained(every_s: float, force: int):
    """Patch the collector so a thread flushes CUPTI every `every_s` while it runs."""
    start, stop = cupti_collector.CuptiCollector.start, cupti_collector.CuptiCollector.stop

    def start_(self) -> None:
        start(self)
        self._quit = threading.Event()

        def loop() -> None:
            while not self._quit.wait(every_s):
                self._cupti.activity_flush_all(force)

        self._drain = threading.Thread(target=loop, daemon=True)
        self._drain.start()

    def stop_(self) -> None:
        if hasattr(self, "_quit"):
            self._quit.set()
            self._drain.join()
        stop(self)

    return start_, stop_


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--variants", choices=("drain", "parts", "all"), default="all")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    doc: dict = {}
    original = cupti_collector.CuptiCollector.start, cupti_collector.CuptiCollector.stop
    for model, share in (("vgg19", 0.6), ("resnet50", 0.5)):
        graph = build_graph(model, 64)
        plan = compile_plan(graph, int(graph.footprint * share), "uvm")
        planned_in = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE)
        planned_out = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
        labels = {"drain": ["CUPTI worker flushing every 1 ms", "a thread flushing every 10 ms",
                            "a thread forcing a flush every 50 ms"],
                  "parts": ["no page-fault records", "migration counters alone"]}
        chosen = ["as collected"] + sum((v for k, v in labels.items() if args.variants in (k, "all")), [])
        for label in chosen:
            parts = {"no page-fault records": ("kernels", "migrations", "nvml"),
                     "migration counters alone": ("migrations",)}.get(label, RunSettings().collectors)
            if label.startswith("CUPTI worker"):
                cupti_collector.FLUSH_PERIOD_MS = 1
            elif label.startswith("a thread flushing"):
                cupti_collector.CuptiCollector.start, cupti_collector.CuptiCollector.stop = drained(0.01, 0)
            elif label.startswith("a thread forcing"):
                cupti_collector.CuptiCollector.start, cupti_collector.CuptiCollector.stop = drained(0.05, 1)
            try:
                result = execute(graph, plan, RunSettings(iterations=args.iterations, warmup=1, collectors=parts))
            finally:
                cupti_collector.FLUSH_PERIOD_MS = 0
                cupti_collector.CuptiCollector.start, cupti_collector.CuptiCollector.stop = original
            c = result.collected
            n = args.iterations
            row = {"htod_share": [round(float(c.um_value[(c.um_kind == BYTES_HTOD) & (c.um_iteration == i)].sum())
                                        / planned_in, 3) for i in range(n)],
                   "dtoh_share": [round(float(c.um_value[(c.um_kind == BYTES_DTOH) & (c.um_iteration == i)].sum())
                                        / planned_out, 3) for i in range(n)],
                   "dtoh_records": [int(c.um_records[(c.um_kind == BYTES_DTOH) & (c.um_iteration == i)].sum())
                                    for i in range(n)],
                   "dropped": [s.dropped_records for s in c.status if s.name == "cupti"][0],
                   "ms": [round(float(x) / 1e6, 1) for x in result.timeline.iteration_ns()],
                   "median_ms": round(float(np.median(result.timeline.iteration_ns())) / 1e6, 1)}
            doc[f"{model} uvm {share:.0%}: {label}"] = row
            print(f"{model} uvm {share:.0%}: {label}", json.dumps(row), flush=True)
    (out / f"diagnose_um_{args.variants}.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
