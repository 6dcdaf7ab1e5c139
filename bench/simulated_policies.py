"""Every policy on one model, batch and capacity, simulated side by side in one run.

    python -m bench.simulated_policies --model vgg19 --batch 64 --capacity 50%
    python -m bench.simulated_policies --out bench/results/simulated_policies.md
    python -m bench.simulated_policies --readme docs/results.md   # regenerate the table in docs/results.md

The figures come from the simulator's uncalibrated H100 cost model (vmexplorer/simulator/costmodel.py) until
measured sessions calibrate it; the table says which cost model made it. Each case is held against its
lower bound (vmexplorer/simulator/bound.py) under the same cost model; `tuned` searches in that simulator
with its default options, and its report (how far it ends from the bound) follows the table.

Every policy that plans moves runs under both mechanisms: `uvm` (managed memory, the driver's rates, one
direction at a time) and `swap` (pinned copies at the cost model's swap rates, both directions at once),
each held against its own mechanism's bound over the same least traffic.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from vmexplorer.config import Config, Mechanism
from vmexplorer.graph import build_graph
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import POLICIES
from vmexplorer.records import summarize
from vmexplorer.session.planned import plan_for
from vmexplorer.simulator import H100_DEFAULT, simulate
from vmexplorer.simulator.bound import lower_bound
from vmexplorer.units import format_bytes, format_ns, parse_bytes

VARIANTS = [
    ("device", {}),
    ("uvm", {}),
    ("autovm", {}),
    ("autovm", {"tensors": "all"}),
    ("autovm", {"offload": "all"}),
    ("belady", {}),
    ("vdnn", {}),
    ("tuned", {}),
    ("manual", {}),  # no moves: what a person starts from, the driver's repairs only
]
CASES = [("vgg19", 64, "50%"), ("resnet50", 64, "50%"), ("alexnet", 256, "50%")]


def rows(model: str, batch: int, capacity_text: str, reports: list[str]) -> list[dict]:
    g = build_graph(model, batch)
    capacity = parse_bytes(capacity_text, g.footprint)
    out = []
    for mechanism in ("uvm", "swap"):
        for policy, options in VARIANTS:
            if mechanism != "uvm" and POLICIES[policy].uvm_only:
                continue
            cap = max(capacity, g.footprint) if policy == "device" else capacity
            t0 = time.perf_counter()
            planned = plan_for(Config(model, batch, g.image_size, cap, policy, options, Mechanism(mechanism)),
                               H100_DEFAULT, graph=g)
            plan = planned.plan
            reports.extend(planned.reports)
            validate_plan(g, plan)
            s = summarize(g, plan, simulate(g, plan))
            s["wall_ms"] = (time.perf_counter() - t0) * 1e3
            s["policy"] = policy + "".join(f" {k}={v}" for k, v in options.items())
            s["mechanism"] = mechanism
            s["capacity"] = cap
            out.append(s)
    return out


def table(model: str, batch: int, capacity_text: str) -> str:
    reports: list[str] = []
    rs = rows(model, batch, capacity_text, reports)
    base = {r["policy"]: r["iteration_ns"] for r in rs if r["mechanism"] == "uvm"}
    g = build_graph(model, batch)
    capacity = parse_bytes(capacity_text, g.footprint)
    bounds = {m: lower_bound(g, capacity, H100_DEFAULT, m) for m in ("uvm", "swap")}
    bound = bounds["uvm"]
    lines = [f"**{model} batch {batch}**, footprint {format_bytes(g.footprint)}, capacity {capacity_text} "
             f"({format_bytes(capacity)}; `device` gets the whole footprint); any schedule moves at least "
             f"{format_bytes(bound.min_bytes_to_host)} to the host and {format_bytes(bound.min_bytes_to_device)} "
             "to the device; lower bound "
             + " and ".join(f"through {m} {format_ns(b.lower_bound_ns)}, set by {b.set_by}" for m, b in bounds.items()),
             "",
             "| policy | mechanism | iteration | vs its bound | vs uvm | vs device | stall | to host | to device "
             "| of it faulted |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rs:
        b = bounds[r["mechanism"]].lower_bound_ns
        vs_bound = "-" if r["capacity"] != capacity else f"{r['iteration_ns'] / b:.2f}x"
        lines.append(f"| `{r['policy']}` | {r['mechanism']} | {r['iteration_ns'] / 1e6:.1f} ms | {vs_bound} "
                     f"| {base['uvm'] / r['iteration_ns']:.2f}x | {r['iteration_ns'] / base['device']:.2f}x "
                     f"| {r['stall_ns'] / 1e6:.1f} ms | {format_bytes(r['bytes_to_host'])} "
                     f"| {format_bytes(r['bytes_to_device'])} | {format_bytes(r['fault_bytes'])} |")
    # the seconds a search took depend on the machine: the table keeps what the seed fixes
    lines += ["", *(re.sub(r" in [\d.]+ s", "", r) for r in reports)]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--capacity", default="50%")
    ap.add_argument("--readme", type=Path, help="rewrite the table between the markers in this file")
    ap.add_argument("--out", type=Path, help="also write the tables to this file")
    args = ap.parse_args()
    cases = [(args.model, args.batch, args.capacity)] if args.model else CASES
    body = "\n\n".join(table(*c) for c in cases)
    body += f"\n\nSimulated with the `{H100_DEFAULT.name}` cost model; regenerate with " \
            "`python -m bench.simulated_policies --readme docs/results.md`."
    print(body)
    if args.out:
        args.out.write_text(body + "\n")
    if args.readme:
        text = args.readme.read_text()
        new, n = re.subn(r"(<!-- simulated-table:start -->\n).*?(<!-- simulated-table:end -->)",
                         lambda m: m.group(1) + body + "\n" + m.group(2), text, flags=re.S)
        if n != 1:
            print(f"{args.readme}: no simulated-table markers", file=sys.stderr)
            return 2
        args.readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
