"""The `device` run in its footprint, and what discarding dead pages costs or saves the paging policies.

    python3 -m bench.bench_device_pool memory [--cases alexnet:256,vgg19:64,resnet50:64]
    python3 -m bench.bench_device_pool paging [--case vgg19:64] [--share 0.5] [--policies uvm,autovm]
                                              [--processes 3] [--iterations 4]

memory: per case, `device` runs twice in one process (the first loads cuDNN's plans and CuPy's kernels,
which stay for the process) and the second run's reading is printed: the graph's footprint, the sum of
every tensor (what the engine allocated before tensors shared a pool placed by lifetime), the pool, CuPy's
cached scratch (convolution workspaces), and what cudaMemGetInfo says the run took (free bytes before
the pool was allocated, less those after its last iteration).

paging: each policy with dead pages discarded (the default) and left on the device until reused, each
configuration in its own process, `--processes` rounds, interleaved; the median over processes of each
process's median iteration (collectors off).

Writes bench_device_pool_<mode>.txt and .json to $OUT (on the device tool) or bench/results/h200.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from vmexplorer.graph import build_graph
from vmexplorer.units import format_bytes

ROOT = Path(__file__).resolve().parents[1]


def memory(cases: str) -> tuple[list[str], list[dict]]:
    from vmexplorer.engine.executor import RunSettings, execute
    from vmexplorer.policies import compile_plan
    from vmexplorer.records import summarize

    lines, rows = [], []
    for case in cases.split(","):
        model, batch = case.split(":")
        graph = build_graph(model, int(batch))
        plan = compile_plan(graph, graph.footprint, "device")
        settings = RunSettings(iterations=3, warmup=1, collect=False)
        execute(graph, plan, settings)
        result = execute(graph, plan, settings)
        m = result.memory
        assert m is not None
        row = {"model": model, "batch": int(batch), "footprint_bytes": graph.footprint,
               "all_tensors_bytes": sum(t.nbytes for t in graph.tensors), **vars(m),
               "iteration_ms": float(summarize(graph, plan, result.timeline)["iteration_ns"]) / 1e6}
        row["taken_less_footprint_and_workspace_bytes"] = m.device_bytes_taken - m.footprint_bytes - m.workspace_bytes
        rows.append(row)
        lines.append(f"{model} b{batch} device: footprint {format_bytes(graph.footprint)}, all tensors "
                     f"{format_bytes(row['all_tensors_bytes'])}, pool {format_bytes(m.pool_bytes)} "
                     f"(+{m.pool_bytes - graph.footprint} B), workspace {format_bytes(m.workspace_bytes)}, "
                     f"cudaMemGetInfo took {format_bytes(m.device_bytes_taken)} = footprint + workspace "
                     f"{row['taken_less_footprint_and_workspace_bytes'] / 2**20:+.1f} MiB; "
                     f"iteration {row['iteration_ms']:.1f} ms")
        print(lines[-1], flush=True)
    return lines, rows


def one(model: str, batch: int, policy: str, share: float, discard: bool, iterations: int) -> dict:
    from vmexplorer.engine.executor import RunSettings, execute
    from vmexplorer.policies import compile_plan
    from vmexplorer.records import summarize

    graph = build_graph(model, batch)
    plan = compile_plan(graph, int(graph.footprint * share), policy)
    result = execute(graph, plan, RunSettings(iterations=iterations, warmup=1, collect=False, discard=discard))
    m = result.memory
    assert m is not None
    return {"iteration_ms": float(summarize(graph, plan, result.timeline)["iteration_ns"]) / 1e6,
            "dead_data": result.environment.get("dead_data", ""), "discarded_bytes": m.discarded_bytes,
            "ledger_peak_bytes": m.ledger_peak_bytes, "capacity_bytes": plan.capacity, "pool_bytes": m.pool_bytes}


def paging(case: str, share: float, policies: str, processes: int, iterations: int) -> tuple[list[str], list[dict]]:
    model, batch = case.split(":")
    runs: dict[tuple[str, bool], list[dict]] = {}
    for round_ in range(processes):
        for policy in policies.split(","):
            for discard in (True, False):
                out = subprocess.run([sys.executable, "-m", "bench.bench_device_pool", "one", model, batch, policy,
                                      str(share), str(int(discard)), str(iterations)], capture_output=True, text=True,
                                     cwd=ROOT)
                if out.returncode:
                    print(out.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(f"{policy} discard={discard} failed")
                row = json.loads(out.stdout.strip().splitlines()[-1])
                runs.setdefault((policy, discard), []).append(row)
                print(f"round {round_} {policy} discard={discard}: {row['iteration_ms']:.1f} ms", flush=True)
    lines, rows = [], []
    for (policy, discard), got in runs.items():
        times = [r["iteration_ms"] for r in got]
        rows.append({"model": model, "batch": int(batch), "share": share, "policy": policy, "discard": discard,
                     "median_ms": statistics.median(times), "per_process_ms": times, **got[0]})
        lines.append(f"{model} b{batch} {policy} at {share:.0%}, dead pages {'discarded' if discard else 'kept'}: "
                     f"median {statistics.median(times):.1f} ms over {len(times)} processes "
                     f"({', '.join(f'{t:.1f}' for t in times)}); discarded {format_bytes(got[0]['discarded_bytes'])}"
                     f"/iteration, ledger peak {format_bytes(got[0]['ledger_peak_bytes'])} against capacity "
                     f"{format_bytes(got[0]['capacity_bytes'])}")
        print(lines[-1], flush=True)
    return lines, rows


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        model, batch, policy, share, discard, iterations = sys.argv[2:8]
        print(json.dumps(one(model, int(batch), policy, float(share), discard == "1", int(iterations))))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["memory", "paging"])
    ap.add_argument("--cases", default="alexnet:256,vgg19:64,resnet50:64")
    ap.add_argument("--case", default="vgg19:64")
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--policies", default="uvm,autovm")
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=4)
    args = ap.parse_args()
    from vmexplorer.engine import gpu

    lines, rows = (memory(args.cases) if args.mode == "memory" else
                   paging(args.case, args.share, args.policies, args.processes, args.iterations))
    env = gpu.environment()
    header = (f"# bench_device_pool {args.mode} on {env.get('gpu')}, driver {env.get('cuda_driver')}, "
              f"cupy {env.get('cupy')}")
    out = Path(os.environ.get("OUT") or ROOT / "bench" / "results" / "h200")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"bench_device_pool_{args.mode}.txt").write_text("\n".join([header, *lines]) + "\n")
    (out / f"bench_device_pool_{args.mode}.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
