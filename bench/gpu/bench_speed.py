"""No paging: our engine (`device` policy) against PyTorch eager, same model, batch and precision.

    python3 -m bench.gpu.bench_speed [--cases vgg19:64,resnet50:64,alexnet:256] [--iterations 10]
        [--processes 3] [--engine new=. --engine old=.bench_before] [--autotune] [--out DIR]

Each `--engine NAME=ROOT` is a tree holding a `vmexplorer` package (the working tree, or HEAD exported
to a folder): every process imports one of them and times it beside PyTorch in that same process, and
the trees take turns, process after process, so a before/after comparison shares the card's state.
PyTorch runs the same forward ops through torch.nn.functional (tests/gpu/reference.py) with autograd
and torch.optim.SGD (momentum 0.9, its default foreach implementation), with PyTorch's default
numerics: TF32 for cuDNN convolutions, full fp32 for matmuls, as the engine's defaults (PyTorch with
TF32 matmuls too is timed beside, for reference: not the same precision). Each figure is
a median over the timed iterations of one process (engine: its GPU timeline, from the event recorded
as an iteration starts to its last kernel's end; PyTorch: a host clock around a synchronised step),
then the median over processes. Writes bench_speed.txt and .json to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
GOAL = 1.15


def torch_setup(graph: Any, matmul_tf32: bool = False, benchmark: bool = False) -> Callable[[], None]:
    """One training step of `graph` in PyTorch eager from the engine's starting values."""
    from tests.gpu.reference import forward_loss

    values, opt = torch_training(graph, matmul_tf32, benchmark)

    def step() -> None:
        loss = forward_loss(graph, dict(values))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def torch_training(graph: Any, matmul_tf32: bool = False, benchmark: bool = False) -> tuple[dict[int, Any], Any]:
    """The engine's starting values of `graph`'s persistent tensors on the GPU, by tensor, and SGD with
    momentum over its weights: what a step in PyTorch eager trains."""
    import torch

    from vmexplorer.engine.init import initial_value
    from vmexplorer.graph import Kind

    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    values, params = {}, []
    for t, tensor in enumerate(graph.tensors):
        v = initial_value(graph, t)
        if v is not None:
            values[t] = torch.from_numpy(v).cuda()
            if tensor.kind is Kind.WEIGHT:
                values[t].requires_grad_(True)
                params.append(values[t])
    return values, torch.optim.SGD(params, lr=0.01, momentum=0.9)


def torch_step_ms(graph: Any, iterations: int, warmup: int = 2, **kw: Any) -> float:
    import torch

    step = torch_setup(graph, **kw)
    times = []
    for i in range(warmup + iterations):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def engine_ms(graph: Any, iterations: int, autotune: bool = False) -> tuple[float, float]:
    """(median GPU iteration, host wall per iteration with warm-up and setup) in ms.

    An iteration runs from the event the executor records as it starts to its last op's end, computed
    here from the timeline's columns so that every engine tree is timed alike."""
    import numpy as np

    from vmexplorer.engine.executor import RunSettings, execute
    from vmexplorer.policies import compile_plan

    plan = compile_plan(graph, graph.footprint, "device")
    settings = RunSettings(iterations=iterations, warmup=2, autotune=autotune, collect=False)
    t = time.perf_counter()
    result = execute(graph, plan, settings)
    wall = (time.perf_counter() - t) * 1e3 / (iterations + 2)
    tl = result.timeline
    began = tl.op_start_ns - tl.op_stall_ns
    lengths = [tl.op_end_ns[tl.op_iteration == i].max() - began[tl.op_iteration == i].min()
               for i in np.unique(tl.op_iteration)]
    return float(np.median(lengths)) / 1e6, wall


def worker(root: str, cases: list[tuple[str, int]], iterations: int, autotune: bool) -> list[dict[str, Any]]:
    """One process: the engine from `root` and PyTorch, case by case."""
    # each --engine is another tree: its vmexplorer goes before this checkout's, before anything imports one
    sys.path.insert(0, str(Path(root).resolve()))
    from vmexplorer.graph import build_graph

    rows = []
    for model, batch in cases:
        graph = build_graph(model, batch)
        ours, wall = engine_ms(graph, iterations)
        theirs = torch_step_ms(graph, iterations)
        row = {"model": model, "batch": batch, "engine_ms": ours, "engine_wall_ms": wall, "pytorch_ms": theirs,
               "pytorch_tf32_matmul_ms": torch_step_ms(graph, iterations, matmul_tf32=True)}
        if autotune:
            row["engine_autotuned_ms"] = engine_ms(graph, iterations, autotune=True)[0]
            row["pytorch_benchmark_ms"] = torch_step_ms(graph, iterations, benchmark=True)
        rows.append(row)
    return rows


def run_process(root: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "bench.gpu.bench_speed", "--worker", "--root", root, "--cases", args.cases,
           "--iterations", str(args.iterations)] + (["--autotune"] if args.autotune else [])
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"worker for {root} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def environment() -> dict[str, str]:
    import torch

    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cudnn_torch": str(torch.backends.cudnn.version())}
    try:
        import cudnn

        env["cudnn_frontend"] = cudnn.__version__
        env["cudnn_frontend_backend"] = str(cudnn.backend_version())
    except Exception as e:  # reported, not fatal: the engine's worker would fail loudly anyway
        env["cudnn_frontend"] = f"unavailable: {e}"
    return env


