"""Time schedules through the swap mechanism with `vmexplorer run --mechanism swap`, each run in a process of
its own, and hold each against its bound (`vmexplorer plan --mechanism swap`'s JSON `bound`).

    python3 -m bench.gpu.bench_swap [--model vgg19] [--batch 64] [--capacity 50%] [--policies autovm,belady,tuned]
                                    [--rounds 1] [--cost-model FILE] [--out DIR]

`tuned` searches with `--cost-model` (default: the H200's VGG-19 b64 uvm sample, whose calibrated model holds
that GPU's op times; its swap copy rates are the default's until swap sessions are calibrated), and every
bound is worked out with the same model. Per run: the iteration's median over its timed iterations, the
pool (bytes, and how far over the capacity), what cudaMemGetInfo says the run took, and median / bound.
Rows go to stdout as JSON lines and to DIR/bench_swap.json (DIR: $OUT, else the current folder).

    python3 -m bench.gpu.bench_swap --placements

needs no GPU: for every configuration the H200 samples cover (AlexNet b256 and ResNet-50 b64 at 50%, VGG-19 b64
at 50, 60, 75 and 90%) and every policy that runs through swap (tuned searching with the same cost model),
the pool `plan.pool.plan_pool` places, against the capacity: how often, and by how much, its greedy
placement needs more than the capacity.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
H200_MODEL = ROOT / "sample_sessions" / "h200-vgg19-b64-uvm-50pct.measured.vms"


def vmexplorer(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "vmexplorer", *args, "--format", "json"], capture_output=True,
                          text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or ["(no message)"])[-1])
    return json.loads(done.stdout)


def one(args: argparse.Namespace, policy: str, out: Path, round_: int) -> dict:
    config = ["--model", args.model, "--batch", str(args.batch), "--capacity", args.capacity, "--policy", policy,
              "--mechanism", "swap", "--cost-model", str(args.cost_model)]
    bound = vmexplorer("plan", *config)["bound"]
    path = out / f"{args.model}-b{args.batch}-{policy}-swap-r{round_}.measured.vms"
    t = time.monotonic()
    run = vmexplorer("run", *config, "--iterations", "5", "--warmup", "1", "--out", str(path), "--force")
    wall = time.monotonic() - t
    env = vmexplorer("info", str(path))["environment"]
    path.unlink()
    median = run["summary"]["iteration_ns"]
    return {"policy": policy, "round": round_, "iteration_ms": round(median / 1e6, 2),
            "bound_ms": round(bound["lower_bound_ns"] / 1e6, 2), "bound_set_by": bound["set_by"],
            "over_bound": round(median / bound["lower_bound_ns"], 3), "swap_pool": env.get("swap_pool"),
            "device_bytes_taken": env.get("swap_device_bytes_taken"), "gpu": env.get("gpu"),
            "wall_s": round(wall, 1)}


CONFIGS = (("alexnet", 256, (50,)), ("vgg19", 64, (50, 60, 75, 90)), ("resnet50", 64, (50,)))


def placements(cost_model: Path) -> list[dict]:
    """The pool of every recorded configuration's swap plan, against its capacity (no GPU)."""
    from vmexplorer.config import Config, Mechanism
    from vmexplorer.graph import build_graph
    from vmexplorer.plan.pool import kept_tensors, plan_pool
    from vmexplorer.session import load_session
    from vmexplorer.session.planned import plan_for

    cost = load_session(cost_model).cost_model
    assert cost is not None, f"{cost_model} carries no cost model"
    rows: list[dict[str, Any]] = []
    for model, batch, pcts in CONFIGS:
        graph = build_graph(model, batch)
        for pct in pcts:
            capacity = graph.footprint * pct // 100
            for policy in ("autovm", "belady", "vdnn", "tuned", "manual"):
                config = Config(model, batch, graph.image_size, capacity, policy, {}, Mechanism.SWAP)
                plan = plan_for(config, cost, graph=graph).plan
                t = time.monotonic()
                pool = plan_pool(graph, plan, kept_tensors(graph, False))
                rows.append({"config": f"{model} b{batch} {pct}%", "policy": policy, "capacity": capacity,
                             "plan_peak": plan.peak_resident, "pool": pool.total, "peak": pool.peak,
                             "over_capacity": pool.over_capacity,
                             "over_pct": round(100 * pool.over_capacity / capacity, 2),
                             "fragmentation": pool.fragmentation, "stays": len(pool.stays),
                             "place_s": round(time.monotonic() - t, 2)})
                print(json.dumps(rows[-1]), flush=True)
    over = [r["over_pct"] for r in rows]
    print(f"# {sum(o > 0 for o in over)} of {len(over)} pools need more than the capacity; by "
          f"{min(over):.1f}% to {max(over):.1f}% (median {sorted(over)[len(over) // 2]:.1f}%)")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vgg19")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--capacity", default="50%")
    ap.add_argument("--policies", default="autovm,belady,tuned")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--cost-model", type=Path, default=H200_MODEL)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--placements", action="store_true", help="only the pools of the recorded configurations (no GPU)")
    args = ap.parse_args()
    out = args.out or Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    if args.placements:
        (out / "swap_placements.json").write_text(json.dumps(placements(args.cost_model), indent=1))
        return 0
    rows = []
    for round_ in range(args.rounds):  # rounds interleaved, so a slow spell of the machine hits every policy
        for policy in args.policies.split(","):
            try:
                rows.append(one(args, policy, out, round_))
            except RuntimeError as e:
                rows.append({"policy": policy, "round": round_, "error": str(e)})
            print(json.dumps(rows[-1]), flush=True)
            (out / "bench_swap.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
