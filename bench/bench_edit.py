"""Drag-to-simulate cost: re-plan a session's edited moves as `manual` and re-simulate, per model.

    python -m bench.bench_edit

Each edit moves one prefetch a step earlier (what a marker drag does), then compiles and simulates;
prints the median and worst time over the edits. Goal (issue 5): under 300 ms for VGG-19 on a
laptop-class CPU.
"""

from __future__ import annotations

import statistics
import sys
import time

from vmexplorer.graph import build_graph
from vmexplorer.plan import Move
from vmexplorer.policies import compile_plan
from vmexplorer.simulator import simulate

CASES = [("vgg19", 64), ("resnet50", 64), ("alexnet", 256), ("resnet152", 64)]
EDITS = 30


def main() -> int:
    for model, batch in CASES:
        graph = build_graph(model, batch)
        capacity = graph.footprint // 2
        moves = list(compile_plan(graph, capacity, "autovm").moves)
        times = []
        for i in range(EDITS):
            k = i % len(moves)
            mv = moves[k]
            edited = list(moves)
            if mv.prefetch_after is not None and mv.prefetch_after > mv.offload_after:
                edited[k] = Move(mv.tensor, mv.offload_after, mv.prefetch_after - 1)
            t = time.perf_counter()
            plan = compile_plan(graph, capacity, "manual", moves=edited)
            simulate(graph, plan)
            times.append((time.perf_counter() - t) * 1e3)
        print(f"{model} b{batch}: edit -> re-plan -> re-simulate median {statistics.median(times):.1f} ms, "
              f"worst {max(times):.1f} ms over {EDITS} edits ({len(graph.ops)} ops, {len(moves)} moves)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
