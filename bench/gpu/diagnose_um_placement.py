"""Do the host-to-device bytes CUPTI seems to miss arrive, and get lost on the way to the timeline?

    python3 bench/gpu/diagnose_um_placement.py

VGG-19 b64 under `uvm` at 50%, 2 timed iterations: unified memory counted in one iteration after them,
then in every iteration. For each run, CUPTI's raw unified-memory rows as the collector took them,
before they are placed on the timeline: bytes each way in all, bytes whose record starts before the
first recorded iteration (dropped by placement) and after the last one began, and, per recorded
iteration, the bytes placed there, against the plan. Writes $OUT/diagnose_um_placement.json.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vmexplorer.collectors import build  # noqa: E402
from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402
from vmexplorer.graph import build_graph  # noqa: E402
from vmexplorer.plan import Direction  # noqa: E402
from vmexplorer.policies import compile_plan  # noqa: E402

GIB = 2**30


def run(graph, plan, counted: int) -> dict:
    seen: dict = {}
    original = build.build_collected

    def capture(collectors, t0s, offsets, lengths=None):
        cupti = next(c for c in collectors if c.name == "cupti")
        seen.update(rows={k: list(v) for k, v in cupti.rows.items() if k.startswith("um_")}, t0s=list(t0s),
                    lengths=list(lengths or []), dropped=cupti.dropped, unexpected=cupti.unexpected)
        return original(collectors, t0s, offsets, lengths)

    build.build_collected = capture
    try:
        result = execute(graph, plan, RunSettings(iterations=2, warmup=1, counted=counted))
    finally:
        build.build_collected = original
    r = seen["rows"]
    start, end = np.array(r["um_start"], dtype=np.int64), np.array(r["um_end"], dtype=np.int64)
    kind, value = np.array(r["um_kind"], dtype=object), np.array(r["um_value"], dtype=np.int64)
    t0 = np.array(seen["t0s"], dtype=np.int64)
    out = {"counted": counted, "records": len(start), "dropped": seen["dropped"], "unexpected": seen["unexpected"],
           "iteration_ms": [round(float(x) / 1e6, 1) for x in result.timeline.iteration_ns()],
           "kinds": sorted(set(kind.tolist()))}
    for name, way in (("bytes_htod", "htod"), ("bytes_dtoh", "dtoh")):
        m = kind == name
        s, v = start[m], value[m]
        it = np.searchsorted(t0, s, side="right") - 1
        out[way] = {"all_gib": round(float(v.sum()) / GIB, 3),
                    "before_first_gib": round(float(v[it < 0].sum()) / GIB, 3),
                    "per_iteration_gib": [round(float(v[it == i].sum()) / GIB, 3) for i in range(len(t0))],
                    "start_minus_t0_ms": [round(float(x) / 1e6, 1) for x in
                                          np.percentile(s - t0[np.maximum(it, 0)], [0, 50, 100])] if len(s) else [],
                    "longest_record_ms": round(float((end[m] - s).max(initial=0)) / 1e6, 1)}
    out["plan_htod_gib"] = round(sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE) / GIB, 3)
    out["plan_dtoh_gib"] = round(sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST) / GIB, 3)
    return out


def main() -> int:
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    graph = build_graph("vgg19", 64)
    plan = compile_plan(graph, graph.footprint // 2, "uvm")
    doc = [run(graph, plan, 1), run(graph, plan, 0)]
    for row in doc:
        print(json.dumps(row), flush=True)
    (out / "diagnose_um_placement.json").write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
