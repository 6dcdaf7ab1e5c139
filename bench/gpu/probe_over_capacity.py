"""Which setting makes a swap run take more than its capacity: recomputing, deterministic cuDNN, least workspaces?

    python3 -m bench.gpu.probe_over_capacity      (on the GPU; one JSON line per run)

test_recomputing_never_changes_the_math recorded swap runs of checkpoint plans taking up to 111 MB more than
their capacity (bench/results/h200/gpu_results_recompute.jsonl: alexnet b64 128px), while bench_recompute's
checkpoint runs (default settings, full graphs) kept within theirs. That test runs deterministic cuDNN engines
on a graph fitted to its least workspaces; this probe runs belady and checkpoint plans under swap at 80% with
each of those settings on and off, so the one that takes more shows. Not yet run: the session that wrote it
had no device time left (notes/README.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from vmexplorer.engine.executor import RunSettings, execute
from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import Plan
from vmexplorer.policies import compile_plan

CASES = [("alexnet", 64, 128), ("vgg11", 32, 128)]  # those the math test found over, and one it did not
PLANS: list[tuple[str, dict[str, Any]]] = [("belady", {}), ("checkpoint", {"segments": 2, "then": "none"}),
                                           ("checkpoint", {"segments": 4, "then": "belady"})]


def row(case: str, graph: Graph, plan: Plan, deterministic: bool) -> None:
    t = time.time()
    r = execute(graph, plan, RunSettings(iterations=2, warmup=1, collect=False, deterministic=deterministic,
                                         allow_tf32=not deterministic))
    m = r.device_memory
    assert m is not None
    print(json.dumps({"case": case, "deterministic": deterministic, "capacity": plan.capacity,
                      "taken": m.taken_bytes, "over": m.taken_bytes - plan.capacity, "pool": m.pool_bytes,
                      "scratch": m.scratch_bytes, "ledger": m.ledger_peak_bytes,
                      "recomputes": len(plan.recomputes), "s": round(time.time() - t, 1)}), flush=True)


def main() -> None:
    for model, batch, size in CASES:
        plain = build_graph(model, batch, size)
        least = replace(plain.fitted(0), capacity=None, full=None)  # as the math test fits it
        warm = RunSettings(iterations=1, warmup=0, collect=False)  # cuDNN's handle, CuPy's kernels: loaded once
        execute(plain, compile_plan(plain, plain.footprint, "device"), warm)
        for name, g in (("least workspaces", least), ("full graph", plain)):
            capacity = int(g.footprint * 0.8)
            for deterministic in (True, False):
                for policy, options in PLANS:
                    plan = compile_plan(g, capacity, policy, options, mechanism="swap")
                    row(f"{model} b{batch} {size}px {name} {policy} {options}", g, plan, deterministic)


if __name__ == "__main__":
    main()
