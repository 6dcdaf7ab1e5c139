"""Store a fitted cost model in every measured sample session (`vmexplorer calibrate`, in place).

    python bench/calibrate_samples.py [DIR] [--glob PATTERN]     (default: every *.measured.vms)

A `device` session is calibrated on itself; a paging session on the same model's `device` session
recorded on the same GPU (its fault-free op times) and itself (its bandwidths, fault throughput and host
blocking). The app then simulates edits of a sample with the model fitted to that very run. A sample's
name is `[gpu-]<model>-b<batch>-<policy>[-<pct>pct].measured.vms` (bench/pick_samples.py): its `device`
session is the one with the same name up to the batch.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def up_to_batch(name: str) -> str:
    """A sample's name up to its batch (`h200-vgg19-b64` of `h200-vgg19-b64-uvm-50pct.measured.vms`)."""
    parts = name.split("-")
    batch = next(i for i, part in enumerate(parts) if re.fullmatch(r"b\d+", part))
    return "-".join(parts[:batch + 1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, default=ROOT / "sample_sessions")
    ap.add_argument("--glob", default="*.measured.vms", help="calibrate only these (one GPU's: 'h200-*')")
    args = ap.parse_args()
    folder = args.folder
    measured = sorted(folder.glob(args.glob))
    failed = 0
    for path in measured:
        device = folder / f"{up_to_batch(path.name)}-device.measured.vms"
        cmd = [sys.executable, "-m", "vmexplorer", "calibrate", str(path), "--out", str(path), "--force"]
        if path != device:
            cmd += ["--device", str(device)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        print((done.stdout or done.stderr).strip())
        failed += done.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
