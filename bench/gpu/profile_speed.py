"""Where the engine's time goes against PyTorch eager's, kernel by kernel and op by op, one process.

    python3 -m bench.gpu.profile_speed [--cases vgg19:64,resnet50:64,alexnet:256] [--iterations 4]

Both sides run under torch.profiler (CUPTI kernel records: it sees CuPy's and cuDNN's kernels as well as
PyTorch's). Per case it prints, per iteration: the engine's GPU time per op kind (from its own events)
and its gaps, the kernels of each side grouped by family (conv, gemm, elementwise, ...) and the
largest kernels by name, and writes the full tables to $OUT/profile_speed.json. bench_speed.py times the
same comparison without a profiler attached.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.gpu.bench_speed import torch_setup
from vmexplorer.engine.executor import RunSettings, execute
from vmexplorer.graph import build_graph
from vmexplorer.policies import compile_plan

# kernel families by name, first match wins (cuDNN's engines, cuBLAS/CUTLASS, PyTorch's and ours)
FAMILIES = (
    ("batch_norm", r"bn_|batch_norm|welford"),
    ("conv", r"cudnn|conv|wgrad|dgrad|fprop|winograd|nchwToNhwc|nhwcToNchw"),
    ("gemm", r"gemm|cutlass|cublas|Kernel2|splitK"),
    ("pool", r"pool|max_pool"),
    ("sgd", r"sgd|multi_tensor|foreach"),
    ("reduce", r"reduce|_sum|Reduce"),
    ("relu/add/elementwise", r"relu|elementwise|vectorized|add|cupy_|mul|threshold|fill|copy"),
)


def family(name: str) -> str:
    for fam, pattern in FAMILIES:
        if re.search(pattern, name, re.IGNORECASE):
            return fam
    return "other"


def gpu_events(prof: Any) -> list[dict[str, Any]]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    trace = json.loads(Path(path).read_text())
    os.unlink(path)
    return [e for e in trace.get("traceEvents", []) if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]


def kernel_table(events: list[dict[str, Any]], iterations: int) -> dict[str, Any]:
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        row = by_name[f"{e['cat']}:{e['name']}"]
        row[0] += float(e.get("dur", 0)) / 1e3 / iterations
        row[1] += 1 / iterations
    families: dict[str, float] = defaultdict(float)
    for name, (ms, _) in by_name.items():
        families[family(name) if name.startswith("kernel:") else name.split(":")[0]] += ms
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])
    return {"total_ms": sum(v[0] for v in by_name.values()), "launches": sum(v[1] for v in by_name.values()),
            "families": dict(sorted(families.items(), key=lambda kv: -kv[1])),
            "kernels": [{"name": k, "ms": v[0], "count": v[1]} for k, v in top]}


def engine_profile(graph: Any, iterations: int) -> dict[str, Any]:
    import numpy as np
    import torch

    plan = compile_plan(graph, graph.footprint, "device")
    execute(graph, plan, RunSettings(iterations=1, warmup=1, collect=False))  # plans, kernels, handles
    t = time.perf_counter()
    result = execute(graph, plan, RunSettings(iterations=iterations, warmup=0, collect=False))
    wall = (time.perf_counter() - t) * 1e3 / iterations
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        execute(graph, plan, RunSettings(iterations=iterations, warmup=0, collect=False))
    tl = result.timeline
    per_kind: dict[str, float] = defaultdict(float)
    for k, s, e in zip(tl.op_index, tl.op_start_ns, tl.op_end_ns):
        per_kind[graph.ops[int(k)].kind] += (e - s) / 1e6 / iterations
    lengths = tl.iteration_ns()
    return {"iteration_ms": float(np.median(lengths)) / 1e6, "wall_ms_incl_setup": wall,
            "gaps_ms": float(tl.op_stall_ns.sum()) / 1e6 / iterations,
            "op_kinds_ms": dict(sorted(per_kind.items(), key=lambda kv: -kv[1])),
            **kernel_table(gpu_events(prof), iterations)}


def torch_profile(graph: Any, iterations: int, matmul_tf32: bool) -> dict[str, Any]:
    import torch

    step = torch_setup(graph, matmul_tf32=matmul_tf32)
    for _ in range(2):
        step()
    times = []
    for _ in range(iterations):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            step()
        torch.cuda.synchronize()
    return {"iteration_ms": statistics.median(times), **kernel_table(gpu_events(prof), iterations)}


def show(model: str, batch: int, eng: dict[str, Any], pt: dict[str, Any], pt_fp32: dict[str, Any]) -> None:
    print(f"\n== {model} b{batch}: engine {eng['iteration_ms']:.2f} ms (kernels {eng['total_ms']:.2f}, "
          f"{eng['launches']:.0f} launches, gaps {eng['gaps_ms']:.2f}) | PyTorch tf32 matmul "
          f"{pt['iteration_ms']:.2f} ms (kernels {pt['total_ms']:.2f}, {pt['launches']:.0f} launches) | "
          f"PyTorch fp32 matmul {pt_fp32['iteration_ms']:.2f} ms (kernels {pt_fp32['total_ms']:.2f})")
    print("engine op kinds (ms/it): " + ", ".join(f"{k} {v:.2f}" for k, v in eng["op_kinds_ms"].items()))
    fams = sorted(set(eng["families"]) | set(pt["families"]) | set(pt_fp32["families"]))
    print(f"  {'family':24s} {'engine':>8s} {'torch':>8s} {'torch32':>8s}")
    for f in fams:
        print(f"  {f:24s} {eng['families'].get(f, 0):8.2f} {pt['families'].get(f, 0):8.2f} "
              f"{pt_fp32['families'].get(f, 0):8.2f}")
    for side, data in (("engine", eng), ("torch", pt), ("torch fp32 matmul", pt_fp32)):
        print(f"  top kernels, {side}:")
        for k in data["kernels"][:14]:
            print(f"    {k['ms']:7.3f} ms x{k['count']:5.1f}  {k['name'][:150]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="vgg19:64,resnet50:64,alexnet:256")
    ap.add_argument("--iterations", type=int, default=4)
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        model, batch = case.split(":")
        graph = build_graph(model, int(batch))
        eng = engine_profile(graph, args.iterations)
        pt = torch_profile(graph, args.iterations, matmul_tf32=True)
        pt_fp32 = torch_profile(graph, args.iterations, matmul_tf32=False)
        show(model, int(batch), eng, pt, pt_fp32)
        rows.append({"model": model, "batch": int(batch), "engine": eng, "pytorch": pt, "pytorch_fp32_matmul": pt_fp32})
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "profile_speed.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
