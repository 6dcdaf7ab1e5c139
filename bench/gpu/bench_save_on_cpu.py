"""PyTorch's own answer to a small GPU, the anchor schedules are held against: save_on_cpu, side by side.

    python3 -m bench.gpu.bench_save_on_cpu [--cases vgg19:64,resnet50:64,alexnet:256] [--iterations 5]
        [--processes 3] [--policies autovm,belady --share 0.5] [--out DIR]

For each model, PyTorch eager trains the same graph as the engine (tests/gpu/reference.py's
forward_loss, torch.optim.SGD with momentum 0.9, TF32 convolutions and fp32 matmuls) twice: plainly,
and with every tensor autograd saves for backward moved to pinned host memory as it is saved and
brought back when backward needs it (`torch.autograd.graph.save_on_cpu(pin_memory=True)`). Per
configuration: the median iteration (host clock around a synchronised step) and the device memory it
took: torch.cuda.max_memory_allocated (the tensors' peak, weights and optimizer state included),
max_memory_reserved (what the caching allocator held), and cudaMemGetInfo's free bytes before the
model's tensors were made less the least free bytes seen after any step (what the card lost: the
allocator's reserve plus cuBLAS/cuDNN workspaces; one throwaway step per model comes first, so
lazily loaded kernel modules count in neither). Each process runs every configuration once, the
configurations in turn, one process after another, and the figures are medians over processes.
With --policies the engine runs those policies at --share of the footprint in the same processes,
reporting its GPU iteration and the executor's ledger peak (managed memory has no other reading).
Writes bench_save_on_cpu.txt and .json to --out.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
GiB = 1 << 30


def torch_config(graph: Any, save_on_cpu: bool, iterations: int, warmup: int = 2) -> dict[str, Any]:
    import torch

    from bench.gpu.bench_speed import torch_setup

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    torch.cuda.reset_peak_memory_stats()
    step = torch_setup(graph)
    times, least_free = [], free_before
    for i in range(warmup + iterations):
        torch.cuda.synchronize()
        t = time.perf_counter()
        if save_on_cpu:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                step()
        else:
            step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t) * 1e3)
        least_free = min(least_free, torch.cuda.mem_get_info()[0])
    row = {"config": "pytorch save_on_cpu(pin_memory=True)" if save_on_cpu else "pytorch",
           "iteration_ms": statistics.median(times), "max_allocated_bytes": torch.cuda.max_memory_allocated(),
           "max_reserved_bytes": torch.cuda.max_memory_reserved(), "mem_get_info_taken_bytes": free_before - least_free}
    del step
    gc.collect()
    torch.cuda.empty_cache()
    return row


def engine_config(graph: Any, policy: str, share: float, iterations: int) -> dict[str, Any]:
    from vmexplorer.engine.executor import RunSettings, execute
    from vmexplorer.policies import compile_plan
    from vmexplorer.records import summarize

    capacity = graph.footprint if policy == "device" else max(int(graph.footprint * share), graph.min_capacity[0])
    plan = compile_plan(graph, capacity, policy)
    result = execute(graph, plan, RunSettings(iterations=iterations, warmup=2, collect=False))
    memory = result.memory
    return {"config": f"engine {policy}" + ("" if policy == "device" else f" {share:.0%}"),
            "iteration_ms": float(summarize(graph, plan, result.timeline)["iteration_ns"]) / 1e6,
            "capacity_bytes": capacity, "ledger_peak_bytes": memory.ledger_peak_bytes if memory else None,
            "workspace_bytes": memory.workspace_bytes if memory else None}


def worker(args: argparse.Namespace, index: int) -> list[dict[str, Any]]:
    from vmexplorer.graph import build_graph

    rows = []
    for case in args.cases.split(","):
        model, batch = case.split(":")
        graph = build_graph(model, int(batch))
        # a throwaway step first: the kernels' modules load lazily, onto the device, on first use
        torch_config(graph, False, iterations=1, warmup=0)
        configs = [False, True] if index % 2 == 0 else [True, False]
        for flag in configs:
            rows.append({"model": model, "batch": int(batch), **torch_config(graph, flag, args.iterations)})
        for policy in filter(None, args.policies.split(",")):
            rows.append({"model": model, "batch": int(batch), **engine_config(graph, policy, args.share,
                                                                             args.iterations)})
    return rows


def summarise(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    keys = dict.fromkeys((r["model"], r["batch"], r["config"]) for rs in runs for r in rs)
    out = []
    for model, batch, config in keys:
        same = [r for rs in runs for r in rs if (r["model"], r["batch"], r["config"]) == (model, batch, config)]
        row: dict[str, Any] = {"model": model, "batch": batch, "config": config, "processes": len(same)}
        for key, value in same[0].items():
            if isinstance(value, (int, float)) and key not in ("batch",):
                row[key] = statistics.median(r[key] for r in same)
                row[key + "_per_process"] = [r[key] for r in same]
        out.append(row)
    return out


def report(rows: list[dict[str, Any]], env: dict[str, str], args: argparse.Namespace) -> str:
    lines = [f"bench_save_on_cpu: PyTorch eager with and without save_on_cpu(pin_memory=True); {args.iterations} "
             f"timed iterations per process, medians over {args.processes} processes",
             "environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), "",
             f"{'model':14s} {'configuration':40s} {'iteration':>10s} {'max allocated':>14s} {'max reserved':>13s} "
             f"{'cudaMemGetInfo':>15s} {'per process (ms)'}"]
    for r in rows:
        per = " ".join(f"{x:.1f}" for x in r["iteration_ms_per_process"])
        if "max_allocated_bytes" in r:
            mem = (f"{r['max_allocated_bytes'] / GiB:10.2f} GiB {r['max_reserved_bytes'] / GiB:9.2f} GiB "
                   f"{r['mem_get_info_taken_bytes'] / GiB:11.2f} GiB")
        else:
            mem = f"{'ledger peak':>14s} {(r['ledger_peak_bytes'] or 0) / GiB:9.2f} GiB {'(managed)':>15s}"
        lines.append(f"{r['model'] + ' b' + str(r['batch']):14s} {r['config']:40s} {r['iteration_ms']:7.1f} ms "
                     f"{mem} {per}")
    return "\n".join(lines) + "\n"


def environment() -> dict[str, str]:
    import torch

    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cudnn": str(torch.backends.cudnn.version()),
            "device_memory_GiB": f"{torch.cuda.mem_get_info()[1] / GiB:.1f}"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="vgg19:64,resnet50:64,alexnet:256")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--policies", default="", help="engine policies to run beside, e.g. autovm,belady")
    ap.add_argument("--share", type=float, default=0.5, help="the engine policies' capacity, of the footprint")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "bench" / "results" / "h200"))
    ap.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker >= 0:
        print(json.dumps(worker(args, args.worker)))
        return 0
    runs = []
    for p in range(args.processes):
        cmd = [sys.executable, "-m", "bench.gpu.bench_save_on_cpu", "--worker", str(p), "--cases", args.cases,
               "--iterations", str(args.iterations), "--policies", args.policies, "--share", str(args.share)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
        if done.returncode != 0:
            raise RuntimeError(f"process {p} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {p + 1}/{args.processes}: " + ", ".join(
            f"{r['model']} {r['config']} {r['iteration_ms']:.1f} ms" for r in runs[-1]), flush=True)
    rows = summarise(runs)
    env = environment()
    text = report(rows, env, args)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_save_on_cpu.txt").write_text(text)
    (out / "bench_save_on_cpu.json").write_text(json.dumps({"environment": env, "iterations": args.iterations,
                                                            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
