"""Paging on a real GPU: `device`, `uvm` and `autovm` at a share of the footprint, side by side in one run.

    python3 -m bench.gpu.bench_paging [--cases vgg19:64,resnet50:64] [--share 0.5] [--iterations 3]

Prints measured iteration times (median over recorded iterations), the ratios uvm/autovm and
autovm/device, the simulator's uncalibrated prediction beside each, and saves every session to $OUT
(or ./bench/results/sessions) so the timelines can be opened.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from vmexplorer.engine.executor import RunSettings, execute
from vmexplorer.graph import build_graph
from vmexplorer.policies import compile_plan
from vmexplorer.records import summarize
from vmexplorer.session import new_session, save_session
from vmexplorer.simulator import simulate

POLICIES = [("device", {}), ("uvm", {}), ("autovm", {}), ("autovm", {"tensors": "all"})]


def fault_time(device, paged) -> tuple[float, int]:
    """Extra ns per iteration that ops taking planned demand faults spend over the same ops under
    `device`, and the bytes they fault in: the migration timing that shows the faults are real."""
    import numpy as np

    def per_op(session):
        tl = session.timeline
        out = np.zeros(len(session.graph.ops))
        np.add.at(out, tl.op_index, (tl.op_end_ns - tl.op_start_ns) / max(tl.iterations, 1))
        return out

    faulting = np.zeros(len(paged.graph.ops), dtype=bool)
    nbytes = 0
    for m in paged.plan.memops:
        if m.mode.value == "fault":
            faulting[m.complete_before] = True
            nbytes += m.nbytes
    extra = float((per_op(paged) - per_op(device))[faulting].sum())
    return extra, nbytes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="vgg19:64,resnet50:64")
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--policies", default="")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or "bench/results/sessions")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in args.cases.split(","):
        model, batch = case.split(":")
        graph = build_graph(model, int(batch))
        times, sessions = {}, {}
        for policy, options in POLICIES:
            name = policy + "".join(f"-{v}" for v in options.values())
            if args.policies and name not in args.policies.split(","):
                continue
            capacity = graph.footprint if policy == "device" else int(graph.footprint * args.share)
            plan = compile_plan(graph, capacity, policy, options)
            t = time.perf_counter()
            result = execute(graph, plan, RunSettings(iterations=args.iterations, warmup=1))
            wall = time.perf_counter() - t
            session = new_session(graph, plan, result.timeline, environment=result.environment,
                                  notes=(f"bench_paging, losses {result.losses}",))
            share = "" if policy == "device" else f"-{int(args.share * 100)}pct"
            save_session(session, out / f"{model}-b{batch}-{name}{share}.measured.vms", force=True)
            sessions[name] = session
            measured = float(summarize(graph, plan, result.timeline)["iteration_ns"]) / 1e6
            predicted = float(summarize(graph, plan, simulate(graph, plan))["iteration_ns"]) / 1e6
            times[name] = measured
            rows.append({"model": model, "batch": int(batch), "policy": name, "measured_ms": measured,
                         "simulated_ms": predicted, "wall_s": wall})
            print(f"{model} b{batch} {name:>12} at {args.share:.0%}: measured {measured:8.1f} ms, "
                  f"simulated {predicted:8.1f} ms ({wall:.1f} s wall)", flush=True)
        if "device" in sessions:
            for name, session in sessions.items():
                extra, faulted = fault_time(sessions["device"], session)
                if faulted:
                    print(f"{model} b{batch} {name:>12}: ops that take demand faults run {extra / 1e6:.1f} ms longer "
                          f"than under device for {faulted / 2**30:.2f} GiB faulted in: "
                          f"{faulted / max(extra, 1):.2f} GB/s effective", flush=True)
        if {"uvm", "autovm", "device"} <= times.keys():
            print(f"{model} b{batch}: uvm/autovm {times['uvm'] / times['autovm']:.2f}x, "
                  f"autovm/device {times['autovm'] / times['device']:.2f}x", flush=True)
    (out / "bench_paging.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
