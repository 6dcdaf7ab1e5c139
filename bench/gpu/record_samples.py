"""Record the measured sample sessions on the GPU, each with `vmexplorer run` in a process of its own.

    python3 -m bench.gpu.record_samples [--set fifty|sweep|all|h200] [--mechanism uvm|swap] [--iterations 5]
                                        [--out DIR] [--collectors PARTS] [--log NAME]

`fifty`: AlexNet b256, VGG-19 b64 and ResNet-50 b64 under `device` (the whole footprint), `uvm` and
`autovm` at 50% of each footprint. `sweep`: VGG-19 b64 under `uvm` and `autovm` at 30, 40, 60, 75 and
90%. `h200`: every policy: `device` for AlexNet b256, VGG-19 b64 and ResNet-50 b64; `uvm`, `autovm`,
`belady`, `vdnn` and `tuned` at 50% of each footprint and VGG-19 b64 at 60, 75 and 90% too. Within a model
`device` and `uvm` at 50% come first and are calibrated (`vmexplorer calibrate`, GPU-free, into
DIR/cost_models/, logged in DIR/calibrate.json), and that model's `tuned` runs search with that cost model
(`vmexplorer run --cost-model`): the GPU's own rates; VGG-19's model fitted at 50% serves every capacity.
Sessions go to DIR (default $OUT/samples, else sample_sessions/) as
`<model>-b<batch>-<policy>[-<pct>pct].measured.vms`; `record_samples.json` next to them says, for each,
the command, its exit status, its wall time and, for a refusal, `vmexplorer run`'s one-line reason
(a capacity below the model's minimum is refused, not recorded). The log is rewritten after every
session, so a pass cut short keeps what it recorded.

`--mechanism swap` records the same configurations through the swap mechanism (a device pool of the
capacity, pinned copies; `vmexplorer run --mechanism swap`), named `<model>-b<batch>-<policy>-swap-<pct>pct
.measured.vms`; `uvm`, which only runs through the driver, is left out. With `--set h200` each model's `device`
comes first as before, then `belady` at its first capacity, which is calibrated on it (the swap copy rates
of this GPU, `vmexplorer calibrate`), then the rest with that calibration (`vmexplorer run --cost-model`):
`tuned` searches with it, and every plan's copy order (`plan.copies`) is picked with it.

`--collectors PARTS` is passed to `vmexplorer run`. Each run times its iterations without CUPTI's
unified-memory counters and counts one more iteration after them (`vmexplorer run --counted`), so the
samples' iteration times carry no counting cost and docs/results.md's results table is read from them.

The H100 samples in the repo come from fifteen passes (`--iterations 8 --out bench/results/h100/passes/passN`,
N = 1..15, on the device; an odd number, so each median is a recording), then, on any machine, from the
repository root, `python -m bench.pick_samples` (each configuration's median recording into
sample_sessions/), `python -m bench.calibrate_samples`, and `python -m bench.reduce_passes` (the passes
without the records nothing reads from them).

The H200 samples come from seven passes of `--set h200` at the defaults (5 timed iterations after 1
warmup, then 1 counted), one pass per device call (`--out /tmp/passN`, the folder brought back as one
archive, the limit on files back from a call being a handful), unpacked into
bench/results/h200/passes/passN; then `python -m bench.pick_samples bench/results/h200/passes/pass*
--prefix h200- --log bench/results/h200/record_samples.json` (sample_sessions/ holds both GPUs: the
H200's named `h200-...`), `python -m bench.calibrate_samples` (every GPU's samples at once, one cost
model per GPU and model) and `python -m bench.reduce_passes`.

The H200's swap samples come from five passes of `--set h200 --mechanism swap` at the same defaults, one
pass per device call in the same way, unpacked into bench/results/h200/passes_swap/passN; then
`python -m bench.pick_samples bench/results/h200/passes_swap/pass* --prefix h200- --only '*-swap-*' --log
bench/results/h200/record_samples_swap.json` (the passes' `device` runs, each the base of its pass's swap
calibration, are not picked: the `device` samples stay those of the uvm passes),
`python -m bench.calibrate_samples` (the pinned copies' rates fitted to each model's `device` and `belady`
runs through swap at 50%, as the pass calibrates `belady`) and
`python -m bench.reduce_passes bench/results/h200/passes_swap/pass*`.

Each set is then committed as one archive: `python -m bench.passes pack bench/results/h200/passes_swap`
(DIR.tar; the scripts read it unpacked). To add passes to a packed set, `python -m bench.passes unpack
DIR` says where its passes are: copy them back into DIR with the new ones, pick, reduce, pack again.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONV_PLANS = ROOT / "bench" / "results" / "h200" / "conv_plans.json"  # cuDNN's plans timed (conv_workspaces.py --plans)
Case = tuple[str, int, str, int | None]  # model, batch, policy, % of the footprint (None: `device`)
FIFTY: list[Case] = [(m, b, p, 50 if p != "device" else None)
                     for m, b in (("alexnet", 256), ("vgg19", 64), ("resnet50", 64))
                     for p in ("device", "uvm", "autovm")]
SWEEP: list[Case] = [("vgg19", 64, p, pct) for pct in (30, 40, 60, 75, 90) for p in ("uvm", "autovm")]
H200_MODELS = (("alexnet", 256, (50,)), ("vgg19", 64, (50, 60, 75, 90)), ("resnet50", 64, (50,)))
H200_POLICIES = ("uvm", "autovm", "belady", "vdnn", "tuned")
SWAP_POLICIES = ("belady", "autovm", "vdnn", "tuned")  # belady first: calibrated, then tuned searches with it


def name(model: str, batch: int, policy: str, pct: int | None, mechanism: str = "uvm") -> str:
    through = "-swap" if mechanism == "swap" and policy != "device" else ""
    return f"{model}-b{batch}-{policy}{through}{f'-{pct}pct' if pct is not None else ''}.measured.vms"


def record(model: str, batch: int, policy: str, pct: int | None, out: Path, iterations: int,
           collectors: str | None = None, cost_model: Path | None = None, mechanism: str = "uvm") -> dict:
    mechanism = "uvm" if policy == "device" else mechanism
    path = out / name(model, batch, policy, pct, mechanism)
    cmd = [sys.executable, "-m", "vmexplorer", "run", "--model", model, "--batch", str(batch),
           "--capacity", f"{pct}%" if pct is not None else "100%", "--policy", policy,
           "--iterations", str(iterations), "--warmup", "1", "--out", str(path), "--force", "--format", "json",
           "--note", "recorded by bench/gpu/record_samples.py", "--mechanism", mechanism,
           *(["--collectors", collectors] if collectors else []),
           *(["--cost-model", str(cost_model)] if cost_model else [])]
    t = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    row = {"session": path.name, "command": " ".join(["vmexplorer", *cmd[3:]]), "exit": done.returncode,
           "wall_s": round(time.monotonic() - t, 1)}
    if done.returncode == 0:
        summary = json.loads(done.stdout)["summary"]
        row.update(bytes=path.stat().st_size, iteration_ms=summary["iteration_ns"] / 1e6,
                   collector_flush_ms=summary.get("measured_collector_flush_ns", 0) / 1e6)
        if mechanism == "swap":  # the pool the run took, against its capacity (vmexplorer info shows it too)
            from vmexplorer.session import load_session

            row["swap_pool"] = load_session(path).environment.get("swap_pool", "")
    else:
        row["message"] = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
    print(json.dumps(row), flush=True)
    return row


def calibrated(device: Path, paging: Path, out: Path) -> dict:
    """`vmexplorer calibrate` of a paging session on its model's `device` session, into out/cost_models/,
    its convolutions timed by their workspace from the H200's table of cuDNN's plans (`--conv-plans`), so
    that the plans made with it choose less room or cut workspaces by time (`policies.fit_pool`), as the
    app's plans do under the samples' models (before b020eb6's recordings it had none: they chose less room)."""
    target = out / "cost_models" / paging.name.replace(".measured.vms", ".calibrated.vms")
    target.parent.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "vmexplorer", "calibrate", str(paging), "--device", str(device),
           "--out", str(target), "--force", "--format", "json", "--conv-plans", str(CONV_PLANS)]
    t = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    row = {"cost_model": str(target.relative_to(out)), "exit": done.returncode,
           "wall_s": round(time.monotonic() - t, 1)}
    if done.returncode != 0:
        row["message"] = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
    print(json.dumps(row), flush=True)
    return row


