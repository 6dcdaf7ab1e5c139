"""The memory a run takes, all in, beside its capacity; and what holding swap plans to the capacity costs.

    python3 -m bench.gpu.honest_memory --out DIR [--models vgg19:64,resnet50:64,alexnet:256]
    python3 -m bench.gpu.honest_memory --simulate     # no GPU

For each model: fresh `vmexplorer run`s, each in its own process as the samples are, of `device` (at the
footprint), `belady` through uvm at 50%, and `belady` and `tuned` through swap at 50%, each searched and
judged with the cost model of the model's recorded H200 `tuned` swap sample at 50%
(`sample_sessions/h200-<model>-b<batch>-tuned-swap-50pct.measured.vms`). Printed per run: the measured
iteration against its bound, the capacity and the room the plan was made with, and what the run took of
the GPU's memory (`records.device_memory`: cudaMemGetInfo before it and its least during it, the CUDA
context and library handles measured apart, the pool, CuPy's scratch, the ledger's peak). Beside each
swap run, the sample recorded before plans were held to their pool (schema 9): the cost of honesty,
measured on the same GPU (UVM timings move between lease machines; pinned copies do not). Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_sessions"
RUNS = (("device", "uvm", "100%"), ("belady", "uvm", "50%"), ("belady", "swap", "50%"), ("tuned", "swap", "50%"))
MiB = 2**20


def cli(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "vmexplorer", *args, "--format", "json"], capture_output=True,
                         text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"vmexplorer {' '.join(args)}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def row(name: str, info: dict, before: dict | None) -> str:
    s, b, m = info["summary"], info["bound"], info["device_memory"]
    it = s["iteration_ns"] / 1e6
    cap = info["config"]["capacity_bytes"]
    text = f"{name:24s} iteration {it:8.2f} ms; "
    text += f"bound {b['lower_bound_ns'] / 1e6:8.2f} ms (x{it * 1e6 / b['lower_bound_ns']:.3f})" if b else "bound none"
    text += f"; capacity {cap / MiB:8.1f} MiB, planned with {info['room_bytes'] / MiB:8.1f} MiB"
    if m is not None:
        held = m["ledger_peak_bytes"] if m["managed"] else m["taken_bytes"]
        text += (f"; took {held / MiB:8.1f} MiB ({'ledger peak, managed' if m['managed'] else 'beyond the context'};"
                 f" over the capacity by {m['over_capacity_bytes'] / MiB:.1f} MiB); context "
                 f"{(m['context_bytes'] or 0) / MiB:.1f} MiB; pool {m['pool_bytes'] / MiB:.1f} MiB; scratch "
                 f"{m['scratch_bytes'] / MiB:.1f} MiB; ledger peak {m['ledger_peak_bytes'] / MiB:.1f} MiB")
    if before is not None:
        was = before["summary"]["iteration_ns"] / 1e6
        text += f"; recorded before (pool over the capacity): {was:.2f} ms, now x{it / was:.3f}"
    return text


def simulated(models: str) -> None:
    """GPU-free: each recorded H200 swap sample at 50% (its plan made before plans were held to their pool)
    beside the plan made now for the same configuration, both simulated under the sample's cost model."""
    from vmexplorer.plan.pool import kept_tensors, plan_pool
    from vmexplorer.session import load_session
    from vmexplorer.session.planned import plan_for
    from vmexplorer.simulator import simulate
    from vmexplorer.simulator.bound import lower_bound

    for spec in models.split(","):
        model, batch = spec.split(":")
        for policy in ("autovm", "belady", "vdnn", "tuned"):
            path = SAMPLES / f"h200-{model}-b{batch}-{policy}-swap-50pct.measured.vms"
            if not path.exists():
                continue
            s = load_session(path)
            g, cost, capacity = s.graph, s.cost_model, s.plan.capacity
            assert cost is not None, f"{path.name} carries no cost model (bench/calibrate_samples.py stores one)"
            now = plan_for(s.plan.config, cost, graph=g).plan
            kept = kept_tensors(g, keep_weights=False)
            was_ms, now_ms = (float(simulate(g, p, cost).iteration_ns().max()) / 1e6 for p in (s.plan, now))
            was_pool, now_pool = (plan_pool(g, p, kept).total for p in (s.plan, now))
            bound = lower_bound(g, capacity, cost, now.mechanism).lower_bound_ns / 1e6
            measured = float(s.summary["iteration_ns"]) / 1e6
            print(f"{model}-b{batch} {policy:6s} swap 50%: capacity {capacity / MiB:7.1f} MiB; recorded plan: pool "
                  f"{was_pool / MiB:7.1f} MiB ({was_pool / capacity - 1:+.1%}), simulated {was_ms:7.2f} ms "
                  f"(measured {measured:7.2f} ms); plan now: room {now.planned_with / MiB:7.1f} "
                  f"MiB ({now.planned_with / capacity:.1%}), pool {now_pool / MiB:7.1f} MiB "
                  f"({now_pool / capacity - 1:+.1%}), "
                  f"simulated {now_ms:7.2f} ms (x{now_ms / was_ms:.3f}); bound {bound:.2f} ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--models", default="vgg19:64,resnet50:64,alexnet:256")
    ap.add_argument("--iterations", default="5")
    ap.add_argument("--simulate", action="store_true", help="no GPU: the recorded swap samples' plans against "
                    "today's, simulated under their own cost models")
    args = ap.parse_args()
    if args.simulate:
        return simulated(args.models)
    if args.out is None:
        ap.error("--out is needed for runs on the GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in args.models.split(","):
        model, batch = spec.split(":")
        sample = SAMPLES / f"h200-{model}-b{batch}-tuned-swap-50pct.measured.vms"
        for policy, mechanism, capacity in RUNS:
            name = f"{model}-b{batch}-{policy}-{mechanism}-{capacity.rstrip('%')}pct"
            path = args.out / f"{name}.vms"
            try:
                cli("run", "--model", model, "--batch", batch, "--capacity", capacity, "--policy", policy,
                    "--mechanism", mechanism, "--cost-model", str(sample), "--iterations", args.iterations,
                    "--out", str(path), "--force")
            except RuntimeError as e:
                print(f"{name:24s} failed: {e}", flush=True)
                continue
            old = SAMPLES / f"h200-{model}-b{batch}-{policy}-{'swap-' if mechanism == 'swap' else ''}50pct.measured.vms"
            before = cli("info", str(old)) if mechanism == "swap" and old.exists() else None
            print(row(name, cli("info", str(path)), before), flush=True)


if __name__ == "__main__":
    main()
