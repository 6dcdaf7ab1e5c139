"""Store one cost model per GPU and model in every measured sample session of it, and the bound it gives.

    python -m bench.calibrate_samples [DIR] [--check]

A configuration must read the same everywhere: the bound a class is told in the lesson, the one on the
bars, `vmexplorer info`'s, the paging cliff's and docs/results.md's. So every sample of one GPU and model
carries one model, the one docs/results.md holds them against (`results_table.bound_model`): fitted to
the model's `device` and `autovm` runs at 50%, pooled over the GPU's recording passes (the rates of
planned transfers, which any schedule can have), with the pinned copies' rates fitted to its `device`
and `belady` runs through swap at 50% where the GPU has them. Each sample's bound is worked out again
under it. The planning reports a sample was recorded with (a `tuned` search's, a copy order's) quote
times under the model of the recording; they are dropped, as their figures would disagree with the
session's own. The app then simulates a sample's edits with its GPU's model, which the simulator's
validation checks against every sample out of sample (docs/results.md).

`--check` writes nothing and says which samples do not carry their model (exit status 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from bench.results_table import bound_model
from bench.validate_simulator import GPUS, H200_SWAP, SWAP_CALIBRATION, Gpu, named, pooled_on, timed_by_workspace
from vmexplorer.session import Session, bound_for, load_session, save_session
from vmexplorer.simulator import CostModel
from vmexplorer.simulator.costmodel import SWAP_RATES

ROOT = Path(__file__).resolve().parents[1]
# the planning reports a recording stored, whose figures were the recording's cost model's
STALE = ("tuned:", "tuned under swap:", "the copy streams in earliest-deadline order")


def models(gpu: Gpu, folder: Path) -> dict[tuple[str, int], tuple[CostModel, list[Path]]]:
    """Each model's (and batch's) cost model on `gpu`, and its samples in `folder`."""
    samples = named(folder, gpu.prefix)  # its uvm and its swap samples
    by_model: dict[tuple[str, int], list[tuple[Path, Session]]] = {}
    for path in samples:
        s = load_session(path)
        by_model.setdefault((s.graph.model, s.graph.batch), []).append((path, s))
    out = {}
    for key, mine in by_model.items():
        device = next((p for p, s in mine if s.plan.policy == "device"), None)
        if device is None:
            continue
        uvm = bound_model(gpu, device, [s for _, s in mine])
        if uvm is None:
            continue
        # "pooled over 7 recordings of ...": how many passes the model's runs came from
        name = f"the {gpu.name}'s {key[0]} b{key[1]}: its device and autovm runs at 50%, {uvm.name.split(' of ')[0]}"
        swap = _copies(device.name.removeprefix(gpu.prefix)) if gpu.name == H200_SWAP.name else None
        if swap is not None:
            uvm = dataclasses.replace(uvm, **{f: getattr(swap[0], f) for f in SWAP_RATES})
            name += f"; copies: its device and {SWAP_CALIBRATION} runs through swap at 50%, pooled over {swap[1]}"
        # its convolutions timed by their workspace, where the GPU has its plans timed (`timed_by_workspace`)
        uvm = timed_by_workspace(uvm, dict(mine)[device], gpu)
        out[key] = (dataclasses.replace(uvm, name=name), [p for p, _ in mine])
    return out


def _copies(device: str) -> tuple[CostModel, int] | None:
    paging = device.replace("-device.", f"-{SWAP_CALIBRATION}-swap-50pct.")
    return pooled_on(H200_SWAP.passes(), device, paging, f"device and {SWAP_CALIBRATION} through swap at 50%")


def recalibrated(s: Session, cost: CostModel) -> Session:
    """`s` with its GPU's model, the bound it gives, and no planning report of another model."""
    notes = tuple(n for n in s.notes if not n.startswith(STALE))
    return dataclasses.replace(s, cost_model=cost, bound=bound_for(s.graph, s.plan, cost), notes=notes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, default=ROOT / "sample_sessions")
    ap.add_argument("--check", action="store_true", help="write nothing; say which samples are not calibrated so")
    args = ap.parse_args()
    stale = []
    for gpu in GPUS:
        for (model, batch), (cost, paths) in sorted(models(gpu, args.folder).items()):
            for path in sorted(paths):
                s = load_session(path)
                again = recalibrated(s, cost)
                if (again.cost_model, again.bound, again.notes) == (s.cost_model, s.bound, s.notes):
                    continue
                stale.append(path.name)
                if not args.check:
                    save_session(again, path, force=True)
            print(f"{gpu.name} {model} b{batch}: {len(paths)} samples, {cost.name}; eviction "
                  f"{cost.evict_bytes_per_ns:.1f} GB/s (the bound's {cost.fastest_evict_bytes_per_ns:.1f}), "
                  f"prefetch {cost.prefetch_bytes_per_ns:.1f} GB/s, copies "
                  f"{cost.swap_to_host_bytes_per_ns:.1f}/{cost.swap_to_device_bytes_per_ns:.1f} GB/s")
    if args.check:
        print("up to date" if not stale else f"{len(stale)} samples do not carry their GPU's model: {', '.join(stale)}")
        return 1 if stale else 0
    print(f"rewrote {len(stale)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
