"""The fastest swap plan whose pool holds at most a given number of bytes: the plan issue 17's second
goal asks about, where the pool is to hold at most half of save_on_cpu's peak.

    python bench/pool_within.py [--peaks bench/results/h200/bench_save_on_cpu.json]
        [--out bench/results/h200/pool_within_half.json]

The pool (`plan.pool.plan_pool`, what the engine allocates) outgrows the capacity a plan is made for by
its placement's fragmentation, so the capacity that gives a pool within a limit is found by trying: from
50% of the footprint down in steps of a whole percent, `belady`, `vdnn` and `autovm` through swap at each,
until some plan's pool fits, and `LOOK_FURTHER` steps more (a smaller capacity may still be faster, with a
plan that places better); where no whole percent fits down to the least capacity the graph runs in, the
percent above that least in twentieths. At every share some plan fitted, `tuned` too (its default search,
uncapped in time, so the same plan on any machine). Of all that fit, the fastest simulated under the cost
model (each model's measured H200 `belady` swap sample at 50%) wins. For issue 17's three models, the limit
half of save_on_cpu's peak in `--peaks`; the winners, with all that was tried, go to `--out`. No GPU:
everything here is the planner and the simulator; `bench/gpu/bench_save_on_cpu.py --within-half` runs the
winners beside save_on_cpu.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vmexplorer.config import Config, Mechanism  # noqa: E402
from vmexplorer.graph import Graph, build_graph  # noqa: E402
from vmexplorer.plan import Plan  # noqa: E402
from vmexplorer.plan.plan import PlanError  # noqa: E402
from vmexplorer.plan.pool import kept_tensors, plan_pool  # noqa: E402
from vmexplorer.session import load_session  # noqa: E402
from vmexplorer.session.planned import plan_for  # noqa: E402
from vmexplorer.simulator import CostModel, simulate  # noqa: E402
from vmexplorer.simulator.bound import lower_bound  # noqa: E402

QUICK = ("belady", "vdnn", "autovm")
LOOK_FURTHER = 3
UNCAPPED = {"search_seconds": 1e9}


@dataclass(frozen=True)
class Choice:
    """A swap plan, how to make it again, and what it costs."""

    policy: str
    capacity_bytes: int
    share_pct: float
    pool_bytes: int
    simulated_ms: float
    bound_ms: float


def swap_plan(graph: Graph, capacity: int, policy: str, cost: CostModel) -> Plan:
    """The plan a `Choice` names, made again: the same on every machine."""
    options = UNCAPPED if policy == "tuned" else {}
    config = Config(graph.model, graph.batch, graph.image_size, capacity, policy, options, Mechanism.SWAP)
    return plan_for(config, cost, graph=graph).plan


def pool_bytes(graph: Graph, plan: Plan) -> int:
    """The device pool the engine allocates for `plan` in a timed run."""
    return plan_pool(graph, plan, kept_tensors(graph, keep_weights=False)).total


def _try(graph: Graph, share: float, policies: tuple[str, ...], cost: CostModel) -> list[Choice]:
    capacity = int(graph.footprint * share / 100)
    out = []
    for policy in policies:
        try:
            plan = swap_plan(graph, capacity, policy, cost)
        except PlanError:
            continue
        out.append(Choice(policy, capacity, share, pool_bytes(graph, plan),
                          float(np.median(simulate(graph, plan, cost).timed_ns())) / 1e6,
                          lower_bound(graph, capacity, cost, Mechanism.SWAP).lower_bound_ns / 1e6))
    return out


def fastest_within(graph: Graph, limit: int, cost: CostModel) -> tuple[Choice | None, list[Choice]]:
    """The fastest simulated swap plan whose pool holds at most `limit` bytes (None where none is found),
    and every plan tried."""
    least = 100 * graph.min_capacity[0] / graph.footprint
    shares = [float(s) for s in range(50, math.ceil(least) - 1, -1) if s >= least]
    tried: list[Choice] = []
    fitted_at: list[float] = []
    for share in shares:
        tried += _try(graph, share, QUICK, cost)
        if any(c.pool_bytes <= limit for c in tried if c.share_pct == share):
            fitted_at.append(share)
        if fitted_at and share <= fitted_at[0] - LOOK_FURTHER:
            break
    if not fitted_at:
        for k in range(21):
            share = round(math.ceil(least * 20) / 20 + k / 20, 2)
            tried += _try(graph, share, QUICK, cost)
            if any(c.pool_bytes <= limit for c in tried if c.share_pct == share):
                fitted_at.append(share)
    for share in fitted_at:
        tried += _try(graph, share, ("tuned",), cost)
    fits = [c for c in tried if c.pool_bytes <= limit]
    return (min(fits, key=lambda c: c.simulated_ms) if fits else None), tried


CASES = (("vgg19", 64), ("resnet50", 64), ("alexnet", 256))


def cost_session(model: str, batch: int) -> Path:
    """The measured swap session whose calibrated H200 model plans and judges a case's plans."""
    return ROOT / "sample_sessions" / f"h200-{model}-b{batch}-belady-swap-50pct.measured.vms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peaks", type=Path, default=ROOT / "bench" / "results" / "h200" / "bench_save_on_cpu.json",
                    help="bench_save_on_cpu.py's JSON: each model's limit is half its save_on_cpu peak")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "h200" / "pool_within_half.json")
    args = ap.parse_args()
    peaks = {(r["model"], r["batch"]): int(r["max_allocated_bytes"]) for r in json.loads(args.peaks.read_text())["rows"]
             if "save_on_cpu" in r["config"]}
    cases = []
    for model, batch in CASES:
        limit = peaks[(model, batch)] // 2
        session = cost_session(model, batch)
        best, tried = fastest_within(build_graph(model, batch), limit, load_session(session).cost_model)
        cases.append({"model": model, "batch": batch, "limit_bytes": limit,
                      "cost_session": str(session.relative_to(ROOT)), "best": asdict(best) if best else None,
                      "tried": [asdict(c) for c in tried]})
        print(json.dumps({k: v for k, v in cases[-1].items() if k != "tried"}), flush=True)
    args.out.write_text(json.dumps({"peaks_from": str(args.peaks.relative_to(ROOT)), "cases": cases}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(c["best"] for c in cases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
