"""Check the simulator against the measured sample sessions, on a CPU, from the sessions alone.

    python -m bench.validate_simulator [--calibrate-on uvm|autovm] [--samples DIR] [--out FILE]
                                       [--readme docs/results.md [--check]]

Per GPU (`GPUS`: each GPU's samples in DIR by their names, bench/pick_samples.py's, its recording
passes and log in bench/results/<gpu>/), for each model with a measured `device` session: fit a cost
model on that `device` run (op times and gaps), then on the same model's `--calibrate-on` run at 50%
of its footprint (bandwidths, demand-fault throughput, host blocking); with that one model, simulate
the plan of every measured session of the model and print the predicted iteration time next to the
measured one (medians over the recorded iterations). The goal is within 10% on every session that was
not used for calibration, whatever its policy; the worst is reported, overall and per policy. Writes
the tables as Markdown to FILE (default bench/results/validation.md), a section per GPU. FILE alone (not
docs/results.md) also gets, per GPU, where the error is (each predicted sample with one part of the model
replaced by its own run's) and the eviction rates eviction by eviction over every pass (`evidence`).

FILE alone also gets the H200's swap sessions (`H200_SWAP`, passes in bench/results/h200/passes_swap):
calibrated per model on its `device` run and its `belady` run through swap at 50%, as
bench/gpu/record_samples.py calibrates them (the pinned copies' rates), pooled over the passes, every
other swap session predicted (`swap_section`); until swap samples are picked into DIR, each
configuration's median recording is read in the passes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np

from bench.passes import folder as passes_folder
from bench.sections import check
from vmexplorer.config import share_of_footprint
from vmexplorer.graph import Graph
from vmexplorer.plan import Direction, MemOp, Mode
from vmexplorer.plan.pool import executed_graph
from vmexplorer.plan.stays import elided
from vmexplorer.policies import non_default_options
from vmexplorer.records.spans import Timeline, timed_only
from vmexplorer.session import Session, load_session
from vmexplorer.simulator import (
    H100_DEFAULT,
    calibrate,
    simulate,
)
from vmexplorer.simulator.calibrate import BIG_EVICTION as BIG
from vmexplorer.simulator.calibrate import Eviction, eviction_rate, evictions
from vmexplorer.simulator.costmodel import CostModel, fault_rates_by_kind_text, pooled
from vmexplorer.simulator.workspaces import workspace_ns

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.10


@dataclass(frozen=True)
class Gpu:
    """One GPU's recordings: its samples in sample_sessions/ are named `prefix` + what its passes call
    them (bench/pick_samples.py), its passes and their log are in `results`."""

    name: str
    prefix: str
    results: Path
    # The passes recorded before the model took its present form (a fault rate per op kind, pooled
    # calibration), which was chosen looking at them; later passes check it on recordings it had never
    # seen. The H100's passes 1-7; every H200 pass came after.
    settled_on: int
    # the mechanism its paging runs moved bytes through; a `swap` set names its paging sessions
    # `<model>-b<batch>-<policy>-swap-<pct>pct` and keeps its passes and log apart from the uvm ones
    mechanism: str = "uvm"
    passes_name: str = "passes"
    log_name: str = "record_samples.json"
    # cuDNN's plans timed per convolution (bench/gpu/conv_workspaces.py --plans), a file in `results`: its
    # models' convolutions are timed by the workspaces their runs gave them (`timed_by_workspace`)
    plans_name: str = ""
    # until when (a session's `created`, ISO UTC) its engine cut workspaces to its pool by placing the
    # others anew first (`plan.pool.run_pool`'s `cut` True: fb75d65's engine); later, as the engine does now
    cut_anew_until: str = ""

    def cut(self, s: Session) -> bool | None:
        """How the engine that recorded `s` cut workspaces to its pool (`plan.pool.executed_graph`'s `cut`)."""
        return True if s.created < self.cut_anew_until else None

    @property
    def passes_dir(self) -> Path:
        return self.results / self.passes_name

    @property
    def log(self) -> Path:
        return self.results / self.log_name

    def passes(self) -> list[Path]:
        return sorted((p for p in passes_folder(self.passes_dir).glob("pass*") if p.is_dir()), key=pass_number)

    def samples(self, folder: Path) -> list[Path]:
        """Its samples in `folder`. A swap set's are its `-swap-` sessions there, or where none was picked
        yet, the median recording of each in its passes; its `device` run is always its passes' median
        recording, as `folder`'s `device` sample is the uvm passes' (same name)."""
        if self.mechanism == "uvm":  # the swap samples share the GPU's prefix
            return [p for p in named(folder, self.prefix) if "-swap-" not in p.name]
        paging = [p for p in named(folder, self.prefix) if "-swap-" in p.name]
        picked = median_recordings(self.passes())
        # the device runs first, then by name; never by folder: the passes' (a cache, `bench.passes`) may
        # sort before or after the checkout's
        device = [p for p in picked if p.name.endswith("-device.measured.vms")]
        return sorted(device) + sorted(paging or [p for p in picked if "-swap-" in p.name], key=lambda p: p.name)

    def recordings(self) -> dict[str, list[float]]:
        """Each sample's iteration time in every process that recorded it: the log bench/pick_samples.py
        wrote (uvm); for swap, the passes' own logs, under both the pass's name and the sample's."""
        if self.mechanism == "uvm":
            return recordings(self.log)
        out = pass_recordings(self.passes())
        return {**out, **{self.prefix + name: ms for name, ms in out.items()}}


H100 = Gpu("H100", "", ROOT / "bench" / "results" / "h100", settled_on=7)
# the H200's uvm passes were recorded at fb75d65, whose pools placed the others anew and cut the workspaces
# to the stretches they left; from 718b054 (committed 2026-11-28T18:25:09Z) the engine cuts them only where
# that is needed (its swap passes were recorded again at b020eb6)
H200 = Gpu("H200", "h200-", ROOT / "bench" / "results" / "h200", settled_on=0, plans_name="conv_plans.json",
           cut_anew_until="2026-11-28T18:25:09Z")
GPUS = (H200, H100)
# the H200's swap sessions (bench/gpu/record_samples.py --set h200 --mechanism swap)
H200_SWAP = replace(H200, mechanism="swap", passes_name="passes_swap", log_name="record_samples_swap.json")
# a swap set is calibrated on this policy's run at 50%, as record_samples.py calibrates it for `tuned`
SWAP_CALIBRATION = "belady"


def named(folder: Path, prefix: str = "") -> list[Path]:
    """The measured sessions in `folder` named `prefix` + `<model>-b<batch>-...` (a pass's are unprefixed)."""
    pattern = re.compile(rf"{re.escape(prefix)}[a-z0-9]+-b\d+-[a-z]")
    return sorted(p for p in folder.glob("*.measured.vms") if pattern.match(p.name))


def pass_number(folder: Path) -> int:
    digits = "".join(c for c in folder.name if c.isdigit())
    return int(digits) if digits else 0


def typical_ms(s: Session) -> float:
    """A sample's iteration time as the app, `vmexplorer info` and docs/results.md say it: its typical
    iteration's (`records.spans.summarize`: the median one; of an even number, the lower middle)."""
    return float(s.summary["iteration_ns"]) / 1e6


def median_ms(session_or_timeline: object) -> float:
    tl = getattr(session_or_timeline, "timeline", session_or_timeline)
    return float(np.median(tl.timed_ns())) / 1e6  # type: ignore[attr-defined]


def share(s: Session) -> int:
    return round(share_of_footprint(s.plan.capacity, s.graph.footprint))


def recordings(log: Path = H100.log) -> dict[str, list[float]]:
    """Each sample's iteration time in every process that recorded it (bench/pick_samples.py's log)."""
    import json

    if not log.is_file():
        return {}
    return {e["session"]: [p["iteration_ms"] for p in e["passes"]] for e in json.loads(log.read_text())
            if e["exit"] == 0}


def pass_recordings(passes: Sequence[Path]) -> dict[str, list[float]]:
    """Each session's iteration time in every pass that recorded it, from each pass's own log
    (record_samples.json), in pass order."""
    import json

    out: dict[str, list[float]] = {}
    for folder in passes:
        log = folder / "record_samples.json"
        for row in json.loads(log.read_text()) if log.is_file() else []:
            if row["exit"] == 0 and (folder / row["session"]).is_file():
                out.setdefault(row["session"], []).append(row["iteration_ms"])
    return out


def median_recordings(passes: Sequence[Path]) -> list[Path]:
    """For each session the passes recorded, the recording with the median iteration time (of an even
    number, the lower of the middle two): what bench/pick_samples.py keeps, without copying it."""
    times: dict[str, list[tuple[float, Path]]] = {}
    for folder in passes:
        for name, ms in pass_recordings([folder]).items():
            times.setdefault(name, []).extend((m, folder) for m in ms)
    return sorted(sorted(rec, key=lambda mf: mf[0])[(len(rec) - 1) // 2][1] / name for name, rec in times.items())


@cache
def plan_tables(path: Path) -> dict[tuple[str, int], list[dict]]:
    """A GPU's timed plans by model and batch: each convolution problem's ops and plans."""
    return {(m["model"], m["batch"]): m["problems"] for m in json.loads(path.read_text())["models"]}


def timed_by_workspace(cost: CostModel, device: Session, gpu: Gpu) -> CostModel:
    """`cost` with its convolutions timed by their workspace from `gpu`'s table of cuDNN's plans, against
    the workspaces its `device` run gave them (that run timed them); `cost` where the GPU has no table of
    the model."""
    problems = plan_tables(gpu.results / gpu.plans_name).get((device.graph.model, device.graph.batch)) \
        if gpu.plans_name else None
    if not problems:
        return cost
    return replace(cost, workspace_ns=workspace_ns(executed(device, gpu), problems))


def executed(s: Session, gpu: Gpu) -> Graph:
    """The graph `s`'s run executed: its workspaces as the recording engine's pool cut them."""
    return executed_graph(s.graph, s.plan, cut=gpu.cut(s))


def predicted_ms(s: Session, cost: CostModel, gpu: Gpu) -> float:
    """The median iteration of `s`'s plan simulated under `cost`, its convolutions in the workspaces the
    run had where the model times them by workspace."""
    return median_ms(simulate(s.graph, s.plan, cost, executed(s, gpu) if cost.workspace_ns else None))


def calibrated(device: Session, paging: Session) -> CostModel:
    return calibrate(paging.graph, paging.plan, paging.timeline,
                     base=calibrate(device.graph, device.plan, device.timeline))


@cache
def calibrated_files(device: Path, paging: Path) -> CostModel:
    """`calibrated` on two recorded files; each pair is fitted once however many reports read it."""
    return calibrated(load_session(device), load_session(paging))


def pooled_on(pool: Sequence[Path], device: str, paging: str, label: str) -> tuple[CostModel, int] | None:
    """The cost model pooled over every pass in `pool` holding both recordings (file names), and how
    many passes that was; None where none does."""
    pairs = [(folder / device, folder / paging) for folder in pool
             if (folder / device).is_file() and (folder / paging).is_file()]
    if not pairs:
        return None
    return pooled([calibrated_files(d, u) for d, u in pairs],
                  f"pooled over {len(pairs)} recordings of {label}"), len(pairs)


def validate(samples: Sequence[Path], calibrate_on: str, pool: Sequence[Path] = (),
             adjust: Callable[[CostModel, str], CostModel] = lambda c, _: c,
             gpu: Gpu = H100, own: Callable[[CostModel, Session], CostModel] | None = None
             ) -> tuple[list[dict], list[str]]:
    """Predict every sample (of one GPU, `gpu`'s) of each model from one cost model fitted to its `device`
    run and its `calibrate_on` run at 50%. With `pool` (recording passes, a folder of sessions each), the
    model is fitted to each pass's recording of those two runs and pooled (each figure the median over
    them); without, to the samples themselves. `adjust` changes the fitted model first, given it and
    the model's label (to show what a part of it is worth); `own`, where given, changes it again for each
    predicted sample, given that sample (to put a part of the sample's own run in its place)."""
    sessions = [(p, load_session(p)) for p in samples]
    spread = gpu.recordings()
    rows, notes = [], []
    for key in sorted({s.graph.key for _, s in sessions}, key=str):
        mine = [(p, s) for p, s in sessions if s.graph.key == key]
        device = next((s for _, s in mine if s.plan.policy == "device"), None)
        paging = next((s for _, s in mine if s.plan.policy == calibrate_on and share(s) == 50
                       and s.plan.mechanism.value == gpu.mechanism), None)
        label = f"{mine[0][1].graph.model} b{mine[0][1].graph.batch}"
        if device is None or paging is None:
            notes.append(f"{label}: no measured device session or {calibrate_on} at 50%: not validated")
            continue
        names = [next(p.name.removeprefix(gpu.prefix) for p, s in mine if s is x) for x in (device, paging)]
        fitted = pooled_on(pool, names[0], names[1], f"{label} device and {calibrate_on} at 50%")
        cost, recorded = fitted or (calibrated(device, paging), 1)
        cost = adjust(timed_by_workspace(cost, device, gpu), label)
        for path, s in mine:
            measured = median_ms(s)
            calibration = s is device or s is paging
            mine_cost = own(cost, s) if own is not None and not calibration else cost
            predicted = predicted_ms(s, mine_cost, gpu)
            moves_nothing = elided(s.graph, s.plan)
            changed = non_default_options(s.plan.policy, s.plan.options)
            policy = " ".join([s.plan.policy, *(f"{k}={v}" for k, v in sorted(changed.items()))])
            rows.append({"model": label, "session": path.name, "policy": policy, "capacity_pct": share(s),
                         "measured_ms": measured, "predicted_ms": predicted, "error": predicted / measured - 1,
                         "recorded_ms": spread.get(path.name, []),
                         "iteration_spread": float(s.timeline.timed_ns().max() / s.timeline.timed_ns().min()),
                         "role": "calibration" if calibration else "predicted",
                         "demand_bytes": sum(m.nbytes for i, m in enumerate(s.plan.memops)
                                             if m.mode is Mode.SYNC and i not in moves_nothing),
                         "recordings": recorded,
                         "rates": {"prefetch": cost.prefetch_bytes_per_ns, "evict": cost.evict_bytes_per_ns,
                                   "fault": cost.fault_bytes_per_ns, "host_block": cost.host_block,
                                   "fault_by_kind": dict(cost.fault_bytes_per_ns_by_kind),
                                   "swap_in": cost.swap_to_device_bytes_per_ns,
                                   "swap_out": cost.swap_to_host_bytes_per_ns, "swap_call": cost.swap_call_ns}})
    return rows, notes


def summary_line(rows: list[dict]) -> tuple[str, int, int] | None:
    """The worst predicted session with its error, how many were within the goal, of how many."""
    predicted = [r for r in rows if r["role"] == "predicted"]
    if not predicted:
        return None
    worst = max(predicted, key=lambda r: abs(r["error"]))
    return (f"worst {worst['session'].removesuffix('.measured.vms')} {worst['error']:+.2%}",
            sum(abs(r["error"]) <= GOAL for r in predicted), len(predicted))


def eviction_rates(samples: Sequence[Path]) -> list[str]:
    """Per model, the bandwidth of evictions of 16 MiB or more made alone (synchronously, `uvm` at 50%)
    and beside compute (asynchronously, `autovm` at 50%): the model assumes they are the same. Then
    the eviction rate fitted to each paging sample on its own, the driver's (`uvm`) apart from the
    planned ones."""
    out = []
    by_model: dict[str, dict[str, float]] = {}
    for path in [p for p in samples if p.name.endswith("-50pct.measured.vms")]:
        s = load_session(path)
        tl, memops = timed_only(s.timeline), s.plan.memops
        rows = [r for r, i in enumerate(tl.memop_index) if memops[i].direction is Direction.TO_HOST
                and memops[i].mode is not Mode.FAULT and memops[i].nbytes >= 16 << 20]
        if rows and s.plan.policy in ("uvm", "autovm"):
            nbytes = sum(memops[tl.memop_index[r]].nbytes for r in rows)
            busy = float((tl.memop_end_ns - tl.memop_start_ns)[rows].sum())
            by_model.setdefault(f"{s.graph.model} b{s.graph.batch}", {})[s.plan.policy] = nbytes / busy
    for model, rates in by_model.items():
        if len(rates) == 2:
            out.append(f"- {model}, evictions of 16 MiB or more: {rates['uvm']:.1f} GB/s alone (`uvm`), "
                       f"{rates['autovm']:.1f} GB/s beside compute (`autovm`)")
    # each paging sample fitted on its own (on its model's device sample and itself): how far the rate
    # every prediction leans on moves from one process to the next. (A sample stores its GPU's model,
    # pooled over the passes, bench/calibrate_samples.py: not this.)
    fitted: dict[str, dict[str, list[float]]] = {}
    for path in [p for p in samples if p.name.endswith("pct.measured.vms")]:
        device = path.with_name(re.sub(r"-b(\d+)-.*", r"-b\1-device.measured.vms", path.name))
        s = load_session(path)
        if s.plan.policy != "device" and device.is_file():
            which = "`uvm` (the driver's evictions)" if s.plan.policy == "uvm" else "planned policies"
            fitted.setdefault(f"{s.graph.model} b{s.graph.batch}", {}).setdefault(which, []).append(
                calibrated_files(device, path).evict_bytes_per_ns)
    for model, by_kind in fitted.items():
        spans = [f"{which} {min(r):.1f}" + (f"-{max(r):.1f} GB/s over {len(r)} samples" if len(r) > 1 else " GB/s")
                 for which, r in sorted(by_kind.items())]
        if sum(len(r) for r in by_kind.values()) > 1:
            out.append(f"- {model}: the eviction rate fitted to each paging sample on its own (each a process of its "
                       f"own): {'; '.join(spans)}. A prediction carries the calibration run's to all")
    return out


def by_policy(predicted: list[dict]) -> str:
    """Each policy's worst predicted sample, for people: where the model goes wrong."""
    worst: dict[str, dict] = {}
    for r in predicted:
        if r["policy"] not in worst or abs(r["error"]) > abs(worst[r["policy"]]["error"]):
            worst[r["policy"]] = r
    return "; ".join(f"`{policy}` {r['error']:+.1%} ({r['model']} at {r['capacity_pct']}%)"
                     for policy, r in worst.items())


def report(rows: list[dict], notes: list[str], calibrate_on: str, gpu: Gpu = H100,
           samples: Sequence[Path] = ()) -> str:
    predicted = [r for r in rows if r["role"] == "predicted"]
    worst = max(predicted, key=lambda r: abs(r["error"]), default=None)
    pooled_over = max((r["recordings"] for r in rows), default=1)
    how = (f"each recorded in {pooled_over} processes (`{gpu.passes_dir.relative_to(ROOT)}`): the cost model is "
           "fitted to every recording of the two and pooled, each figure the median over the recordings "
           "(`vmexplorer.simulator.costmodel.pooled`)" if pooled_over > 1 else "the samples themselves")
    out = [f"Calibrated per model on its `device` run and its `{calibrate_on}` run at 50%, {how}; every other "
           "measured sample is predicted with that one cost model, its migration calls one at a time in issue order "
           "whichever their direction (`CostModel.serialises_directions`, as the UVM driver runs them), demand "
           "faults beside them. Generated by `bench/validate_simulator.py`.", "",
           "Each sample is the recording with the median iteration time of the processes that recorded it "
           "(`bench/pick_samples.py`); its measured time here is the median of its timed iterations, which a "
           "prediction is held to (for an even number of them, between the two middle ones, where the tables "
           "above give the lower middle, the iteration the app draws); the column after it gives the range "
           "over all of them.", "",
           *table_lines(rows), ""]
    fits: dict[str, dict] = {}
    for r in rows:
        fits.setdefault(r["model"], r["rates"])
    for model, f in fits.items():
        kinds = fault_rates_by_kind_text(f["fault_by_kind"])
        out.append(f"- {model}: prefetch {f['prefetch']:.1f} GB/s, eviction {f['evict']:.1f} GB/s, demand faults "
                   f"{f['fault']:.1f} GB/s over all ops" + (f" (by op kind, GB/s: {kinds})" if kinds else "")
                   + f", host blocking {f['host_block']:.2f}")
    if calibrate_on == "uvm":
        out.append("- A `uvm` run makes no asynchronous prefetch, so neither the prefetch bandwidth nor the host "
                   "blocking of prefetch calls can be fitted from it: they keep the defaults from the H100's probes "
                   f"({H100_DEFAULT.prefetch_bytes_per_ns:.0f} GB/s, {H100_DEFAULT.host_block:.1f}; docs/design.md, "
                   "\"Device facts\"), which every prediction of a planned policy above relies on.")
    out += [f"- {n}" for n in notes]
    out += eviction_rates(samples)
    if worst is not None:
        out += ["", *verdict_lines(predicted)]
    return "\n".join(out) + "\n"


def table_lines(rows: list[dict]) -> list[str]:
    """The validation table: each sample measured (and over all its recordings) against its prediction."""
    out = ["| model | session | policy | capacity | measured | all recordings | predicted | error | role |",
           "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        rec = r["recorded_ms"]
        span = f"{min(rec):.1f}-{max(rec):.1f} ms ({len(rec)})" if rec else "-"
        out.append(f"| {r['model']} | {r['session']} | {r['policy']} | {r['capacity_pct']}% | "
                   f"{r['measured_ms']:.1f} ms | {span} | {r['predicted_ms']:.1f} ms | {r['error']:+.1%} | "
                   f"{r['role']} |")
    return out


def verdict_lines(predicted: list[dict]) -> list[str]:
    """The worst prediction and how many met the goal, overall and per policy, then how far the
    measurements themselves spread (within a recording and between recordings)."""
    worst = max(predicted, key=lambda r: abs(r["error"]))
    within = sum(abs(r["error"]) <= GOAL for r in predicted)
    inside = sum(bool(r["recorded_ms"]) and min(r["recorded_ms"]) <= r["predicted_ms"] <= max(r["recorded_ms"])
                 for r in predicted)
    out = [f"Worst prediction: {worst['session']}, {worst['error']:+.1%}. Within {GOAL:.0%}: {within} of "
           f"{len(predicted)} predicted sessions; goal {'met' if within == len(predicted) else 'not met'}. "
           f"Inside the range of their own recordings: {inside} of {len(predicted)}.",
           f"Worst per policy: {by_policy(predicted)}."]
    wide = max(predicted, key=lambda r: r["iteration_spread"])
    gaps = [(max(r["recorded_ms"]) - min(r["recorded_ms"])) / float(np.median(r["recorded_ms"]))
            for r in predicted if len(r["recorded_ms"]) > 1]
    return out + [f"Within one recording the iterations themselves spread: the slowest of a predicted sample's "
                  f"iterations is up to {wide['iteration_spread']:.2f} times its fastest ({wide['session']})."
                  + (f" Between recordings, a predicted sample's slowest and fastest differ by {np.median(gaps):.0%} "
                     f"of its median (median over the predicted samples; up to {max(gaps):.0%}): "
                     + ("about the size of the goal." if np.median(gaps) >= GOAL / 2 else "far inside the goal.")
                     if gaps else "")]


def out_of_sample(passes: list[Path], calibrate_on: str, gpu: Gpu = H100) -> str:
    """The validation on recordings made after the model's form was settled (passes after
    `gpu.settled_on`) alone: calibrated on their recordings of the `device` and `calibrate_on` runs at
    50% (pooled), and each other configuration's measured time the median over their recordings of it,
    its prediction the median over their plans (`tuned` searched afresh in each pass)."""
    later = [p for p in passes if pass_number(p) > gpu.settled_on]
    if not later:
        return ""
    rows = []
    names = sorted({f.name for p in later for f in named(p)})
    for name in names:
        model_batch = "-".join(name.split("-")[:2])  # a pass's names are unprefixed
        device, paging = f"{model_batch}-device.measured.vms", f"{model_batch}-{calibrate_on}-50pct.measured.vms"
        if name in (device, paging):
            continue
        fitted = pooled_on(later, device, paging, "the later passes")
        mine = [load_session(p / name) for p in later if (p / name).is_file()]
        if fitted is None or not mine:
            continue
        its_device = load_session(next(p / device for p in later if (p / device).is_file()))
        cost = timed_by_workspace(fitted[0], its_device, gpu)
        measured = float(np.median([median_ms(s) for s in mine]))
        predicted = float(np.median([predicted_ms(s, cost, gpu) for s in mine]))
        rows.append((name.removesuffix(".measured.vms"), len(mine), measured, predicted, predicted / measured - 1))
    if not rows:
        return ""
    worst = max(rows, key=lambda r: abs(r[4]))
    within = sum(abs(r[4]) <= GOAL for r in rows)
    when = (f"was chosen looking at passes 1-{gpu.settled_on}. Passes {pass_number(later[0])}-"
            f"{pass_number(later[-1])} were recorded afterwards" if gpu.settled_on else
            f"was chosen before any of the {gpu.name}'s passes ({pass_number(later[0])}-{pass_number(later[-1])}) "
            f"was recorded")
    out = ["", f"**Out of sample.** The model's present form (a fault rate per op kind, calibration pooled over "
           f"recordings) {when}; calibrated on their own recordings of the `device` and `{calibrate_on}` runs at "
           f"50% and set against the median of their own recordings of every other configuration (predicted: the "
           f"median over their plans): {within} of {len(rows)} within {GOAL:.0%}, worst {worst[0]} {worst[4]:+.1%}.",
           "",
           "| session | recordings | measured (median) | predicted | error |", "|---|---:|---:|---:|---:|"]
    out += [f"| {n} | {k} | {m:.1f} ms | {pr:.1f} ms | {e:+.1%} |" for n, k, m, pr, e in rows]
    return "\n".join(out) + "\n"


def within_passes(passes: list[Path], calibrate_on: str, gpu: Gpu = H100) -> str:
    """The same validation inside each recording pass: calibrated on that pass's own device and paging
    runs, recorded minutes apart in the same conditions, so that what is left is the simulator's
    error and the variation between processes, without the variation between passes."""
    lines = []
    for folder in passes:
        line = summary_line(validate(named(folder), calibrate_on, gpu=gpu)[0])
        if line is not None:
            lines.append(f"{folder.name}: {line[1]} of {line[2]} within {GOAL:.0%}, {line[0]}")
    if not lines:
        return ""
    return (f"Calibrated and predicted within each recording pass instead (`{gpu.passes_dir.relative_to(ROOT)}`, "
            "every session of a pass recorded within minutes, one process each): " + "; ".join(lines) + ".\n")


def planned_eviction(gpu: Gpu, pool: Sequence[Path]) -> dict[str, float]:
    """Per model (its label), the eviction rate fitted to its `device` and `autovm` runs at 50% pooled
    over `pool`: evictions a plan issues beside compute rather than the driver's."""
    out = {}
    for device in [p for p in gpu.samples(ROOT / "sample_sessions") if p.name.endswith("-device.measured.vms")]:
        s = load_session(device)
        name = device.name.removeprefix(gpu.prefix)
        fitted = pooled_on(pool, name, name.replace("-device.", "-autovm-50pct."), "autovm at 50%")
        if fitted is not None:
            out[f"{s.graph.model} b{s.graph.batch}"] = fitted[0].evict_bytes_per_ns
    return out


def alternatives(gpu: Gpu, samples: Sequence[Path], calibrate_on: str, passes: list[Path]) -> list[tuple[str, list]]:
    """The same validation with one part of the calibration changed: what each part is worth."""
    planned = planned_eviction(gpu, passes) if calibrate_on == "uvm" else {}
    alts = [
        ("With evictions and prefetches at once, each on its own copy stream (`serialises_directions` off; the "
         "H100's driver was not probed for it, the H200's runs one direction at a time)",
         validate(samples, calibrate_on, passes, gpu=gpu,
                  adjust=lambda c, _: replace(c, serialises_directions=False))[0]),
        ("With one demand-fault rate for every op kind",
         validate(samples, calibrate_on, passes, gpu=gpu,
                  adjust=lambda c, _: replace(c, fault_bytes_per_ns_by_kind={}))[0]),
        ("Calibrated on the samples alone (one recording each, the median one), not pooled over the recordings",
         validate(samples, calibrate_on, gpu=gpu)[0])]
    if planned:
        alts.append((
            "With the eviction rate of planned evictions (fitted to each model's `device` and `autovm` runs at 50%, "
            "pooled: " + ", ".join(f"{m} {r:.1f} GB/s" for m, r in planned.items()) + ") in place of the `uvm` "
            "run's, all else as above",
            validate(samples, calibrate_on, passes, gpu=gpu, adjust=lambda c, label: replace(
                c, evict_bytes_per_ns=planned.get(label, c.evict_bytes_per_ns)))[0]))
    return alts


@cache
def fastest_eviction(gpu: Gpu) -> float:
    """The fastest rate a whole recording's big evictions reached (`calibrate.eviction_rate`) over every
    paging recording of `gpu`'s passes through uvm: the bound's eviction rate on that GPU
    (`CostModel.evict_fastest_bytes_per_ns`), as its evictions run faster on some machines than others."""
    rates = [eviction_rate(s.graph, s.plan, s.timeline) for folder in gpu.passes()
             for path in sorted(folder.glob("*pct.measured.vms")) if "-swap-" not in path.name
             for s in [load_session(path)]]
    return max(rates, default=0.0)


@cache
def big_evictions(path: Path) -> tuple[Eviction, ...]:
    """The evictions of `BIG` bytes or more in one recording's timed iterations."""
    s = load_session(path)
    return tuple(e for e in evictions(s.graph, s.plan, s.timeline) if e.nbytes >= BIG)


def by_bytes(evs: Sequence[Eviction], shares: Sequence[float] = (0.25, 0.5, 0.75)) -> list[float]:
    """Percentiles of single evictions' rates (GB/s), each byte counting once."""
    rates = np.array([e.bytes_per_ns for e in evs])
    order = np.argsort(rates)
    cum = np.cumsum(np.array([e.nbytes for e in evs], dtype=np.float64)[order])
    return [float(rates[order][min(np.searchsorted(cum, q * cum[-1]), len(rates) - 1)]) for q in shares]


def rate(evs: Sequence[Eviction]) -> str:
    """A class of evictions' median rate by bytes (GB/s), for people; "none" for an empty class. The median,
    as a planned offload's span also holds its wait for a migration the other way to end."""
    return f"{by_bytes(evs, (0.5,))[0]:.1f}" if evs else "none"


def eviction_states(gpu: Gpu) -> list[str]:
    """Per model, over every recording pass: single evictions' rates in the `uvm` run at 50% (the driver's)
    against the planned offloads of every other policy at 50%, as percentiles by bytes; then the `uvm`
    run's own evictions by what they evict, by what follows them and by how much of the tensor they
    move: whether any class of them runs at the planned offloads' rate."""
    out = []
    for device in [p for p in gpu.samples(ROOT / "sample_sessions") if p.name.endswith("-device.measured.vms")]:
        stem = device.name.removeprefix(gpu.prefix).removesuffix("-device.measured.vms")
        where = passes_folder(gpu.passes_dir)
        uvm = [e for f in where.glob(f"pass*/{stem}-uvm-50pct.measured.vms") for e in big_evictions(f)]
        planned = [e for f in where.glob(f"pass*/{stem}-*-50pct.measured.vms") if "-uvm-" not in f.name
                   for e in big_evictions(f) if e.planned]
        if not uvm or not planned:
            continue
        label = " ".join(stem.split("-"))
        pct = lambda evs: "/".join(f"{r:.1f}" for r in by_bytes(evs))  # noqa: E731
        classes = [(f"by how their pages last came to the device, demand-faulted in "
                    f"{rate([e for e in uvm if e.arrived_by == 'fault'])}, written there by their producer "
                    f"{rate([e for e in uvm if e.arrived_by == 'producer'])}, held since the iteration began "
                    f"{rate([e for e in uvm if e.arrived_by == 'before'])}"),
                   (f"by what they move, whole tensors {rate([e for e in uvm if e.whole])}, tails "
                    f"{rate([e for e in uvm if not e.whole])}"),
                   (f"by what follows, an op that faults {rate([e for e in uvm if e.before_fault])}, one that does "
                    f"not {rate([e for e in uvm if not e.before_fault])}")]
        out.append(f"- {label}, single evictions of 16 MiB or more over every pass (GB/s, 25th/50th/75th percentile "
                   f"by bytes): `uvm` at 50% {pct(uvm)} ({len(uvm)}); planned offloads at 50% {pct(planned)} "
                   f"({len(planned)}). The `uvm` run's own, median by bytes (GB/s): "
                   + "; ".join(classes) + f"; against the planned offloads' {rate(planned)}")
    return out


def attribution(gpu: Gpu, samples: Sequence[Path], calibrate_on: str, passes: list[Path]) -> list[str]:
    """Where the error is: the validation again with one part of the calibrated model replaced, for each
    predicted sample, by what its own run shows (the model fitted to it alone, on its device sample)."""
    parts = [("its eviction rate", "evict_bytes_per_ns"), ("its prefetch rate", "prefetch_bytes_per_ns"),
             ("its host blocking", "host_block")]
    fits = {}
    for path in samples:
        device = path.with_name(re.sub(r"-b(\d+)-.*", r"-b\1-device.measured.vms", path.name))
        if device.is_file() and device != path:
            p = load_session(path).plan
            fits[(p.key, p.policy, p.capacity, p.mechanism)] = calibrated_files(device, path)
    out = []
    for what, field in parts:
        def own(c: CostModel, s: Session, field: str = field) -> CostModel:
            fit = fits.get((s.plan.key, s.plan.policy, s.plan.capacity, s.plan.mechanism))
            return c if fit is None else replace(c, **{field: getattr(fit, field)})

        line = summary_line(validate(samples, calibrate_on, passes, gpu=gpu, own=own)[0])
        if line is not None:
            out.append(f"{what} {line[1]} of {line[2]} within {GOAL:.0%} ({line[0]})")
    return out


def evidence(gpu: Gpu, samples: Sequence[Path], calibrate_on: str) -> str:
    """What the recordings say about the eviction rate the predictions lean on (validation.md only)."""
    parts = attribution(gpu, samples, calibrate_on, gpu.passes())
    text = ("\n**Where the error is.** Each predicted sample again, with one part of the calibrated model replaced by "
            "what that sample's own run shows (the model fitted to its run alone): "
            + "; ".join(parts) + ".\n") if parts else ""
    states = eviction_states(gpu)
    if states:
        text += ("\n**The eviction rate, eviction by eviction.** The rate a calibration fits is an average over a run; "
                 "single evictions spread around it, within a run and between runs:\n\n" + "\n".join(states)
                 + "\n" + persistence(gpu))
        if gpu.name == "H200":
            text += ("\nWhat sets the two states, probed on six lease machines, and how the simulator does on a "
                     "machine slow throughout: `bench/results/h200/eviction_states.md` "
                     "(notes/eviction-rate-states.md).\n")
    return text


def persistence(gpu: Gpu) -> str:
    """How far the eviction rate of a recording's first timed iteration foretells its other iterations':
    what a probe made as each run begins could tell of the run."""
    pairs = []
    for path in [p for folder in gpu.passes() for p in named(folder) if p.name.endswith("pct.measured.vms")]:
        s = load_session(path)
        tl = timed_only(s.timeline)
        per = [rate_of(tl, s.plan.memops, it) for it in range(tl.timed_iterations)]
        if len(per) > 2 and all(r > 0 for r in per):
            pairs.append((per[0], float(np.median(per[1:]))))
    if len(pairs) < 3:
        return ""
    first, rest = np.array(pairs).T
    return (f"- Over the {len(pairs)} paging recordings, the eviction rate (evictions of 16 MiB or more, bytes over "
            f"busy time) of a recording's first timed iteration against the median of its others: correlation "
            f"{np.corrcoef(first, rest)[0, 1]:.2f}, the two {np.median(np.abs(rest / first - 1)):.0%} apart (median); "
            f"between recordings that rate varies by {rest.std() / rest.mean():.0%} (standard deviation over mean)\n")


def rate_of(tl: Timeline, memops: tuple[MemOp, ...], iteration: int) -> float:
    """Bytes over busy time (GB/s) of one iteration's evictions of `BIG` bytes or more."""
    rows = [r for r in np.flatnonzero(tl.memop_iteration == iteration)
            if memops[tl.memop_index[r]].direction is Direction.TO_HOST
            and memops[tl.memop_index[r]].mode is not Mode.FAULT and memops[tl.memop_index[r]].nbytes >= BIG]
    busy = float(sum(tl.memop_end_ns[r] - tl.memop_start_ns[r] for r in rows))
    return sum(memops[tl.memop_index[r]].nbytes for r in rows) / busy if busy else 0.0


def section(gpu: Gpu, samples: Sequence[Path], calibrate_on: str) -> str:
    """The validation on one GPU's samples and passes, with what each part of the calibration is worth."""
    passes = gpu.passes()
    rows, notes = validate(samples, calibrate_on, passes, gpu=gpu)
    text = report(rows, notes, calibrate_on, gpu, samples)
    for what, alt in alternatives(gpu, samples, calibrate_on, passes):
        line = summary_line(alt)
        if line is not None:
            text += f"{what}: {line[0]}; {line[1]} of {line[2]} within {GOAL:.0%}.\n"
    other = "autovm" if calibrate_on == "uvm" else "uvm"
    line = summary_line(validate(samples, other, passes, gpu=gpu)[0])
    if line is not None:
        text += (f"Calibrating on the `{other}` run at 50% instead: {line[0]}; {line[1]} of {line[2]} within "
                 f"{GOAL:.0%}. The `{other}` runs show "
                 + ("no demand faults on some models (ResNet-50's autovm plan has none), so the fault throughput "
                    "that every uvm prediction needs stays a default there." if other == "autovm" else
                    "no asynchronous prefetch.") + "\n")
    text += within_passes(passes, calibrate_on, gpu)
    text += out_of_sample(passes, calibrate_on, gpu)
    return text


def _processes(n: int) -> str:
    return f"{n} process" + ("es" if n != 1 else "")


def swap_section(gpu: Gpu, samples: Sequence[Path], calibrate_on: str = SWAP_CALIBRATION) -> str:
    """The validation on a swap set (`gpu.mechanism` swap): calibrated per model on its `device` run and
    its `calibrate_on` run through swap at 50%, pooled over the set's passes, every other swap session
    predicted; the table as for uvm, the copy rates fitted, the verdict and the same inside each pass."""
    passes = gpu.passes()
    rows, notes = validate(samples, calibrate_on, passes, gpu=gpu)
    predicted = [r for r in rows if r["role"] == "predicted"]
    if not rows:
        return ""
    where = gpu.passes_dir.relative_to(ROOT)
    span = f"pass{pass_number(passes[0])}-pass{pass_number(passes[-1])}" if len(passes) > 1 else passes[0].name
    picked = any(p.name.startswith(gpu.prefix) and "-swap-" in p.name for p in samples)
    source = (f"`sample_sessions/{gpu.prefix}*-swap-*`, each the median recording of the processes that recorded "
              f"it (`bench/pick_samples.py`; log `{gpu.log.relative_to(ROOT)}`)" if picked else
              f"each configuration's median recording over the passes in `{where}` ({span}; the pick "
              "`bench/pick_samples.py` makes, read in place: no swap sample was in `sample_sessions/`)")
    out = [f"Calibrated per model on its `device` run and its `{calibrate_on}` run through swap at 50% (the first "
           f"capacity; the calibration `bench/gpu/record_samples.py --mechanism swap` makes with `vmexplorer "
           f"calibrate`, which fits the pinned copies' rate each way and the fixed cost of a copy call), each fitted "
           f"to every recording of the two in `{where}` ({_processes(max(r['recordings'] for r in rows))}) and "
           "pooled as for uvm; every other swap session is predicted with that one cost model at its swap rates "
           "(`CostModel.for_mechanism`: a copy in on demand at the copy rate, both directions at once, no host "
           "blocking). The `device` row is its passes' median recording. The samples are " + source
           + ". Generated by `bench/validate_simulator.py`.", "", *table_lines(rows), ""]
    fits: dict[str, dict] = {}
    for r in rows:
        fits.setdefault(r["model"], r["rates"])
    out += [f"- {model}: pinned copies to the device {f['swap_in']:.1f} GB/s, to the host {f['swap_out']:.1f} GB/s, "
            f"{f['swap_call'] / 1e3:.1f} us fixed per copy call" for model, f in fits.items()]
    out += [f"- {n}" for n in notes]
    if predicted:
        out += ["", *verdict_lines(predicted), *on_demand(predicted)]
    return "\n".join(out) + "\n" + within_passes(passes, calibrate_on, gpu)


def on_demand(predicted: list[dict]) -> list[str]:
    """Where a swap validation's error is: the plans whose every copy is planned against those the repair
    gave synchronous copies on demand, which the simulator runs on their direction's copy engine after the
    copies queued there while the engine issues them on the compute stream."""
    planned = [r for r in predicted if not r["demand_bytes"]]
    demand = [r for r in predicted if r["demand_bytes"]]
    if not planned or not demand:
        return []

    def worst(rows: list[dict]) -> str:
        r = max(rows, key=lambda r: abs(r["error"]))
        return f"{r['error']:+.1%} ({r['session'].removesuffix('.measured.vms')})"

    big = max(demand, key=lambda r: r["demand_bytes"])
    return [f"**Where the error is.** The {len(planned)} predicted plans whose every copy is planned: "
            f"{sum(abs(r['error']) <= GOAL for r in planned)} within {GOAL:.0%}, worst {worst(planned)}. The "
            f"{len(demand)} with copies on demand (synchronous, inserted by the repair): "
            f"{sum(abs(r['error']) <= GOAL for r in demand)} within {GOAL:.0%}, worst {worst(demand)}; the most on "
            f"demand, {big['session'].removesuffix('.measured.vms')} with {big['demand_bytes'] / 2**30:.2f} GiB copied "
            f"on demand per iteration (both ways), is predicted {big['error']:+.1%}. A tensor the repair copies in "
            "and straight back out before any op moves nothing in the engine (its host copy is already current), "
            "and the simulator and calibration skip those copies as the engine does (`plan.stays.elided`)."]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibrate-on", choices=("uvm", "autovm"), default="uvm")
    ap.add_argument("--samples", type=Path, default=ROOT / "sample_sessions")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "validation.md")
    ap.add_argument("--readme", type=Path, help="also put the tables between <!-- validation:start/end --> here")
    ap.add_argument("--check", action="store_true",
                    help="with --readme: only say whether its tables are up to date (exit 1 if not)")
    args = ap.parse_args()
    parts = [(gpu, section(gpu, gpu.samples(args.samples), args.calibrate_on)) for gpu in GPUS
             if gpu.samples(args.samples)]
    intro = ("Per GPU, each on its own samples and recording passes: "
             + ", then ".join(f"the {g.name}'s" for g, _ in parts)
             + ". A cost model fitted on one GPU predicts that GPU's runs alone.\n")

    swap = swap_section(H200_SWAP, H200_SWAP.samples(args.samples)) if H200_SWAP.passes() else ""

    def text(level: str, full: bool = False) -> str:
        # the evidence goes to FILE alone: docs/results.md carries the tables and what each part is worth
        return intro + "".join(f"\n{level} On the {gpu.name}\n\n{body}"
                               + (evidence(gpu, gpu.samples(args.samples), args.calibrate_on) if full else "")
                               for gpu, body in parts) + (
            f"\n{level} On the {H200_SWAP.name}, through swap\n\n{swap}" if swap else "")

    if args.readme is not None:
        readme = args.readme.read_text()
        start, end = "<!-- validation:start -->", "<!-- validation:end -->"
        if start not in readme or end not in readme:
            print(f"{args.readme} has no {start} ... {end} section", file=sys.stderr)
            return 2
        before, rest = readme.split(start, 1)
        new = before + start + "\n" + text("###") + end + rest.split(end, 1)[1]
        if args.check:
            return check(readme, new, f"python -m bench.validate_simulator --readme {args.readme}")
        args.readme.write_text(new)
    full = text("##", full=True)
    print(full, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("# The simulator against the measured samples\n\n" + full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
