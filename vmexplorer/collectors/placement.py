"""Putting collector records on a session's time axis, with no GPU involved."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def place(starts_ns: Sequence[int], offsets_ns: Sequence[float],
          ts_ns: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Records at clock times `ts_ns` -> (kept row mask, iteration, ns on the timeline).

    Recorded iteration i began at clock time `starts_ns[i]` and at `offsets_ns[i]` on the timeline. A
    record belongs to the last iteration that began before it; records before the first (warm-up)
    are dropped."""
    starts = np.asarray(starts_ns, dtype=np.int64)
    t = np.asarray(ts_ns, dtype=np.int64)
    iteration = np.searchsorted(starts, t, side="right") - 1
    keep = iteration >= 0
    shift = np.asarray(offsets_ns, dtype=np.float64) - starts
    it = iteration[keep]
    return keep, it, np.rint(t[keep] + shift[it]).astype(np.int64)