def h200(out: Path, iterations: int, collectors: str | None, log: str) -> list[dict]:
    """The `h200` set, model by model: `device`, `uvm` at 50%, their calibration, then the rest, `tuned`
    searching with that calibration; the log rows as `record` makes them. A model whose calibration
    failed records no `tuned` (its row says why) rather than one searched with another GPU's rates."""
    rows: list[dict] = []
    calibrations: list[dict] = []
    for model, batch, pcts in H200_MODELS:
        for first, pct in (("device", None), ("uvm", pcts[0])):
            rows.append(record(model, batch, first, pct, out=out, iterations=iterations, collectors=collectors))
            write_log(out, rows, log)
        device, uvm = out / name(model, batch, "device", None), out / name(model, batch, "uvm", pcts[0])
        fit = calibrated(device, uvm, out) if rows[-1]["exit"] == rows[-2]["exit"] == 0 else {"exit": 1}
        calibrations.append(fit)
        (out / "calibrate.json").write_text(json.dumps(calibrations, indent=1))
        for pct in pcts:
            for policy in H200_POLICIES:
                if (policy, pct) == ("uvm", pcts[0]):
                    continue
                if policy == "tuned" and fit["exit"] != 0:
                    rows.append({"session": name(model, batch, policy, pct), "command": "", "exit": 1,
                                 "wall_s": 0.0, "message": "not recorded: no calibrated cost model to search with"})
                else:
                    cost = out / str(fit["cost_model"]) if policy == "tuned" else None
                    rows.append(record(model, batch, policy, pct, out=out, iterations=iterations,
                                       collectors=collectors, cost_model=cost))
                write_log(out, rows, log)
    return rows


