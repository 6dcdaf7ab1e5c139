"""Keep, for each sample, the recording whose iteration time is the median of its repeats.

    python -m bench.pick_samples DIR [DIR ...] [--samples sample_sessions] [--log FILE] [--prefix GPU-]
                                 [--only GLOB]

Each DIR is one pass of `bench/gpu/record_samples.py --out DIR`, as it wrote it (before
`bench/reduce_passes.py`): every configuration once, each in a process of its own. One configuration's
iteration time differs markedly from process to process (bench/results/validation.md gives the
spread), so a single recording can set a sample and a prediction apart by that much on its own; the
sample kept is the recording with the median iteration time (of an even number, the lower of the
middle two, which leans fast: record an odd number of passes). The log (default
bench/results/h100/record_samples.json) lists, per sample, every pass's iteration time, wall time and
which pass was kept; a refused configuration is listed with its reason. Nothing is written unless
every pass has a log.

sample_sessions/ holds the samples of more than one GPU: the H100's under the names the passes give them
(`vgg19-b64-uvm-50pct.measured.vms`), every other GPU's with `--prefix` before that name
(`--prefix h200-`: `h200-vgg19-b64-uvm-50pct.measured.vms`; the H200 passes and log are
bench/results/h200/passes/pass* and bench/results/h200/record_samples.json). The log names each sample
by its name in sample_sessions/.

`--only GLOB` keeps the configurations whose name in the passes matches GLOB and leaves out the rest,
neither copied nor logged: the H200's swap passes record each model's `device` run too (the swap
calibration's base), and `--only '*-swap-*'` keeps those from replacing the `device` samples picked
from the uvm passes.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("passes", nargs="+", type=Path)
    ap.add_argument("--samples", type=Path, default=ROOT / "sample_sessions")
    ap.add_argument("--log", type=Path, default=ROOT / "bench" / "results" / "h100" / "record_samples.json")
    ap.add_argument("--prefix", default="", help="put before each sample's name (the GPU, as `h200-`)")
    ap.add_argument("--only", default="*", help="pick only the configurations named so in the passes "
                    "(a glob: '*-swap-*'); the others are neither copied nor logged")
    args = ap.parse_args(argv)
    logs = [d / "record_samples.json" for d in args.passes]
    missing = [str(p) for p in logs if not p.is_file()]
    if missing:
        print(f"pick_samples: no record_samples.json in {', '.join(missing)}", file=sys.stderr)
        return 2
    runs: dict[str, list[tuple[int, dict]]] = {}
    for k, log in enumerate(logs):
        for row in json.loads(log.read_text()):
            if not fnmatch.fnmatchcase(row["session"], args.only):
                continue
            runs.setdefault(row["session"], []).append((k, row))
    out = []
    for session, rows in runs.items():
        done = [(k, r) for k, r in rows if r["exit"] == 0]
        # where a pass wrote its sessions (and its cost models) is the only difference between the passes'
        # commands
        command = rows[0][1]["command"]
        folder = re.search(r"--out (\S*/)", command)
        command = command.replace(folder.group(1), "DIR/") if folder else command
        entry = {"session": args.prefix + session, "command": command}
        if not done:
            entry.update(exit=rows[0][1]["exit"], message=rows[0][1]["message"])
        else:
            ordered = sorted(done, key=lambda kr: kr[1]["iteration_ms"])
            kept, row = ordered[(len(ordered) - 1) // 2]
            shutil.copyfile(args.passes[kept] / session, args.samples / (args.prefix + session))
            entry.update(exit=0, kept_pass=kept + 1, iteration_ms=row["iteration_ms"], bytes=row["bytes"],
                         passes=[{"pass": k + 1, "iteration_ms": round(r["iteration_ms"], 1),
                                  "wall_s": r["wall_s"]} for k, r in done])
        out.append(entry)
    args.log.write_text(json.dumps(out, indent=1) + "\n")
    print(f"kept {sum(1 for e in out if e['exit'] == 0)} samples from {len(logs)} passes; log in {args.log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
