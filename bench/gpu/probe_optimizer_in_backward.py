"""Probe: does running each layer's SGD step inside the backward take off, on the GPU, what the simulator says?

    python bench/gpu/probe_optimizer_in_backward.py SESSION [--processes 3] [--out FILE]

bench/optimizer_in_backward.py found, in the simulator, that the best swap schedules at 50% lose much of
their time after the backward, where the update waits for its weights, gradients and momenta to come back,
and that with each layer's step right after the backward op completing its gradient (`in_backward`) `tuned`
finds faster plans. This probe plans `tuned` through swap for a recorded swap session's configuration under
the session's own cost model, on the graph as it is and in that order (the default search, uncapped in time:
the same plan in every process), runs each on the GPU in its own processes, and prints the median iteration
of each. A last pass with deterministic engines and no TF32 runs both and the `device` run of the graph as
it is, and checks that the three give the same weights bit for bit (the same step in another order).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ORDERS = ("as_is", "in_backward")


def planned(session: Path, order: str):  # noqa: ANN201
    """The session's graph in `order` ("as_is", "in_backward", or "device": the graph as it is with the
    whole footprint) and its plan."""
    from optimizer_in_backward import in_backward, tuned_plan

    from vmexplorer.policies import compile_plan
    from vmexplorer.session import load_session

    s = load_session(session)
    if order == "device":
        return s.graph, compile_plan(s.graph, s.graph.footprint, "device")
    graph = in_backward(s.graph) if order == "in_backward" else s.graph
    return graph, tuned_plan(graph, s.plan.capacity, s.cost_model)


def one(session: Path, order: str, check: bool = False) -> dict:
    """Run the order's plan once in this process (`probe_copy_order.run_once`), with what it moves out."""
    from probe_copy_order import run_once

    graph, plan = planned(session, order)
    return {"order": order, "moved_to_host": sum(m.nbytes for m in plan.memops if m.direction.value == "to_host"),
            **run_once(graph, plan, check)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("session", type=Path)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--one", choices=(*ORDERS, "device"), help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.session, args.one, args.check)))
        return 0
    from probe_copy_order import in_processes

    rows, summary = in_processes(Path(__file__), args.session, ORDERS, args.processes, ("device", *ORDERS))
    result = {"session": args.session.name, "processes": args.processes, "median_ms": summary}
    print(json.dumps(result), flush=True)
    if args.out:
        args.out.write_text(json.dumps({**result, "runs": rows}, indent=1) + "\n")
    return 0 if summary["same_weights"] and len(summary) == len(ORDERS) + 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
