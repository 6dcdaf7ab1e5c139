"""What one free stretch per stay costs the best swap plans of issue 34: the same plan made with all the room.

    python -m bench.room_lost [--out FILE]   (default bench/results/h200/room_lost.txt)

Under swap each stay needs one free stretch of the device pool, and `policies.fit_pool` makes a plan again
with less room, or cuts the convolutions' workspaces to the stretches the others leave, until its pool fits
what the capacity leaves it. For each model's best plan at 50% in bench/results/h200/goals_issue34.md: the
plan as `compile_plan` makes it (the room it fitted with, its workspaces as its pool gives them), and the same
policy's plan made with the whole capacity as room and simulated as if its pool placed every stay within it
(no placement does: the gap is what placement costs), both under the H200 samples' calibrated model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench.gpu.bench_recompute import _cost_model
from vmexplorer.config import Config, Mechanism
from vmexplorer.graph import build_graph
from vmexplorer.graph.recompute import recomputed
from vmexplorer.plan import Plan
from vmexplorer.plan.pool import executed_graph
from vmexplorer.plan.residency import repair, transfers_for_moves
from vmexplorer.policies import POLICIES, Simulation, compile_plan
from vmexplorer.simulator import simulate
from vmexplorer.simulator.bound import lower_bound

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "h200" / "room_lost.txt"
BEST = [("vgg19", 64, "checkpoint", {"segments": 8, "then": "belady"}),
        ("resnet50", 64, "checkpoint", {"segments": 8, "then": "none"}),
        ("alexnet", 256, "checkpoint", {"segments": 4, "then": "belady"})]


def unplaced(graph: Any, capacity: int, policy: str, options: dict[str, Any]) -> Plan:
    """The policy's swap plan made with the whole capacity as room, its pool not placed."""
    spec = POLICIES[policy]
    fitted = graph.fitted(capacity)
    steps = tuple(spec.plan_recomputes(fitted, capacity, options, ())) if spec.plan_recomputes else ()
    ran = recomputed(fitted, steps)
    moves = spec.plan_moves(ran, capacity, options, ())
    replay = repair(ran, capacity, transfers_for_moves(ran, list(moves)), Mechanism.SWAP)
    config = Config(graph.model, graph.batch, graph.image_size, capacity, policy, options, Mechanism.SWAP)
    return Plan(config, replay.memops, replay.resident_at_start, replay.peak, recomputes=steps)


def rows() -> list[str]:
    out = []
    for model, batch, policy, options in BEST:
        graph = build_graph(model, batch)
        cost, capacity = _cost_model(graph), int(graph.footprint * 0.5)
        fitted = compile_plan(graph, capacity, policy, options, simulation=Simulation(simulate, lower_bound, cost),
                              mechanism="swap")
        room = graph.fitted(fitted.planned_with)
        as_run = simulate(room, fitted, cost, executed_graph(fitted.graph_of(room), fitted)).iteration_ns().max()
        whole = unplaced(graph, capacity, policy, options)
        ideal = simulate(graph.fitted(capacity), whole, cost).iteration_ns().max()
        label = " ".join(f"{k}={v}" for k, v in options.items())
        out.append(f"{model} b{batch} {policy} {label} swap 50%: as planned {as_run / 1e6:.1f} ms with "
                   f"{fitted.planned_with / 2**30:.2f} GiB of room; with all {capacity / 2**30:.2f} GiB and every "
                   f"stay placed within it {ideal / 1e6:.1f} ms ({as_run / ideal:.2f}x)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    text = "\n".join(["room_lost: what placing each stay in one free stretch costs issue 34's best plans "
                      "(simulated, H200 calibrated models)", *rows()]) + "\n"
    args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
