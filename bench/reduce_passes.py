"""Rewrite the recording passes without the collector records that nothing reads from them.

    python -m bench.reduce_passes [DIR ...]     (default: every bench/results/<gpu>/passes*/pass* folder)

`bench/gpu/record_samples.py` writes whole sessions. What is read from the passes once they are
committed: `bench/validate_simulator.py` reads each session's graph, plan and timeline (it calibrates
on them and simulates the plans); `bench/report_h100.py` reads the session summary's share of the
bytes to the device that CUPTI saw, a figure of CUPTI's unified-memory counts per iteration. Nothing
reads the kernel records, the memory copies, the NVML samples or when within an iteration each
migration happened, which are most of a session's bytes after the timeline. So, in the session
format's own terms:
- the kernel, memory-copy and NVML tables are emptied, and each one's collector part is named
  unavailable in the collectors' status with this script as the reason, as a run that switched the
  part off names it, so no figure reads an emptied table as "none happened";
- the unified-memory rows are merged to one per kind and iteration (`thin`, which keeps every total
  per kind and iteration exactly: the summary's unified-memory figures do not change), and CUPTI's
  status carries a note saying so.
A session already reduced is left as it is, so running this twice changes nothing the second time.
Every file is loaded and saved with vmexplorer's own loader and writer, which check it.

The samples (`sample_sessions/`) are whole recordings: `bench/pick_samples.py` copies them from the
passes as `record_samples.py` wrote them, so pick them before reducing the passes; then pack the set
(`python -m bench.passes pack DIR`): the folders of a packed set are no longer there to reduce.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from vmexplorer.records.collected import CUPTI, PARTS, Collected, CollectorStatus, thin
from vmexplorer.session import load_session, save_session

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"  # a folder per GPU, its sets in passes*/
DROPPED = ("kernel", "memcpy", "nvml")  # the tables of `Collected` dropped, by their column prefix
REASON = "dropped from this copy by bench/reduce_passes.py: nothing read from the recording passes uses it"
MERGED = ("unified-memory rows merged to one per kind and iteration by bench/reduce_passes.py (every total per "
          "kind and iteration kept)")


def reduced(collected: Collected) -> Collected | None:
    """`collected` without the DROPPED tables, each named unavailable in the status unless it already
    is, and with its unified-memory rows merged; None when there is nothing left to reduce."""
    columns = {f.name: getattr(collected, f.name) for f in fields(Collected)
               if f.name.startswith(tuple(f"{table}_" for table in DROPPED))}
    full = [name for name, values in columns.items() if len(values)]
    unnamed = [table for table in DROPPED if collected.available(table)]
    merged = thin(collected, max_rows=None, gap_ns=math.inf)
    if not full and not unnamed and len(merged.um_value) == len(collected.um_value):
        return None
    # Collected's fields by name, each of its own type (the names a tuple, the columns arrays)
    emptied: dict[str, Any] = {name: () if name == "kernel_names" else np.zeros(0, dtype=values.dtype)
                               for name, values in columns.items()}
    status = list(collected.status)
    for table in unnamed:
        part = next(p for p in PARTS if p.table == table)
        mine = next((i for i, s in enumerate(status) if s.name == part.status), None)
        if mine is None:
            status.append(CollectorStatus(part.status, False, REASON, 0, 0))
        else:  # the collector's own entry (NVML's): its counts stay, its records do not
            status[mine] = replace(status[mine], available=False, reason=REASON)
    if len(merged.um_value) < len(collected.um_value):
        status = [replace(s, reason="; ".join(filter(None, (s.reason, MERGED))))
                  if s.name == CUPTI and MERGED not in s.reason else s for s in status]
    return replace(merged, **emptied, status=tuple(status))


def reduce_file(path: Path) -> bool:
    """Rewrite one session as `reduced` makes its records; whether the file changed."""
    session = load_session(path)
    if session.collected is None:
        return False
    collected = reduced(session.collected)
    if collected is None:
        return False
    save_session(replace(session, collected=collected), path, force=True)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path, help="recording passes, one folder of sessions each")
    args = ap.parse_args()
    folders = args.folders or sorted(p for p in RESULTS.glob("*/passes*/pass*") if p.is_dir())
    changed = total = 0
    for folder in folders:
        for path in sorted(folder.glob("**/*.vms")):  # a pass's cost_models/ too (record_samples.py --set h200)
            before = path.stat().st_size
            total += 1
            if reduce_file(path):
                changed += 1
                print(f"{path}: {before} -> {path.stat().st_size} bytes")
    print(f"reduced {changed} of {total} sessions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
