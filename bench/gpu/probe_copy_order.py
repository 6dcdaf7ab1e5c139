"""Probe: does running each swap copy stream in earliest-deadline order take off what the simulator says?

    python bench/gpu/probe_copy_order.py SESSION [--processes 3] [--out FILE]

bench/swap_schedule_gap.py finds, in the simulator, that the executor's copy order (each copy called just
before the op that waits for it, so a copy stream runs copies in the order of the ops needing them) costs
some plans time: a copy that could start waits behind one whose issue op has not run.
This probe runs a recorded swap session's plan on the GPU in both orders, each in its own processes: the
executor as it is, and with its program rebuilt so that each stream's copies are called in the order
`swap_schedule_gap.earliest_deadline` picks, each placed in host order after the op it is issued after (or
after the copy before it on its stream, or after the steps whose bytes or tensor it waits for). Prints the
median iteration of each order, and a last pass with deterministic engines and no TF32 checks that
both orders give the same weights bit for bit (the same plan in another order computes the same values).
A probe, not the engine: nothing here changes how `run` schedules.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def reordered_schedule(graph, plan, rank, dead=None, pool=None):  # noqa: ANN001, ANN201
    """The executor's program with each stream's async copies in `rank`'s order (see the docstring)."""
    from vmexplorer.engine import schedule as sch
    from vmexplorer.plan import Direction, Mode

    n, memops = len(graph.ops), plan.memops
    program = sch._Program(pool or {})
    due_sync: list[list[int]] = [[] for _ in range(n + 1)]
    for i, m in enumerate(memops):
        if m.mode is Mode.SYNC:
            due_sync[m.complete_before].append(i)
    queues = {d: sorted((i for i, m in enumerate(memops) if m.mode is Mode.ASYNC and m.direction is d),
                        key=lambda i: rank[i]) for d in Direction}
    by_tensor: dict[int, list[int]] = {}
    for i in sorted(range(len(memops)), key=lambda i: (memops[i].issue_after, memops[i].complete_before,
                                                       memops[i].mode is Mode.SYNC, i)):
        by_tensor.setdefault(memops[i].tensor, []).append(i)
    before = {j: ("memop", seq[k - 1]) for seq in by_tensor.values() for k, j in enumerate(seq) if k}
    placed: set = set()

    def needs(i: int) -> list:
        return [*((pool or {}).get(("memop", i), ())), *([before[i]] if i in before else [])]

    def place_async(k: int) -> None:
        moved = True
        while moved:
            moved = False
            for d, q in queues.items():
                while q and memops[q[0]].issue_after < k and all(e in placed for e in needs(q[0])):
                    i = q.pop(0)
                    m = memops[i]
                    after = [("op", m.issue_after)] if m.issue_after >= 0 else []
                    if i in before:
                        after.append(before[i])
                    stream = sch.Stream.TO_HOST if d is Direction.TO_HOST else sch.Stream.TO_DEVICE
                    program.add(sch.StepKind.COPY, i, stream, after)
                    placed.add(("memop", i))
                    moved = True

    for k in range(n + 1):
        place_async(k)
        for i in sch._swap_order(plan, due_sync[k], k):
            m = memops[i]
            after = [e for e in ([before[i]] if i in before else []) if e[0] == "memop"]
            kind = sch.StepKind.COPY_IN if m.direction is Direction.TO_DEVICE else sch.StepKind.EVICT
            program.add(kind, i, sch.Stream.COMPUTE, after)
            placed.add(("memop", i))
            place_async(k)
        if k < n:
            ready = [("memop", i) for i, m in enumerate(memops) if m.mode is Mode.ASYNC and m.complete_before == k]
            missing = [e for e in ready if e not in placed]
            if missing:
                raise ValueError(f"op {k} needs {missing} before it is placed")
            program.add(sch.StepKind.OP, k, sch.Stream.COMPUTE, ready)
            placed.add(("op", k))
    return tuple(program.steps)


def one(session: Path, order: str, check: bool = False) -> dict:
    """Run the session's plan once in this process; with `check`, with deterministic engines and no TF32,
    keeping the weights, and say their digest (two orders of one plan must give the same bits)."""
    import numpy as np
    import swap_schedule_gap as gap

    from vmexplorer.engine import executor
    from vmexplorer.engine.executor import RunSettings, execute
    from vmexplorer.session import load_session

    s = load_session(session)
    if order == "earliest-deadline":
        rank = gap.best_rank(s.graph, s.plan, s.cost_model)
        executor.schedule = lambda graph, plan, dead=None, pool=None: reordered_schedule(graph, plan, rank, dead, pool)
    settings = (RunSettings(iterations=5, warmup=0, allow_tf32=False, deterministic=True, keep_weights=True,
                            collect=False) if check else RunSettings(iterations=5, warmup=1, collect=False))
    result = execute(s.graph, s.plan, settings)
    row = {"order": order, "iteration_ms": float(np.median(result.timeline.timed_ns())) / 1e6,
           "losses": [float(x) for x in result.losses]}
    if check:
        digest = hashlib.sha256()
        for name in sorted(result.weights):
            digest.update(name.encode() + np.ascontiguousarray(result.weights[name]).tobytes())
        row["weights_sha256"] = digest.hexdigest()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("session", type=Path)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--one", choices=("executor", "earliest-deadline"), help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.session, args.one, args.check)))
        return 0
    rows = []
    for run in range(args.processes + 1):  # the last pass checks the bits, with deterministic engines
        for order in ("executor", "earliest-deadline"):
            check = ["--check"] if run == args.processes else []
            cmd = [sys.executable, __file__, str(args.session), "--one", order, *check]
            done = subprocess.run(cmd, capture_output=True, text=True)
            row = json.loads(done.stdout) if done.returncode == 0 else {"order": order, "error": done.stderr[-2000:]}
            print(json.dumps(row), flush=True)
            rows.append(row)
    import statistics as st

    timed = [r for r in rows if "error" not in r and "weights_sha256" not in r]
    summary = {order: st.median(r["iteration_ms"] for r in timed if r["order"] == order)
               for order in ("executor", "earliest-deadline") if any(r["order"] == order for r in timed)}
    checked = [r.get("weights_sha256") for r in rows[-2:]]
    summary["same_weights"] = None not in checked and len(set(checked)) == 1
    print(json.dumps({"session": args.session.name, "median_ms": summary}), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"session": args.session.name, "median_ms": summary, "runs": rows},
                                       indent=1) + "\n")
    return 0 if summary["same_weights"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
