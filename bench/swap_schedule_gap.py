"""Where the H200's best swap schedules lose against the bound (issue 17's missed goals), in the simulator:
how much more the search finds, how much the order of the copy streams costs, and whether the windowed
bound has slack its windows alone cannot see. Written to bench/results/h200/swap_schedule_gap.md.

    python bench/swap_schedule_gap.py [--steps 3000] [--lp] [--out bench/results/h200/swap_schedule_gap.md]

For each configuration of issue 17's goals, its best recorded swap schedule (`sample_sessions/h200-*`),
each figure under that sample's own cost model (calibrated on itself, `bench/calibrate_samples.py`):

- **the search**: `tuned` with its default options, and with `--steps` changes and no time cap;
- **the copy streams' order**: the executor's own order calls each copy just before the op that waits
  for it (docs/design.md, "The simulator"), so a copy stream runs its copies in the order of the ops
  that need them, and a copy that can start (its issue op has run) waits behind one that cannot yet. The
  sample's plan is simulated in that order and in the one `compile_plan` now picks under swap
  (`vmexplorer.plan.copies`: each stream's copies in earliest-deadline order among those ready when it
  frees, where the simulator finds that faster; `policies.order_copies`);
- **the bound's slack** (`--lp`, needs scipy, not a dependency of vmexplorer): the windowed bound adds up
  windows of one cut, each window's least traffic counted alone. A linear programme over every op's slot
  (its time at least its compute and its copies each way at their rates), constrained by every window's
  least traffic of every cut `windows_of` tries and the whole iteration's, finds the least sum of slots;
  where it equals the windowed bound, counting windows together adds nothing.

GPU-free: the simulator and the samples only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vmexplorer.config import Mechanism  # noqa: E402
from vmexplorer.graph import Graph  # noqa: E402
from vmexplorer.plan import Plan  # noqa: E402
from vmexplorer.plan.bound import min_traffic, window_traffic  # noqa: E402
from vmexplorer.policies import order_copies, tuned  # noqa: E402
from vmexplorer.policies.spec import Simulation  # noqa: E402
from vmexplorer.session import load_session  # noqa: E402
from vmexplorer.simulator import CostModel, simulate  # noqa: E402
from vmexplorer.simulator.bound import _cuts, _into, _op_ns, lower_bound  # noqa: E402

GOALS = ("alexnet-b256-tuned-swap-50pct", "vgg19-b64-tuned-swap-50pct", "vgg19-b64-tuned-swap-60pct",
         "vgg19-b64-tuned-swap-75pct", "vgg19-b64-tuned-swap-90pct", "resnet50-b64-belady-swap-50pct")
GOAL = 1.25


def copy_orders(graph: Graph, plan: Plan, cost: CostModel) -> tuple[float, float]:
    """The plan's simulated iteration (ns) in the executor's copy order and in the one `compile_plan` picks
    under swap (`policies.order_copies`: earliest-deadline, where the simulator finds that faster)."""
    executor = replace(plan, copy_order=())
    ordered = order_copies(graph, executor, Simulation(simulate, lower_bound, cost))
    return tuple(float(simulate(graph, p, cost).iteration_ns().max()) for p in (executor, ordered))  # type: ignore[return-value]


def lp_bound(graph: Graph, capacity: int, cost: CostModel) -> float:
    """The least sum of op slots under every window's least traffic of every cut (module docstring)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    rates = cost.for_mechanism(Mechanism.SWAP)
    n, op_ns = len(graph.ops), _op_ns(graph, rates)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    rhs: list[float] = []

    def at_least(columns: np.ndarray, least: float) -> None:  # the columns' sum at least `least`
        rows.extend([len(rhs)] * len(columns))
        cols.extend(columns.tolist())
        vals.extend([-1.0] * len(columns))
        rhs.append(-least)

    for first in _cuts(graph):
        w = window_traffic(graph, capacity, first)
        for least, offset in ((w.to_host, 0), (w.to_device, n)):
            for j, k in zip(*np.nonzero(least > 0)):
                at_least(offset + (first + np.arange(j, k)) % n, float(least[j, k]))
    traffic = min_traffic(graph, capacity)
    at_least(np.arange(n), traffic.min_bytes_to_host)
    at_least(n + np.arange(n), traffic.min_bytes_to_device)
    for k in range(n):  # a slot is at least its copies each way at their rates (they overlap under swap)
        for column, rate in ((k, rates.evict_bytes_per_ns), (n + k, _into(rates))):
            rows.extend([len(rhs)] * 2)
            cols.extend([column, 2 * n + k])
            vals.extend([1 / rate, -1.0])
            rhs.append(0.0)
    a = coo_matrix((vals, (rows, cols)), shape=(len(rhs), 3 * n)).tocsr()
    result = linprog(np.r_[np.zeros(2 * n), np.ones(n)], A_ub=a, b_ub=np.array(rhs),
                     bounds=[(0, None)] * (2 * n) + [(c, None) for c in op_ns], method="highs")
    if result.status != 0:
        raise RuntimeError(f"the linear programme did not solve: {result.message}")
    return float(result.fun)


