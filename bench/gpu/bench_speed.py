"""No paging: our engine (`device` policy) against PyTorch eager, same model, batch and precision, one run.

    python3 bench/gpu/bench_speed.py [--cases vgg19:64,resnet50:64,alexnet:256] [--iterations 10]

PyTorch runs the same forward ops through torch.nn.functional with autograd and torch.optim.SGD
(momentum 0.9), TF32 allowed for convolutions and matmuls in both. Prints per-iteration medians and
the ratio engine / PyTorch (goal: at most 1.15).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))

from reference import forward_loss  # noqa: E402

from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402
from vmexplorer.engine.init import initial_value  # noqa: E402
from vmexplorer.graph import (
    Kind,  # noqa: E402
    build_graph,  # noqa: E402
)
from vmexplorer.policies import compile_plan  # noqa: E402
from vmexplorer.records import summarize  # noqa: E402


def torch_step_ms(graph, iterations: int, warmup: int = 2, benchmark: bool = False) -> float:
    import torch

    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    values, params = {}, []
    for t, tensor in enumerate(graph.tensors):
        v = initial_value(graph, t)
        if v is not None:
            values[t] = torch.from_numpy(v).cuda()
            if tensor.kind is Kind.WEIGHT:
                values[t].requires_grad_(True)
                params.append(values[t])
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def step():
        loss = forward_loss(graph, dict(values))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    times = []
    for i in range(warmup + iterations):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def engine_ms(graph, iterations: int, autotune: bool = False) -> tuple[float, float]:
    plan = compile_plan(graph, graph.footprint, "device")
    t = time.perf_counter()
    result = execute(graph, plan, RunSettings(iterations=iterations, warmup=2, autotune=autotune))
    wall = (time.perf_counter() - t) * 1e3 / (iterations + 2)
    return summarize(graph, plan, result.timeline)["iteration_ns"] / 1e6, wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="vgg19:64,resnet50:64,alexnet:256")
    ap.add_argument("--iterations", type=int, default=10)
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        model, batch = case.split(":")
        graph = build_graph(model, int(batch))
        ours, wall = engine_ms(graph, args.iterations)
        tuned, _ = engine_ms(graph, args.iterations, autotune=True)
        theirs = torch_step_ms(graph, args.iterations)
        theirs_tuned = torch_step_ms(graph, args.iterations, benchmark=True)
        rows.append({"model": model, "batch": int(batch), "engine_ms": ours, "engine_autotuned_ms": tuned,
                     "engine_wall_ms": wall, "pytorch_ms": theirs, "pytorch_benchmark_ms": theirs_tuned,
                     "ratio": ours / theirs, "ratio_autotuned": tuned / theirs_tuned})
        print(f"{model} b{batch}: autotuned engine {tuned:.1f} ms vs PyTorch cudnn.benchmark {theirs_tuned:.1f} ms: "
              f"{tuned / theirs_tuned:.2f}x", flush=True)
        print(f"{model} b{batch}: engine {ours:.1f} ms (autotuned {tuned:.1f}; GPU timeline, host wall "
              f"{wall:.0f} ms/it with warm-up), PyTorch eager {theirs:.1f} ms, engine/PyTorch {ours / theirs:.2f}x",
              flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_speed.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
