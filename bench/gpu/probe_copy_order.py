"""Probe: does running each swap copy stream in earliest-deadline order take off what the simulator says?

    python bench/gpu/probe_copy_order.py SESSION [--processes 3] [--out FILE]

bench/swap_schedule_gap.py found, in the simulator, that the executor's copy order (each copy called just
before the op that waits for it, so a copy stream runs copies in the order of the ops needing them) costs
some plans time: a copy that could start waits behind one whose issue op has not run. Plans now carry a
copy order (`vmexplorer.plan.copies`), which `compile_plan` picks under swap with a simulation.
This probe runs a recorded swap session's plan on the GPU in both orders, each in its own processes: the
executor's (the plan with no copy order) and the earliest-deadline order `policies.order_copies` picks
under the session's own cost model. Prints the median iteration of each order, and a last pass with
deterministic engines and no TF32 checks that both orders give the same weights bit for bit (the same
plan in another order computes the same values).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORDERS = ("executor", "earliest-deadline")
sys.path.insert(0, str(ROOT))


def ordered(session: Path, order: str):  # noqa: ANN201
    """The session's graph and its plan in `order`: "executor" (no copy order) or "earliest-deadline"."""
    from dataclasses import replace

    from vmexplorer.policies import Simulation, order_copies
    from vmexplorer.session import load_session
    from vmexplorer.simulator import simulate
    from vmexplorer.simulator.bound import lower_bound

    s = load_session(session)
    plan = replace(s.plan, copy_order=())
    if order == "earliest-deadline":
        plan = order_copies(s.graph, plan, Simulation(simulate, lower_bound, s.cost_model))
    return s.graph, plan


def one(session: Path, order: str, check: bool = False) -> dict:
    """Run the session's plan once in this process; with `check`, with deterministic engines and no TF32,
    keeping the weights, and say their digest (two orders of one plan must give the same bits)."""
    graph, plan = ordered(session, order)
    return {"order": order, **run_once(graph, plan, check)}


def run_once(graph, plan, check: bool) -> dict:  # noqa: ANN001
    """Five iterations of `plan` in this process: the median iteration and the losses; with `check`, with
    deterministic engines and no TF32, and the digest of the weights they leave."""
    import numpy as np

    from vmexplorer.engine.executor import RunSettings, execute

    settings = (RunSettings(iterations=5, warmup=0, allow_tf32=False, deterministic=True, keep_weights=True,
                            collect=False) if check else RunSettings(iterations=5, warmup=1, collect=False))
    result = execute(graph, plan, settings)
    row = {"iteration_ms": float(np.median(result.timeline.timed_ns())) / 1e6,
           "losses": [float(x) for x in result.losses]}
    if check:
        digest = hashlib.sha256()
        for name in sorted(result.weights):
            digest.update(name.encode() + np.ascontiguousarray(result.weights[name]).tobytes())
        row["weights_sha256"] = digest.hexdigest()
    return row


def in_processes(script: Path, session: Path, orders: tuple[str, ...], processes: int,
                 checked: tuple[str, ...]) -> tuple[list[dict], dict]:
    """`script --one ORDER` for each of `orders` in turn, `processes` times, each in a process of its own,
    then each of `checked` once with `--check` (deterministic engines): every row, and the median iteration
    of each order with whether the checked runs left the same weights, bit for bit."""
    import statistics

    rows = []
    for order, check in [*((o, False) for _ in range(processes) for o in orders), *((o, True) for o in checked)]:
        cmd = [sys.executable, str(script), str(session), "--one", order, *(["--check"] if check else [])]
        done = subprocess.run(cmd, capture_output=True, text=True)
        row = json.loads(done.stdout) if done.returncode == 0 else {"order": order, "error": done.stderr[-2000:]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    timed = [r for r in rows if "error" not in r and "weights_sha256" not in r]
    summary: dict = {o: statistics.median(r["iteration_ms"] for r in timed if r["order"] == o)
                     for o in orders if any(r["order"] == o for r in timed)}
    digests = [r.get("weights_sha256") for r in rows[len(rows) - len(checked):]]
    summary["same_weights"] = None not in digests and len(set(digests)) == 1
    return rows, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("session", type=Path)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--one", choices=ORDERS, help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.session, args.one, args.check)))
        return 0
    rows, summary = in_processes(Path(__file__), args.session, ORDERS, args.processes, ORDERS)
    print(json.dumps({"session": args.session.name, "median_ms": summary}), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"session": args.session.name, "median_ms": summary, "runs": rows},
                                       indent=1) + "\n")
    return 0 if summary["same_weights"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
