"""The results table in the README, generated from the measured sample sessions alone.

    python bench/results_table.py [--samples DIR] [--readme FILE] [--check]

One row per model and capacity: the median iteration time of `device` (the whole footprint on the
GPU), `uvm` and `autovm` at that capacity; autovm's speedup over uvm and its overhead over device;
CUPTI's GPU fault groups and bytes moved each way per iteration under each paging policy; and a lower
bound on any policy that moves what autovm moved: max(compute, bytes to host / eviction bandwidth,
bytes to device / prefetch bandwidth), with compute the `device` iteration and the bandwidths those
fitted to the autovm run itself (its stored cost model, `bench/calibrate_samples.py`), and how close
autovm comes to it. Capacities the recording refused (below the model's minimum) are listed from
bench/results/h100/record_samples_*.json. The table replaces the text between the README's
`<!-- results:start -->` and `<!-- results:end -->`; `--check` only says whether it is up to date.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmexplorer.policies import POLICIES  # noqa: E402
from vmexplorer.session import Session, load_session  # noqa: E402
from vmexplorer.units import format_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- results:start -->", "<!-- results:end -->"


def defaults(s: Session) -> bool:
    """Whether the session's policy ran with its default options (the table compares policies as shipped)."""
    spec = POLICIES[s.plan.policy].options
    return all(spec[k].default == v for k, v in s.plan.options.items() if k in spec)


def ms(s: Session) -> float:
    return float(np.median(s.timeline.iteration_ns())) / 1e6


def share(s: Session) -> int:
    return round(100 * s.plan.capacity / s.graph.footprint)


def moved(s: Session) -> str:
    m = s.summary
    if "measured_bytes_htod" not in m:
        return "-"
    return f"{format_bytes(int(m['measured_bytes_htod']))} / {format_bytes(int(m['measured_bytes_dtoh']))}"


def faults(s: Session) -> str:
    value = s.summary.get("measured_fault_groups")
    return "-" if value is None else f"{int(value):,}"


def bound_ms(device: Session, autovm: Session) -> tuple[float, str] | None:
    """The lower bound and which term sets it; None without the autovm run's cost model and bytes."""
    cost, m = autovm.cost_model, autovm.summary
    if cost is None or "measured_bytes_dtoh" not in m:
        return None
    terms = {"compute": ms(device),
             "to host": m["measured_bytes_dtoh"] / cost.evict_bytes_per_ns / 1e6,
             "to device": m["measured_bytes_htod"] / cost.prefetch_bytes_per_ns / 1e6}
    name = max(terms, key=lambda k: terms[k])
    return terms[name], name


def table(samples: Path) -> str:
    sessions = [load_session(p) for p in sorted(samples.glob("*.measured.vms"))]
    models = sorted({(s.graph.model, s.graph.batch) for s in sessions}, key=lambda mb: (mb[0] != "vgg19", mb))
    rows = ["| model | capacity | device | uvm | autovm | autovm vs uvm | autovm vs device | fault groups "
            "per iteration, uvm / autovm | moved to device / to host per iteration, uvm | the same, autovm "
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
    for log in sorted((ROOT / "bench" / "results" / "h100").glob("record_samples_*.json")):
        for r in json.loads(log.read_text()):
            if r["exit"] != 0:
                refused.append(f"- `{r['command']}` was refused: {r['message'].removeprefix('vmexplorer: error: ')}")
    head = ["Measured on the lent H100 (PCIe Gen5 x16) with `bench/gpu/record_samples.py`; generated from "
            "`sample_sessions/` by `bench/results_table.py`. Medians over 5 recorded iterations with every "
            "collector on; fault groups and bytes are CUPTI's, per iteration.", ""]
    return "\n".join(head + rows + ([""] + refused if refused else []) + ["", autovm_paragraph(sessions)]) + "\n"


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
    best = max(sweep, key=lambda x: x[1])
    return (
        f"**Against AutoVM's 2.5-2.7x.** The AutoVM dissertation reports VGG-19 training up to 2.5x (abstract) "
        f"and 2.7x (introduction) faster than NVIDIA's default paging, on a Turing GPU (11 GB of 616 GB/s "
        f"memory, PCIe Gen3). Here `autovm` is {ms(uvm) / ms(autovm):.2f}x faster than `uvm` on VGG-19 b64 at "
        f"50%, and at most {best[1]:.2f}x across the capacities recorded ({best[0]}%). The difference is the "
        f"ratio of compute to interconnect. The H100 runs a whole VGG-19 iteration in {ms(device):.1f} ms with "
        f"TF32 tensor cores, many times faster than the Turing card did. Managed memory leaves the GPU only "
        f"through the driver's migration, and `cudaMemPrefetchAsync` to the host ran at "
        f"{cost.evict_bytes_per_ns:.1f} GB/s in the autovm run, far below PCIe Gen5's 64 GB/s. So the "
        f"{format_bytes(int(m['measured_bytes_dtoh']))} that "
        f"must leave per iteration at 50% take {to_host_ms:.0f} ms by themselves, {to_host_ms / ms(device):.1f} "
        f"times the whole compute. On the Turing card, compute was slow enough to hide much of the transfer "
        f"behind it. Here both policies are bound by the same eviction traffic: AutoVM's graph knowledge removes "
        f"the demand faults and overlaps the copies with compute, but it cannot shrink the bytes. The "
        f"capacity matters the same way. At 90% little must move, and the gap between the policies is the "
        f"fault latency AutoVM hides. At 50%, the eviction floor dominates both. Below 41%, VGG-19's largest "
        f"backward op alone does not fit, so the emulated capacity cannot go there, whereas real "
        f"oversubscription would thrash inside the kernel."
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
