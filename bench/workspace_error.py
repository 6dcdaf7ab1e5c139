"""How much of a swap sample's time its convolutions' workspaces explain: cuDNN's plans timed per workspace
(bench/results/h200/conv_plans.json, `bench/gpu/conv_workspaces.py --plans`) against the timelines.

    python bench/workspace_error.py [SAMPLE ...]   (default: the H200's swap samples)

For each sample: the workspace each convolution ran in (its graph fitted to the plan's room, then cut by
the pool as the engine cut it: `plan_pool(..., cut=True)` where the plan needs it, as the samples of
fb75d65 were run), the time cuDNN's heuristic choice within it took when the plans were timed (the first
plan in cuDNN's order that needs no more, as the engine runs it), and the convolutions' time measured in
the sample's timeline; the same for its model's `device` sample. The question: does the plans' table
predict what smaller workspaces cost, so that a cost model holding it would predict these runs?
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmexplorer.graph import Graph  # noqa: E402
from vmexplorer.plan.placement import DEVICE_ALIGN  # noqa: E402
from vmexplorer.plan.pool import device_pool, kept_tensors, plan_pool, pool_limit, shrunk_workspaces  # noqa: E402
from vmexplorer.session import Session, load_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLANS = ROOT / "bench" / "results" / "h200" / "conv_plans.json"


def plan_ms(plans: list[dict], limit: int) -> float:
    """The heuristic's choice within `limit`: the first plan in cuDNN's order that fits and ran."""
    for p in sorted(plans, key=lambda p: p["index"]):
        if p["workspace_bytes"] <= limit and p["ms"] == p["ms"]:
            return float(p["ms"])
    return float("nan")


def executed(session: Session) -> Graph:
    """The graph the run executed: fitted to the plan's room, its workspaces as its pool cut them."""
    g = session.graph.sized_for(session.plan.planned_with)
    if session.plan.policy == "device":
        keep = kept_tensors(g, False)
        _, sizes, _ = device_pool(g, DEVICE_ALIGN, keep, pool_limit(session.plan.capacity))
        return shrunk_workspaces(g, range(len(g.tensors)), sizes, DEVICE_ALIGN)
    pool = plan_pool(g, session.plan, kept_tensors(g, False), cut=True)
    return shrunk_workspaces(g, [s.tensor for s in pool.stays], pool.sizes, DEVICE_ALIGN)


def measured_conv_ms(session: Session, ops: list[int]) -> float:
    tl = session.timeline
    idx = np.asarray(tl.op_index)
    d = np.asarray(tl.op_end_ns) - np.asarray(tl.op_start_ns)
    per = np.bincount(idx, weights=d) / np.maximum(np.bincount(idx), 1)
    return float(per[ops].sum() / 1e6)


def predicted_conv_ms(g: Graph, problems: list[dict]) -> float:
    return sum(plan_ms(p["plans"], g.workspace_bytes[k]) for p in problems for k in p["ops"])


def main(argv: list[str]) -> int:
    tables = {(m["model"], m["batch"]): m["problems"] for m in json.loads(PLANS.read_text())["models"]}
    paths = argv or sorted(glob.glob(str(ROOT / "sample_sessions" / "h200-*-swap-*.measured.vms")))
    simulated = simulated_ms()
    print("| sample | room | convolutions measured | predicted from the plans' table | device: measured, predicted "
          "| iteration measured | simulated | simulated + the convolutions' difference |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    within = total = 0
    for path in paths:
        s = load_session(path)
        problems = tables.get((s.graph.model, s.graph.batch))
        if problems is None:
            continue
        ops = sorted({k for p in problems for k in p["ops"]})
        dev = load_session(str(Path(path).parent / f"h200-{s.graph.model}-b{s.graph.batch}-device.measured.vms"))
        room = s.plan.planned_with / s.plan.capacity
        run, base = predicted_conv_ms(executed(s), problems), predicted_conv_ms(executed(dev), problems)
        measured, sim = s.summary["iteration_ns"] / 1e6, simulated.get(Path(path).name)
        extra = ""
        if sim is not None:
            adjusted = sim + run - base
            total += 1
            within += abs(adjusted / measured - 1) <= 0.10
            extra = (f" {measured:.1f} ms | {sim:.1f} ms ({sim / measured - 1:+.1%}) | "
                     f"{adjusted:.1f} ms ({adjusted / measured - 1:+.1%})")
        print(f"| {Path(path).name} | {room:.3f} | {measured_conv_ms(s, ops):.1f} ms | {run:.1f} ms | "
              f"{measured_conv_ms(dev, ops):.1f} ms, {base:.1f} ms |{extra} |", flush=True)
    print(f"\nWith the convolutions' difference added, {within} of {total} predicted swap samples within 10%.")
    return 0


def simulated_ms() -> dict[str, float]:
    """The simulator's predictions of the swap samples, from bench/results/validation.md's swap table."""
    out = {}
    for line in (ROOT / "bench" / "results" / "validation.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 9 and "-swap-" in cells[2] and cells[9] == "predicted":
            out[cells[2]] = float(cells[7].split()[0])
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
