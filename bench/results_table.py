"""The results table in the README, generated from the measured sample sessions alone.

    python bench/results_table.py [--samples DIR] [--readme FILE] [--check]

One row per model and capacity: the median iteration time of `device` (the whole footprint on the
GPU), `uvm` and `autovm` at that capacity; autovm's speedup over uvm and its overhead over device;
CUPTI's GPU fault groups and bytes moved each way per iteration under each paging policy; and a lower
bound on any schedule at that capacity (`vmexplorer.simulator.bound`: the least bytes any schedule must
move each way, Belady's MIN a byte at a time over the repeating iteration, at the rates fitted to the
autovm run itself, its stored cost model from `bench/calibrate_samples.py`, with the two directions one
at a time as the driver runs them; or the ops' compute, if that is longer), and how close autovm comes
to it. Capacities the recording refused (below the model's minimum) are listed from
bench/results/h100/record_samples.json. The table replaces the text between the README's
`<!-- results:start -->` and `<!-- results:end -->`; `--check` only says whether it is up to date.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# bench/ is this script's folder: a sample's iteration time (the median of its timed iterations), and
# its capacity in % of the footprint
from validate_simulator import median_ms as ms  # noqa: E402
from validate_simulator import share  # noqa: E402

from vmexplorer.config import share_of_footprint  # noqa: E402
from vmexplorer.policies import non_default_options  # noqa: E402
from vmexplorer.session import Session, load_session  # noqa: E402
from vmexplorer.simulator.bound import lower_bound  # noqa: E402
from vmexplorer.units import format_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "bench" / "results" / "h100" / "record_samples.json"  # every recording of every sample
START, END = "<!-- results:start -->", "<!-- results:end -->"


def defaults(s: Session) -> bool:
    """Whether the session's policy ran with its default options (the table compares policies as shipped)."""
    return not non_default_options(s.plan.policy, s.plan.options)


def moved(s: Session) -> str:
    """What the engine moved each way per iteration: the plan's transfers, which the capacity emulation
    carries out exactly (CUPTI's own byte counts fall short of them: see bench/results/h100)."""
    m = s.summary
    return f"{format_bytes(int(m['bytes_to_host']))} / {format_bytes(int(m['bytes_to_device']))}"


def faults(s: Session) -> str:
    value = s.summary.get("measured_fault_groups")
    return "-" if value is None else f"{int(value):,}"


def bound_ms(device: Session, autovm: Session) -> tuple[float, str] | None:
    """The least time any schedule could take at autovm's capacity (`simulator.bound.lower_bound`: the
    least traffic each way at the rates fitted to the autovm run, the directions one at a time as the
    driver runs them, or the compute of the `device` run's ops) and what sets it; None without the
    autovm run's cost model."""
    cost = autovm.cost_model
    if cost is None:
        return None
    bound = lower_bound(autovm.graph, autovm.plan.capacity, cost)
    return bound.lower_bound_ns / 1e6, bound.set_by


