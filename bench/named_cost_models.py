"""Write the named cost models the package ships (`--cost-model h200`, `--cost-model h100`) from the samples.

    python -m bench.named_cost_models [--check]

Each GPU's file (vmexplorer/simulator/calibrated/NAME.json) holds the cost model its measured samples carry,
one per graph they ran (`bench.calibrate_samples` stores it in every sample of a GPU and graph). The files
are never edited by hand: run this after the samples are calibrated again. `--check` writes nothing and says
which file differs from what the samples give (exit status 1); tests/simulator/test_named_cost_models.py
runs the same check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmexplorer.session import SessionError, load_session
from vmexplorer.simulator import CostModel
from vmexplorer.simulator.named import DATA, GPUS, encode

SAMPLES = Path(__file__).resolve().parents[1] / "sample_sessions"


def files(folder: Path = SAMPLES) -> dict[str, str]:
    """Each named model's file text, from the measured samples in `folder`."""
    by_gpu: dict[str, dict[tuple[tuple[str, int, int], bool], CostModel]] = {gpu: {} for gpu in GPUS.values()}
    for path in sorted(folder.glob("*.measured.vms")):
        try:
            s = load_session(path)
        except SessionError:
            continue
        gpu = str(s.environment.get("gpu", ""))
        if gpu not in by_gpu or s.cost_model is None:
            continue
        key = (s.graph.key, s.graph.workspaces)
        kept = by_gpu[gpu].setdefault(key, s.cost_model)
        if kept != s.cost_model:
            raise SystemExit(f"{path.name} carries another model than its GPU's other samples of {key}: "
                             "run `python -m bench.calibrate_samples` first")
    return {name: encode(gpu, [(key, ws, cost) for (key, ws), cost in by_gpu[gpu].items()])
            for name, gpu in GPUS.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 where a file differs")
    args = p.parse_args(argv)
    stale = []
    for name, text in files().items():
        path = DATA / f"{name}.json"
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'differs from the samples' if args.check else 'wrote'}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