def summarise(engines: dict[str, str], runs: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    rows = []
    for name in engines:
        mine = [r for n, rs in runs if n == name for r in rs]
        for model, batch in dict.fromkeys((r["model"], r["batch"]) for r in mine):
            same = [r for r in mine if (r["model"], r["batch"]) == (model, batch)]
            row: dict[str, Any] = {"engine": name, "root": engines[name], "model": model, "batch": batch,
                                   "processes": len(same)}
            for key in same[0]:
                if key.endswith("_ms"):
                    row[key] = statistics.median(r[key] for r in same)
                    row[key + "_per_process"] = [r[key] for r in same]
            row["ratio"] = statistics.median(r["engine_ms"] / r["pytorch_ms"] for r in same)
            row["ratio_per_process"] = [r["engine_ms"] / r["pytorch_ms"] for r in same]
            if "engine_autotuned_ms" in row:
                row["ratio_autotuned"] = statistics.median(r["engine_autotuned_ms"] / r["pytorch_benchmark_ms"]
                                                           for r in same)
            rows.append(row)
    return rows


def report(rows: list[dict[str, Any]], env: dict[str, str], args: argparse.Namespace) -> str:
    lines = [f"bench_speed: engine (`device` policy, cuDNN heuristics) vs PyTorch eager (cudnn.benchmark off, "
             f"TF32 convolutions, fp32 matmuls), {args.iterations} timed iterations per process, "
             f"medians over processes; goal engine/PyTorch <= {GOAL}",
             "environment: " + ", ".join(f"{k} {v}" for k, v in env.items()),
             "engines: " + ", ".join(f"{n} = {r}" for n, r in args.engine_roots.items()), "",
             f"{'engine':8s} {'model':14s} {'procs':>5s} {'engine ms':>10s} {'PyTorch ms':>11s} {'ratio':>6s}  "
             f"{'ratio per process':24s} {'goal':6s} {'PyTorch, TF32 matmuls':>22s}"]
    for r in rows:
        per = " ".join(f"{x:.3f}" for x in r["ratio_per_process"])
        tf32 = r.get("pytorch_tf32_matmul_ms")
        lines.append(f"{r['engine']:8s} {r['model'] + ' b' + str(r['batch']):14s} {r['processes']:5d} "
                     f"{r['engine_ms']:10.2f} {r['pytorch_ms']:11.2f} {r['ratio']:6.3f}  {per:24s} "
                     f"{'met' if r['ratio'] <= GOAL else 'MISSED':6s} "
                     + (f"{tf32:9.2f} ms ({r['engine_ms'] / tf32:.3f}x)" if tf32 else ""))
    if any("ratio_autotuned" in r for r in rows):
        lines += ["", "autotuned (engine: every cuDNN plan timed; PyTorch: cudnn.benchmark):"]
        lines += [f"{r['engine']:8s} {r['model'] + ' b' + str(r['batch']):14s} {r['engine_autotuned_ms']:10.2f} "
                  f"{r['pytorch_benchmark_ms']:11.2f} {r['ratio_autotuned']:6.3f}"
                  for r in rows if "ratio_autotuned" in r]
    names = list(args.engine_roots)
    if len(names) == 2:
        lines += ["", f"{names[1]} -> {names[0]}, engine time:"]
        for a in (r for r in rows if r["engine"] == names[1]):
            same = (a["model"], a["batch"])
            b = next(r for r in rows if r["engine"] == names[0] and (r["model"], r["batch"]) == same)
            lines.append(f"  {a['model']} b{a['batch']}: {a['engine_ms']:.2f} -> {b['engine_ms']:.2f} ms "
                         f"({b['engine_ms'] / a['engine_ms'] - 1:+.1%}); ratio {a['ratio']:.3f} -> {b['ratio']:.3f}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="vgg19:64,resnet50:64,alexnet:256")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--engine", action="append", default=[], help="NAME=ROOT, a tree holding vmexplorer")
    ap.add_argument("--autotune", action="store_true", help="also time autotuned engine vs cudnn.benchmark")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "bench" / "results" / "h200"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", default=str(REPO), help=argparse.SUPPRESS)
    args = ap.parse_args()
    cases = [(m, int(b)) for m, b in (c.split(":") for c in args.cases.split(","))]
    if args.worker:
        print(json.dumps(worker(args.root, cases, args.iterations, args.autotune)))
        return 0
    args.engine_roots = dict(e.split("=", 1) for e in args.engine) or {"engine": str(REPO)}
    runs = []
    for p in range(args.processes):
        order = list(args.engine_roots.items())
        for name, root in order if p % 2 == 0 else order[::-1]:
            runs.append((name, run_process(root, args)))
            print(f"process {p + 1}/{args.processes} {name}: " + ", ".join(
                f"{r['model']} {r['engine_ms']:.2f}/{r['pytorch_ms']:.2f} ms" for r in runs[-1][1]), flush=True)
    rows = summarise(args.engine_roots, runs)
    text = report(rows, environment(), args)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_speed.txt").write_text(text)
    (out / "bench_speed.json").write_text(json.dumps({"environment": environment(), "engines": args.engine_roots,
                                                      "iterations": args.iterations, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
