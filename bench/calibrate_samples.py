"""Store a fitted cost model in every measured sample session (`vmexplorer calibrate`, in place).

    python bench/calibrate_samples.py [DIR]

A `device` session is calibrated on itself; a paging session on the same model's `device` session
(its fault-free op times) and itself (its bandwidths, fault throughput and host blocking). The app then
simulates edits of a sample with the model fitted to that very run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "sample_sessions"
    measured = sorted(folder.glob("*.measured.vms"))
    failed = 0
    for path in measured:
        model_batch = "-".join(path.name.split("-")[:2])
        device = folder / f"{model_batch}-device.measured.vms"
        cmd = [sys.executable, "-m", "vmexplorer", "calibrate", str(path), "--out", str(path), "--force"]
        if path != device:
            cmd += ["--device", str(device)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        print((done.stdout or done.stderr).strip())
        failed += done.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
