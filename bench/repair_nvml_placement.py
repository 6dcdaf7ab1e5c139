"""Drop the NVML samples that sessions recorded before the fix placed on top of later iterations.

    python bench/repair_nvml_placement.py FILE [FILE ...]

Until this fix, a recorded session kept the NVML samples taken while the collectors drained their
buffers between timed iterations, placed after the end of their iteration: on top of the next ones,
since the timeline draws iterations back to back. The executor now drops them as it records
(`vmexplorer.collectors.build`). For a session recorded before, the samples are stored in the order
they were taken, so where the time on the axis goes back, the next iteration's samples begin:

- as many runs of samples as iterations: of run i, the samples inside iteration i's span are kept and
  the rest (taken while draining) dropped;
- fewer runs (a drain short enough that no sample gave it away, or none taken in it): the samples that
  belong to a drain cannot be told from the next iteration's, so all are dropped, and the session's
  `nvml` status says why.

Only sessions created before the fix (`FIXED`) are touched; values are never changed: a sample is kept
as recorded or dropped. Files are rewritten in place.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmexplorer.session import Session, load_session, save_session  # noqa: E402

MARK = "bench/repair_nvml_placement.py"
FIXED = "2026-11-22T20:00:00Z"  # sessions recorded from then on were recorded with the fix
NVML = ("nvml_t_ns", "nvml_memory_used_bytes", "nvml_pcie_tx_bytes_per_s", "nvml_pcie_rx_bytes_per_s",
        "nvml_gpu_util_pct")


def repaired(s: Session) -> tuple[Session, str]:
    c, tl = s.collected, s.timeline
    if s.created >= FIXED:
        return s, "recorded with the fix: nothing to repair"
    if c is None or not len(c.nvml_t_ns) or not c.available("nvml") or tl.iterations < 2 \
            or any(MARK in st.reason for st in c.status):
        return s, "nothing to repair"
    t = c.nvml_t_ns
    run = np.concatenate([[0], np.cumsum(np.diff(t) < 0)])
    n = tl.iterations
    if run[-1] + 1 == n:
        ends = np.array([max(tl.op_end_ns[tl.op_iteration == i].max(),
                             tl.memop_end_ns[tl.memop_iteration == i].max(initial=0)) for i in range(n)])
        keep = t <= ends[run]
        why = f"kept {int(keep.sum())} of {len(t)} NVML samples: the rest were taken between iterations"
        status = tuple(dataclasses.replace(st, reason=(
            f"{len(t) - int(keep.sum())} samples taken between iterations were dropped after recording ({MARK})"))
            if st.name == "nvml" else st for st in c.status)
    else:
        keep = np.zeros(len(t), dtype=bool)
        why = f"dropped all {len(t)} NVML samples: {run[-1] + 1} runs of samples for {n} iterations"
        status = tuple(dataclasses.replace(st, available=False, reason=(
            "samples dropped after recording: this session was recorded before vmexplorer told the samples "
            f"taken between iterations from the iterations' own ({MARK})")) if st.name == "nvml" else st
            for st in c.status)
    fixed = dataclasses.replace(c, status=status, **{k: getattr(c, k)[keep] for k in NVML})
    return dataclasses.replace(s, collected=fixed), why


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for name in sys.argv[1:]:
        session, why = repaired(load_session(name))
        if not why.endswith("nothing to repair"):
            save_session(session, name, force=True)
        print(f"{name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
