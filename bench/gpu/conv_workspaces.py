"""Every cuDNN plan of every convolution of a model, with the workspace it needs and its time.

    python3 -m bench.gpu.conv_workspaces --out DIR [--models vgg19:64,resnet50:64,alexnet:256] [--plans]

For each distinct convolution problem of the model's training iteration (fprop of each conv2d op; dgrad
and wgrad of each backward), every plan cuDNN's frontend can build (TF32 allowed, nondeterministic allowed:
the run's defaults) is timed on fresh buffers, with the plan cuDNN's heuristics choose (the engine's
default). Beside each problem: the ops it stands for, the bytes of the largest tensor each touches, and the
bytes live during it against the graph's footprint, so that any workspace limit's cost can be read off
(DIR/conv_plans.json) without the GPU. Printed per model: the convolutions' time per iteration with the
heuristics' plans, the fastest plans, and the fastest within some limits (with --plans).

And what the workspace limit costs a whole iteration: the engine's `device` run (everything resident,
so the workspaces are the only difference) of the graph without workspaces (cuDNN's own choice, its
scratch from CuPy's pool outside any capacity: how every run was made before schema 11), with full
workspaces (as large as each op's tensors: `device` at the footprint), and with the workspaces a plan at
50% of the footprint has (`Graph.fitted`), each the median of its iterations, side by side in one
process, with the scratch CuPy's pool held after each (DIR/workspace_cost.json). Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

MiB = 2**20


def problems(graph) -> dict[tuple, dict]:
    """(which, x, w, y, stride, pad) -> {ops, largest operand and live bytes per op}."""
    out: dict[tuple, dict] = {}
    for i, op in enumerate(graph.ops):
        if op.kind not in ("conv2d", "conv2d_backward"):
            continue
        a = dict(op.attrs)
        stride, pad = int(a["stride"]), int(a["padding"])
        shape = lambda t: graph.tensors[t].shape  # noqa: E731
        if op.kind == "conv2d":
            x, w, y = shape(op.reads[0]), shape(op.reads[1]), shape(op.writes[0])
            whiches = ["fprop"]
        else:
            x, w, y = shape(op.reads[0]), shape(op.reads[1]), shape(op.reads[2])
            whiches = (["dgrad"] if a["input_grad"] else []) + ["wgrad"]
        largest = max(graph.tensors[t].nbytes for t in op.touches)
        for which in whiches:
            entry = out.setdefault((which, x, w, y, stride, pad), {"ops": [], "largest_bytes": [], "live_bytes": []})
            entry["ops"].append(i)
            entry["largest_bytes"].append(largest)
            entry["live_bytes"].append(graph.live_bytes[i])
    return out


def best_within(table: list[dict], limit: float) -> float:
    ran = [p["ms"] for p in table if p["ms"] == p["ms"] and p["workspace_bytes"] <= limit]
    return min(ran) if ran else float("nan")


def iteration_ms(graph, iterations: int) -> tuple[float, int]:
    """(median iteration in ms, bytes CuPy's pool held after the run) of the `device` plan of `graph`."""
    import numpy as np

    from vmexplorer.engine.executor import RunSettings, execute
    from vmexplorer.policies import compile_plan

    plan = compile_plan(graph, graph.footprint, "device")
    result = execute(graph, plan, RunSettings(iterations=iterations, warmup=2, collect=False))
    tl = result.timeline
    began = tl.op_start_ns - tl.op_stall_ns
    lengths = [tl.op_end_ns[tl.op_iteration == i].max() - began[tl.op_iteration == i].min()
               for i in np.unique(tl.op_iteration)]
    assert result.device_memory is not None  # a run on the GPU reads it
    return float(np.median(lengths)) / 1e6, result.device_memory.scratch_bytes


def workspace_cost(models: str, iterations: int) -> list[dict]:
    import dataclasses

    from vmexplorer.graph import build_graph

    rows = []
    for spec in models.split(","):
        name, batch = spec.split(":")
        full = build_graph(name, int(batch))
        half = dataclasses.replace(full.fitted(full.footprint // 2), capacity=None, full=None)
        variants = (("outside (cuDNN's own choice)", build_graph(name, int(batch), workspaces=False)),
                    ("full (device at the footprint)", full.fitted(full.footprint)),
                    ("fitted to 50% of the footprint", half))
        row: dict[str, Any] = {"model": name, "batch": int(batch), "footprint_bytes": full.footprint,
                               "footprint_without_workspaces_bytes": variants[0][1].footprint}
        line = f"{name} b{batch} device:"
        for label, graph in variants:
            ms, scratch = iteration_ms(graph, iterations)
            row[label] = {"iteration_ms": ms, "scratch_bytes": scratch,
                          "largest_workspace_bytes": max(graph.workspace_bytes or (0,)),
                          "peak_bytes": max(graph.live_bytes)}
            line += f" workspaces {label} {ms:.2f} ms (CuPy's pool after it {scratch / MiB:.0f} MiB);"
        base = row[variants[0][0]]["iteration_ms"]
        line += " cost " + ", ".join(f"x{row[label]['iteration_ms'] / base:.3f}" for label, _ in variants[1:])
        print(line, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default="vgg19:64,resnet50:64,alexnet:256")
    ap.add_argument("--plans", action="store_true", help="also time every cuDNN plan of every convolution")
    ap.add_argument("--iterations", type=int, default=10)
    args = ap.parse_args()
    import cupy

    args.out.mkdir(parents=True, exist_ok=True)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    cost = workspace_cost(args.models, args.iterations)
    (args.out / "workspace_cost.json").write_text(json.dumps({"device": device, "models": cost}))
    if args.plans:
        plans(args)


def plans(args: argparse.Namespace) -> None:
    import cupy

    from vmexplorer.graph import build_graph
    from vmexplorer.graph.ops.conv2d import plan_table

    doc = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "models": []}
    for spec in args.models.split(","):
        name, batch = spec.split(":")
        graph = build_graph(name, int(batch))
        rows = []
        t0 = time.perf_counter()
        for (which, x, w, y, stride, pad), where in problems(build_graph(name, int(batch), workspaces=False)).items():
            heuristic, table = plan_table(which, x, w, y, stride, pad)
            rows.append({"which": which, "x": x, "w": w, "y": y, "stride": stride, "padding": pad, **where,
                         "heuristic": heuristic.__dict__, "plans": [p.__dict__ for p in table]})
            cupy.get_default_memory_pool().free_all_blocks()
        doc["models"].append({"model": name, "batch": int(batch), "footprint_bytes": graph.footprint,
                              "problems": rows})
        n = lambda r: len(r["ops"])  # noqa: E731
        heur = sum(r["heuristic"]["ms"] * n(r) for r in rows)
        line = f"{name} b{batch}: {len(rows)} problems ({time.perf_counter() - t0:.0f} s); per iteration: heuristics " \
               f"{heur:.2f} ms (workspace up to {max(r['heuristic']['workspace_bytes'] for r in rows) / MiB:.0f} MiB)"
        for label, limit in (("fastest", float("inf")), ("within 1 GiB", 2**30), ("within 256 MiB", 256 * MiB),
                             ("within 64 MiB", 64 * MiB), ("within 0", 0)):
            ms = sum(best_within(r["plans"], limit) * n(r) for r in rows)
            line += f"; {label} {ms:.2f} ms"
        largest = sum(best_within(r["plans"], b) for r in rows for b in r["largest_bytes"])
        line += f"; within each op's largest tensor {largest:.2f} ms"
        print(line, flush=True)
    (args.out / "conv_plans.json").write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