def h200_swap(out: Path, iterations: int, collectors: str | None, log: str,
              models: tuple[tuple[str, int, tuple[int, ...]], ...] = H200_MODELS) -> list[dict]:
    """The `h200` set through swap, model by model: `device`, `belady` at the first capacity, the latter
    calibrated on the former (the swap copy rates), then the rest with that calibration: `tuned` searches
    with it and every plan's copy order is picked with it (the first `belady`'s with the default model)."""
    rows: list[dict] = []
    calibrations: list[dict] = []
    for model, batch, pcts in models:
        for first, pct in (("device", None), (SWAP_POLICIES[0], pcts[0])):
            rows.append(record(model, batch, first, pct, out=out, iterations=iterations, collectors=collectors,
                               mechanism="swap"))
            write_log(out, rows, log)
        device, swap = out / name(model, batch, "device", None), out / name(model, batch, SWAP_POLICIES[0], pcts[0],
                                                                             "swap")
        fit = calibrated(device, swap, out) if rows[-1]["exit"] == rows[-2]["exit"] == 0 else {"exit": 1}
        calibrations.append(fit)
        (out / "calibrate.json").write_text(json.dumps(calibrations, indent=1))
        for pct in pcts:
            for policy in SWAP_POLICIES:
                if (policy, pct) == (SWAP_POLICIES[0], pcts[0]):
                    continue
                if policy == "tuned" and fit["exit"] != 0:
                    rows.append({"session": name(model, batch, policy, pct, "swap"), "command": "", "exit": 1,
                                 "wall_s": 0.0, "message": "not recorded: no calibrated cost model to search with"})
                else:  # the calibration also picks each swap plan's copy order (`plan.copies`)
                    cost = out / str(fit["cost_model"]) if fit["exit"] == 0 else None
                    rows.append(record(model, batch, policy, pct, out=out, iterations=iterations,
                                       collectors=collectors, cost_model=cost, mechanism="swap"))
                write_log(out, rows, log)
    return rows


def write_log(out: Path, rows: list[dict], log: str = "record_samples.json") -> None:
    """Rewrite the log after every session, so a pass cut short keeps what it recorded."""
    (out / log).write_text(json.dumps(rows, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=("fifty", "sweep", "all", "h200"), default="all")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--collectors", help="passed to vmexplorer run (default: every collector)")
    ap.add_argument("--log", default="record_samples.json", help="the log's name in DIR")
    ap.add_argument("--models", help="with --set h200 --mechanism swap, only these models at these capacities: "
                    "MODEL:BATCH:PCT[/PCT...],... (as vgg19:64:50/60)")
    ap.add_argument("--mechanism", choices=("uvm", "swap"), default="uvm",
                    help="how the paging runs move bytes (swap leaves uvm out: it runs through the driver only)")
    args = ap.parse_args()
    out = args.out or (Path(os.environ["OUT"]) / "samples" if os.environ.get("OUT") else ROOT / "sample_sessions")
    out.mkdir(parents=True, exist_ok=True)
    if args.set == "h200" and args.mechanism == "swap" and args.models:
        chosen = tuple((m, int(b), tuple(int(p) for p in pcts.split("/")))
                       for m, b, pcts in (spec.split(":") for spec in args.models.split(",")))
        h200_swap(out, args.iterations, args.collectors, args.log, chosen)
        return 0
    if args.set == "h200":
        (h200_swap if args.mechanism == "swap" else h200)(out, args.iterations, args.collectors, args.log)
        return 0
    todo = {"fifty": FIFTY, "sweep": SWEEP, "all": FIFTY + SWEEP}[args.set]
    if args.mechanism == "swap":  # `uvm` only runs through the driver
        todo = [case for case in todo if case[2] != "uvm"]
    log = out / args.log
    old = json.loads(log.read_text()) if log.exists() else []
    rows: list[dict] = []
    for model, batch, policy, pct in todo:
        rows.append(record(model, batch, policy, pct, out=out, iterations=args.iterations, collectors=args.collectors,
                           mechanism=args.mechanism))
        keep = [r for r in old if r["session"] not in {row["session"] for row in rows}]
        log.write_text(json.dumps(keep + rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