def findings(rows: list[dict], steps: int) -> list[str]:
    """What the table shows, in words, from its figures."""
    out = []
    lp = [r for r in rows if r["lp"] is not None]
    if lp:
        same = [r for r in lp if abs(r["lp"] - r["bound"]) <= 1e-6 * r["bound"]]
        out.append(f"- **The bound.** Counting every window of every cut at once gives the windowed bound in "
                   f"{len(same)} of {len(lp)} configurations: the windows' counts add nothing together that one "
                   "cut does not. A tighter bound needs a tighter count for a window (what a window must move "
                   "given what the windows before it left on the device), not more windows.")
    met = lambda key: sum(r[key] <= GOAL * r["bound"] for r in rows)  # noqa: E731
    gain = max(rows, key=lambda r: r["executor"] - r["edf"])
    out.append(f"- **The copy streams' order.** In earliest-deadline order the same plans run up to "
               f"{gain['executor'] - gain['edf']:.1f} ms faster in the simulator ({gain['name']}: "
               f"{gain['executor']:.1f} -> {gain['edf']:.1f} ms); {met('edf')} of {len(rows)} within {GOAL}x the "
               f"bound, against {met('executor')} in the executor's order. Plans carry this order now "
               "(`plan.copy_order`, picked by `compile_plan` under swap with a simulation).")
    for path in sorted((ROOT / "bench" / "results" / "h200").glob("probe_copy_order_*.json")):
        probe = json.loads(path.read_text())
        ms, name = probe["median_ms"], probe["session"].removesuffix(".measured.vms")
        timed = sum("weights_sha256" not in r and "error" not in r for r in probe["runs"]) // 2
        row = next((r for r in rows if f"h200-{r['key']}" == name), None)
        ratio = f", {ms['earliest-deadline'] / row['bound']:.2f}x the bound" if row else ""
        how = ("the engine's own copy order, `plan.copy_order`" if "_engine_" in path.name else
               "before plans carried an order: the executor's program rebuilt by the probe")
        out.append(f"  - On the H200 (`bench/gpu/probe_copy_order.py`, {how}; `{path.name}`: the plan of {name}, "
                   f"{timed} processes each, medians): the executor's order {ms['executor']:.1f} ms, earliest-deadline "
                   f"{ms['earliest-deadline']:.1f} ms{ratio}; the two orders' weights after 5 iterations with "
                   f"deterministic engines {'are the same bits' if ms['same_weights'] else 'DIFFER'}.")
    best = max(rows, key=lambda r: (r["default"] - r["longer"]) / r["default"])
    out.append(f"- **The search.** {steps} changes with no time cap take at most "
               f"{(best['default'] - best['longer']) / best['default']:.1%} off the default search's plan "
               f"({best['name']}: {best['default']:.1f} -> {best['longer']:.1f} ms): the hill climb ends at a "
               "local optimum. What remains is in the plan's structure (which tensors move, when the room "
               "for a copy in is made), not in the issue times one change at a time moves.")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000, help="changes of the longer search")
    ap.add_argument("--lp", action="store_true", help="also the linear programme over all windows (needs scipy)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "h200" / "swap_schedule_gap.md")
    args = ap.parse_args()
    rows = []
    for name in GOALS:
        s = load_session(ROOT / "sample_sessions" / f"h200-{name}.measured.vms")
        g, cost, capacity = s.graph, s.cost_model, s.plan.capacity
        assert cost is not None, f"{name} carries no cost model: bench/calibrate_samples.py fits one"
        simulation = Simulation(simulate, lower_bound, cost, None)
        executor, edf = (ns / 1e6 for ns in copy_orders(g, s.plan, cost))
        began = time.perf_counter()
        longer = tuned.tune(g, capacity, simulation, 0, args.steps, 1e9, Mechanism.SWAP)
        row = {"name": name.replace("-swap", "").replace("-", " "), "key": name,
               "bound": lower_bound(g, capacity, cost, Mechanism.SWAP).lower_bound_ns / 1e6,
               "lp": lp_bound(g, capacity, cost) / 1e6 if args.lp else None,
               "measured": float(np.median(s.timeline.timed_ns())) / 1e6, "executor": executor, "edf": edf,
               "default": tuned.tune(g, capacity, simulation, mechanism=Mechanism.SWAP).end_ns / 1e6,
               "longer": longer.end_ns / 1e6, "seconds": time.perf_counter() - began}
        rows.append(row)
        print(row, flush=True)

    def vs(ms: float, row: dict) -> str:
        return f"{ms:.1f} ms ({ms / row['bound']:.2f}x)"

    def lp(row: dict) -> str:
        return "not run" if row["lp"] is None else f"{row['lp']:.1f} ms"

    table = [f"| {r['name']} | {r['bound']:.1f} ms | {lp(r)} | {vs(r['measured'], r)} | {vs(r['executor'], r)} | "
             f"{vs(r['edf'], r)} | {vs(r['default'], r)} | {vs(r['longer'], r)}, {r['seconds']:.0f} s |" for r in rows]
    args.out.write_text("\n".join([
        "# Where the best swap schedules lose against the bound (H200, simulated)", "",
        f"Generated by `python bench/swap_schedule_gap.py --steps {args.steps}{' --lp' if args.lp else ''}` "
        "(its docstring says how). Each row: issue 17's configuration, its best recorded swap schedule "
        "(`sample_sessions/h200-*`), every figure under that sample's own cost model; the goal is "
        f"{GOAL}x the bound.", "",
        "| configuration (sample) | windowed bound | bound over all windows at once | measured | "
        "its plan simulated, the executor's copy order | in earliest-deadline order | `tuned`, default search | "
        f"`tuned`, {args.steps} changes, no time cap |",
        "|---|---:|---:|---:|---:|---:|---:|---:|", *table, "", *findings(rows, args.steps), ""]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
