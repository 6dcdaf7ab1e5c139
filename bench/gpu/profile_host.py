"""Where the engine's host time goes: the Python that enqueues one iteration, op kind by op kind.

    python3 -m bench.gpu.profile_host [--case resnet50:64] [--iterations 4] [--top 30]

A model with many small ops (ResNet-50) can leave the GPU waiting on the host. This times, per
iteration, the host's enqueueing (the executor's step loop) against the GPU's iteration, the host time
of each step by op kind (a host clock around each `_issue`), and then the same run under cProfile
(which slows Python down, so only its shares mean anything).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="resnet50:64")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help="a tree holding vmexplorer")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.root).resolve()))  # --root picks the tree profiled: its vmexplorer first
    from vmexplorer.engine import executor
    from vmexplorer.engine.executor import RunSettings, execute
    from vmexplorer.engine.schedule import StepKind
    from vmexplorer.graph import build_graph
    from vmexplorer.policies import compile_plan
    from vmexplorer.records import summarize

    model, batch = args.case.split(":")
    graph = build_graph(model, int(batch))
    plan = compile_plan(graph, graph.footprint, "device")
    settings = RunSettings(iterations=args.iterations, warmup=0, collect=False)
    execute(graph, plan, RunSettings(iterations=1, warmup=1, collect=False))

    per_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    enqueue: list[float] = []
    issue, iteration = executor._issue, executor._iteration

    def timed_issue(cp, graph_, plan_, arena, stream, step, *rest):
        t = time.perf_counter()
        issue(cp, graph_, plan_, arena, stream, step, *rest)
        kind = graph.ops[step.index].kind if step.kind is StepKind.OP else step.kind.value
        per_kind[kind][0] += time.perf_counter() - t
        per_kind[kind][1] += 1

    def timed_iteration(*a):
        t = time.perf_counter()
        out = iteration(*a)
        enqueue.append((time.perf_counter() - t) * 1e3)
        return out

    executor._issue, executor._iteration = timed_issue, timed_iteration
    result = execute(graph, plan, settings)
    executor._issue, executor._iteration = issue, iteration
    gpu_ms = float(summarize(graph, plan, result.timeline)["iteration_ns"]) / 1e6
    issued = sum(v[0] for v in per_kind.values()) * 1e3 / args.iterations
    print(f"{model} b{batch}: GPU iteration {gpu_ms:.2f} ms; host enqueue per iteration "
          f"{', '.join(f'{x:.1f}' for x in enqueue)} ms, of which inside _issue {issued:.1f} ms")
    print(f"  {'step kind':28s} {'steps/it':>8s} {'host us/step':>12s} {'host ms/it':>10s}")
    for kind, (s, n) in sorted(per_kind.items(), key=lambda kv: -kv[1][0]):
        print(f"  {kind:28s} {n / args.iterations:8.0f} {s / n * 1e6:12.1f} {s * 1e3 / args.iterations:10.2f}")
    prof = cProfile.Profile()
    prof.enable()
    execute(graph, plan, settings)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue()[-12000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
