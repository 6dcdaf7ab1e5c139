"""Recomputing beside moving, side by side with PyTorch's activation checkpointing (issue 34, item 6).

    python3 -m bench.gpu.bench_recompute [--cases vgg19:64,resnet50:64,alexnet:256] [--iterations 5]
        [--processes 3] [--share 0.5] [--segments 2,4,8] [--out DIR]

In each process, for each model: PyTorch eager trains the engine's graph (tests/gpu/reference.py's ops,
SGD with momentum 0.9, TF32 convolutions) plainly, with `torch.utils.checkpoint.checkpoint_sequential`
over the same modules the `checkpoint` policy cuts (`policies.checkpoint.modules`: each layer of a
chain, each block of a ResNet) in each of --segments, and under `save_on_cpu(pin_memory=True)`; then
the engine runs `device` and, at --share of the footprint, `checkpoint` in each of --segments with and
without belady's trips beside it, through swap, planned with the H200 samples' calibrated cost model
where the checkout has it. Per configuration: the median iteration and the device memory it took all
in: cudaMemGetInfo's free bytes before less the least seen while it ran (for PyTorch after a
throwaway step, so its context, handles and kernels are not counted; for the engine beyond its
context, `DeviceMemory.taken_bytes`), and torch.cuda.max_memory_allocated beside it. The figures are
medians over processes, one process after another. cuDNN's workspace is capped for PyTorch and the
engine alike by CUDNN_CONV_WSCAP_DBG (MiB; default 256, as issue 34's table), so that PyTorch's
workspaces do not decide its memory. Writes bench_recompute.txt and .json to --out.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.gpu.bench_save_on_cpu import summarise

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
GiB = 1 << 30
WORKSPACE_CAP_MIB = "256"


def torch_step(graph: Any, segments: int) -> Callable[[], None]:
    """One training step of `graph` in PyTorch eager; `segments` > 1: its forward checkpointed in that many
    segments over the checkpoint policy's modules, each module one function from its input to its output."""
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint_sequential

    from bench.gpu.bench_speed import torch_setup, torch_training
    from tests.gpu.reference import apply_op
    from vmexplorer.graph import Phase
    from vmexplorer.policies.checkpoint import modules, passed_on

    if segments <= 1:
        return torch_setup(graph)
    values, opt = torch_training(graph)
    mods = modules(graph)
    forward = [k for k, op in enumerate(graph.ops) if op.phase is Phase.FORWARD]
    outs = [next(iter(passed_on(graph, forward[:forward.index(m[-1]) + 1], m[-1] + 1))) for m in mods[:-1]]
    outs.append(graph.ops[mods[-1][-1]].writes[0])  # the logits
    ins = [graph.tensor_id("input.images"), *outs[:-1]]

    def function(ops: list[int], into: int, out: int) -> Any:
        def run(x: Any) -> Any:
            local = {into: x}
            for k in ops:
                op = graph.ops[k]
                local[op.writes[0]] = apply_op(graph, op, [local[t] if t in local else values[t] for t in op.reads])
            return local[out]

        class Module(torch.nn.Module):  # what checkpoint_sequential takes
            def forward(self, x: Any) -> Any:
                return run(x)

        return Module()

    functions = torch.nn.Sequential(*[function(m, i, o) for m, i, o in zip(mods, ins, outs)])
    loss_op = next(op for op in graph.ops if op.phase is Phase.LOSS)

    def step() -> None:
        logits = checkpoint_sequential(functions, segments, values[ins[0]], use_reentrant=False)
        loss = F.cross_entropy(logits, values[loss_op.reads[1]].long())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def torch_config(graph: Any, config: str, iterations: int, warmup: int = 2) -> dict[str, Any]:
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    torch.cuda.reset_peak_memory_stats()
    offload = config == "save_on_cpu"
    step = torch_step(graph, int(config.split()[1]) if config.startswith("checkpoint") else 1)
    times, least_free = [], free_before
    for i in range(warmup + iterations):
        torch.cuda.synchronize()
        t = time.perf_counter()
        if offload:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                step()
        else:
            step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t) * 1e3)
        least_free = min(least_free, torch.cuda.mem_get_info()[0])
    row = {"config": f"pytorch {config}", "iteration_ms": statistics.median(times),
           "max_allocated_bytes": torch.cuda.max_memory_allocated(), "taken_bytes": free_before - least_free}
    del step
    gc.collect()
    torch.cuda.empty_cache()
    return row


def engine_config(graph: Any, policy: str, options: dict[str, Any], share: float, mechanism: str,
                  iterations: int) -> dict[str, Any]:
    from vmexplorer.config import Config, Mechanism
    from vmexplorer.engine.executor import RunSettings, execute
    from vmexplorer.records import summarize
    from vmexplorer.session.planned import plan_for

    capacity = graph.footprint if policy == "device" else max(int(graph.footprint * share), graph.min_capacity[0])
    config = Config(graph.model, graph.batch, graph.image_size, capacity, policy, options, Mechanism(mechanism),
                    graph.workspaces)
    planned = plan_for(config, _cost_model(graph), graph=graph)
    result = execute(graph, planned.plan, RunSettings(iterations=iterations, warmup=2, collect=False))
    taken = result.device_memory
    label = " ".join(f"{k}={v}" for k, v in options.items())
    return {"config": f"engine {policy}" + ("" if policy == "device" else f" {label} {mechanism} {share:.0%}"),
            "iteration_ms": float(summarize(graph, planned.plan, result.timeline)["iteration_ns"]) / 1e6,
            "capacity_bytes": capacity, "taken_bytes": taken.taken_bytes if taken else -1,
            "recomputes": len(planned.plan.recomputes)}


