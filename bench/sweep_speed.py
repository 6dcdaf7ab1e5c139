"""How long `vmexplorer sweep` takes for issue 36's goal: VGG-19 b64, 5 policies x 2 mechanisms x 20
capacities (200 points) written as CSV, under 60 s on a 2-core machine.

    python -m bench.sweep_speed                      # prints the figures
    python -m bench.sweep_speed --out bench/results/sweep_speed.txt

The sweep runs as a person runs it (`python -m vmexplorer sweep ... --out FILE`, a new process, its start
and imports included), with --jobs 1 and with the default (every core), each `--repeat` times; the
machine's load average before and after each run is written beside its time, as other work on the machine
slows it, and so is the CPU time of the sweep's processes, which that work does not change: on an idle
machine with N cores the sweep takes about that over N, plus the processes' start.
The 5 policies are the ones that plan without a search (`uvm`, whose swap points are refusals, `autovm`,
`belady`, `vdnn`, `checkpoint`); `tuned` and `joint` search for seconds a point and are timed apart
(`--policies`).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLICIES = "uvm,autovm,belady,vdnn,checkpoint"
CAPACITIES = "43%..100%:3%"  # 20 capacities, the lowest above VGG-19 b64's least (36.8%)


def sweep_once(policies: str, jobs: int | None) -> tuple[float, float, int, int]:
    """(seconds, CPU seconds of the sweep's processes, rows, rows with figures) of one sweep run as a command."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "sweep.csv"
        argv = [sys.executable, "-m", "vmexplorer", "sweep", "--model", "vgg19:64", "--policy", policies,
                "--mechanism", "uvm,swap", "--capacity", CAPACITIES, "--out", str(out)]
        if jobs is not None:
            argv += ["--jobs", str(jobs)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the workers' too: they are waited for
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        with open(out, newline="") as f:
            rows = list(csv.DictReader(f))
    return seconds, cpu, len(rows), sum(1 for r in rows if r["iteration_ns"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [f"vmexplorer sweep --model vgg19:64 --policy {args.policies} --mechanism uvm,swap "
             f"--capacity {CAPACITIES} --out FILE (CSV)",
             f"machine: {cores} cores available, {platform.processor() or platform.machine()}, Python "
             f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC", ""]
    for jobs in (1, None):
        for _ in range(args.repeat):
            load = os.getloadavg()[0]
            seconds, cpu, rows, figures = sweep_once(args.policies, jobs)
            lines.append(f"--jobs {jobs or f'default ({cores})'}: {seconds:.1f} s for {rows} points "
                         f"({figures} with figures, the rest refusals), {cpu:.1f} s of CPU in all; load average "
                         f"before {load:.2f}, after {os.getloadavg()[0]:.2f}")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