def table(samples: Path) -> str:
    sessions = [load_session(p) for p in sorted(samples.glob("*.measured.vms"))]
    models = sorted({(s.graph.model, s.graph.batch) for s in sessions}, key=lambda mb: (mb[0] != "vgg19", mb))
    rows = ["| model | capacity | device | uvm | autovm | autovm vs uvm | autovm vs device | GPU fault groups, "
            "uvm / autovm (CUPTI) | to host / to device, uvm | to host / to device, autovm "
            "| lower bound (set by) | autovm / bound |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model, batch in models:
        mine = [s for s in sessions if (s.graph.model, s.graph.batch) == (model, batch) and defaults(s)]
        device = next((s for s in mine if s.plan.policy == "device"), None)
        for pct in sorted({share(s) for s in mine if s.plan.policy != "device"}):
            uvm = next((s for s in mine if s.plan.policy == "uvm" and share(s) == pct), None)
            autovm = next((s for s in mine if s.plan.policy == "autovm" and share(s) == pct), None)
            cells = [f"{model} b{batch}", f"{pct}%", f"{ms(device):.1f} ms" if device else "-",
                     f"{ms(uvm):.1f} ms" if uvm else "-", f"{ms(autovm):.1f} ms" if autovm else "-",
                     f"{ms(uvm) / ms(autovm):.2f}x" if uvm and autovm else "-",
                     f"{ms(autovm) / ms(device):.2f}x" if autovm and device else "-",
                     f"{faults(uvm) if uvm else '-'} / {faults(autovm) if autovm else '-'}",
                     moved(uvm) if uvm else "-", moved(autovm) if autovm else "-"]
            bound = bound_ms(device, autovm) if device and autovm else None
            cells += [f"{bound[0]:.1f} ms ({bound[1]})", f"{ms(autovm) / bound[0]:.2f}x"] if bound and autovm \
                else ["-", "-"]
            rows.append("| " + " | ".join(cells) + " |")
    refused = []
    for log in [LOG]:
        for r in json.loads(log.read_text()):
            if r["exit"] != 0:
                command = r["command"].split(" --iterations")[0]
                refused.append(f"- `{command}` was refused: {r['message'].removeprefix('vmexplorer: error: ')}")
    passes = len(next((e["passes"] for e in json.loads(LOG.read_text()) if e["exit"] == 0), []))
    head = ["Measured on the lent H100 (PCIe Gen5 x16) with `bench/gpu/record_samples.py`; generated by "
            "`bench/results_table.py` from the sample sessions in `sample_sessions/` alone. Each configuration "
            f"was recorded {passes} times, each in a process of its own, with every collector on; the sample is "
            "the recording with the median iteration time (`bench/pick_samples.py`), and its time is the median "
            "of its timed iterations. Those run without CUPTI's unified-memory counters, which slow paging; one "
            "more iteration after them is counted, and gives the fault groups here (next table: what counting "
            "costs). Per iteration: the bytes each way are the engine's transfers (the capacity emulation "
            "carries out each plan exactly, demand faults included).", ""]
    return "\n".join(head + rows + ([""] + refused if refused else []) + counting_table(sessions)
                     + ["", autovm_paragraph(sessions)]) + "\n"


def counting_table(sessions: list[Session]) -> list[str]:
    """What counting unified memory costs, configuration by configuration: each paging sample's counted
    iteration against the median of its timed ones, in the same process."""
    rows = []
    for s in sorted(sessions, key=lambda s: (s.graph.model != "vgg19", s.graph.model, share(s), s.plan.policy)):
        tl = s.timeline
        if s.plan.policy == "device" or not tl.counted or not defaults(s):
            continue
        counted = float(np.median(tl.iteration_ns()[tl.timed_iterations:])) / 1e6
        rows.append(f"| {s.graph.model} b{s.graph.batch} | {share(s)}% | {s.plan.policy} | {ms(s):.1f} ms "
                    f"| {counted:.1f} ms | {counted / ms(s) - 1:+.0%} |")
    if not rows:
        return []
    return ["", "What counting costs: each paging sample's iteration with CUPTI's unified-memory counters on, "
                "against the median of its timed iterations without them, in the same process:", "",
            "| model | capacity | policy | timed (median) | counted | counting adds |",
            "|---|---:|---|---:|---:|---:|", *rows]


def autovm_paragraph(sessions: list[Session]) -> str:
    """How our VGG-19 figures compare with the AutoVM work's 2.5-2.7x, with the numbers filled in
    from the sessions (the reasons are the same whatever the numbers)."""
    at = {(s.plan.policy, share(s)): s for s in sessions
          if (s.graph.model, s.graph.batch) == ("vgg19", 64) and defaults(s)}
    device, uvm, autovm = at.get(("device", 100)), at.get(("uvm", 50)), at.get(("autovm", 50))
    if not (device and uvm and autovm and autovm.cost_model and "measured_bytes_dtoh" in autovm.summary):
        return "(The comparison with AutoVM needs the VGG-19 b64 device, uvm and autovm-50% samples.)"
    cost, m = autovm.cost_model, autovm.summary
    to_host_ms = m["measured_bytes_dtoh"] / cost.evict_bytes_per_ns / 1e6
    sweep = sorted((pct, ms(at[("uvm", pct)]) / ms(at[("autovm", pct)])) for (pol, pct) in at
                   if pol == "autovm" and ("uvm", pct) in at)
    low, high = min(sweep, key=lambda x: x[1]), max(sweep, key=lambda x: x[1])
    need, _ = device.graph.min_capacity
    to_host_ms = m["bytes_to_host"] / cost.evict_bytes_per_ns / 1e6
    return (
        f"**Against AutoVM's 2.5-2.7x.** The AutoVM dissertation reports VGG-19 training up to 2.5x (abstract) "
        f"and 2.7x (introduction) faster than NVIDIA's default paging, on a Turing GPU (11 GB of 616 GB/s "
        f"memory, PCIe Gen3). Here `autovm` is {ms(uvm) / ms(autovm):.2f}x faster than `uvm` on VGG-19 b64 at "
        f"50%, and from {low[1]:.2f}x ({low[0]}%) to {high[1]:.2f}x ({high[0]}%) across the capacities "
        f"recorded. The difference is the balance of compute and interconnect. The H100 runs a whole VGG-19 "
        f"iteration in {ms(device):.1f} ms, while managed memory leaves it only through the driver's "
        f"migration: `cudaMemPrefetchAsync` to the host ran at {cost.evict_bytes_per_ns:.1f} GB/s in the autovm "
        f"run, far below PCIe Gen5's 64 GB/s. So the {format_bytes(int(m['bytes_to_host']))} that leave per "
        f"iteration at 50% take {to_host_ms:.0f} ms by themselves, {to_host_ms / ms(device):.1f} times the whole "
        f"compute, and migration, not the compute, sets the lower bound in the table. On a slower GPU the "
        f"same transfers hide behind more compute, and removing the demand faults' stalls, which is what "
        f"AutoVM's graph knowledge does, is a larger share of the time. Here both policies pay for the same "
        f"eviction traffic: autovm overlaps it with compute and avoids the faults, but it cannot shrink it. "
        f"Capacity cannot go below {share_of_footprint(need, device.graph.footprint):.0f}% of VGG-19's footprint "
        f"in the emulation (its largest backward op alone needs that much), which is why 30% and 40% were refused; "
        f"a real oversubscribed GPU would instead thrash inside that kernel."
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=Path, default=ROOT / "sample_sessions")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = args.readme.read_text()
    if START not in text or END not in text:
        print(f"{args.readme} has no {START} ... {END} section", file=sys.stderr)
        return 2
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    new = before + START + "\n" + table(args.samples) + END + after
    if args.check:
        print("up to date" if new == text else "out of date: run python bench/results_table.py")
        return 0 if new == text else 1
    args.readme.write_text(new)
    print(table(args.samples), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