def _cost_model(graph: Any) -> Any:
    """The H200 samples' calibrated model of this graph, where the checkout has one; else the default."""
    from vmexplorer.session import load_session
    from vmexplorer.simulator import H100_DEFAULT

    for path in sorted((REPO / "sample_sessions").glob(f"h200-{graph.model}-b{graph.batch}-*-swap-50pct.measured.vms")):
        session = load_session(path)
        if session.cost_model is not None:
            return session.cost_model
    return H100_DEFAULT


def worker(args: argparse.Namespace, index: int) -> list[dict[str, Any]]:
    from vmexplorer.graph import build_graph

    segments = [int(s) for s in args.segments.split(",")]
    rows = []
    for case in args.cases.split(","):
        model, batch = case.split(":")
        graph = build_graph(model, int(batch))
        torch_config(graph, "plain", iterations=1, warmup=0)  # the kernels load lazily, on first use
        configs = ["plain", *(f"checkpoint {k}" for k in segments), "save_on_cpu"]
        for config in configs if index % 2 == 0 else configs[::-1]:
            rows.append({"model": model, "batch": int(batch), **torch_config(graph, config, args.iterations)})
        engine: list[tuple[str, dict[str, Any], str]] = [("device", {}, "uvm")]
        engine += [("checkpoint", {"segments": int(k), "then": then}, "swap")
                   for k in args.engine_segments.split(",") for then in ("none", "belady")]
        for policy, options, mechanism in engine:
            rows.append({"model": model, "batch": int(batch),
                         **engine_config(graph, policy, options, args.share, mechanism, args.iterations)})
    return rows


def report(rows: list[dict[str, Any]], env: dict[str, str], args: argparse.Namespace, processes: int) -> str:
    lines = [f"bench_recompute: the engine's checkpoint plans beside PyTorch's checkpoint_sequential; "
             f"{args.iterations} timed iterations per process, medians over {processes} processes; "
             f"cuDNN workspaces capped at {os.environ.get('CUDNN_CONV_WSCAP_DBG', WORKSPACE_CAP_MIB)} MiB",
             "environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), "",
             f"{'model':14s} {'configuration':52s} {'iteration':>10s} {'taken, all in':>14s} {'per process (ms)'}"]
    for r in rows:
        per = " ".join(f"{x:.1f}" for x in r["iteration_ms_per_process"])
        lines.append(f"{r['model'] + ' b' + str(r['batch']):14s} {r['config']:52s} {r['iteration_ms']:7.1f} ms "
                     f"{r['taken_bytes'] / GiB:10.2f} GiB {per}")
    return "\n".join(lines) + "\n"


def environment() -> dict[str, str]:
    import torch

    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cudnn": str(torch.backends.cudnn.version()),
            "device_memory_GiB": f"{torch.cuda.mem_get_info()[1] / GiB:.1f}"}


def _write(runs: list[list[dict[str, Any]]], args: argparse.Namespace) -> str:
    rows = summarise(runs)
    env = environment()
    text = report(rows, env, args, len(runs))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_recompute.txt").write_text(text)
    (out / "bench_recompute.json").write_text(json.dumps({"environment": env, "iterations": args.iterations,
                                                          "processes": len(runs), "rows": rows}, indent=1))
    return text


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="vgg19:64,resnet50:64,alexnet:256")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--share", type=float, default=0.5, help="the engine's capacity, of the footprint")
    ap.add_argument("--segments", default="2,4,8", help="PyTorch's checkpoint_sequential segments")
    ap.add_argument("--engine-segments", default="2,4,8", help="the checkpoint policy's segments")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "bench" / "results" / "h200"))
    ap.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker >= 0:
        print(json.dumps(worker(args, args.worker)))
        return 0
    env_vars = {**os.environ, "CUDNN_CONV_WSCAP_DBG": os.environ.get("CUDNN_CONV_WSCAP_DBG", WORKSPACE_CAP_MIB)}
    runs: list[list[dict[str, Any]]] = []
    for p in range(args.processes):
        cmd = [sys.executable, "-m", "bench.gpu.bench_recompute", "--worker", str(p), "--cases", args.cases,
               "--iterations", str(args.iterations), "--share", str(args.share), "--segments", args.segments,
               "--engine-segments", args.engine_segments]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO, env=env_vars)
        if done.returncode != 0:
            raise RuntimeError(f"process {p} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {p + 1}/{args.processes}: " + ", ".join(
            f"{r['model']} {r['config']} {r['iteration_ms']:.1f} ms" for r in runs[-1]), flush=True)
        _write(runs, args)  # after each process: a run cut short keeps what it measured
    print(_write(runs, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
