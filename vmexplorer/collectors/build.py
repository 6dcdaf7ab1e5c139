"""From the collectors' raw rows (CUPTI's clock) to a session's `Collected` (the timeline's axis)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..records.collected import CUPTI, MEMCPY_KINDS, NVML, NVTX, UM_KINDS, Collected, CollectorStatus, thin
from .placement import place


def build_collected(collectors: list[Any], t0s: list[int], offsets: list[float],
                    lengths: list[float] | None = None) -> Collected:
    """The session's records. NVML samples taken after an iteration ended and before the next began
    (while the collectors drained, between timed iterations) have no place on the timeline, whose
    iterations are drawn back to back, so they are dropped; `lengths` gives each iteration's length."""
    iterations = max(len(t0s), 1)
    by_name = {c.name: c for c in collectors}
    status = [CollectorStatus(c.name, bool(c.available), c.reason or "", int(c.dropped),
                              int(c.overhead_ns) // iterations) for c in collectors]
    status.append(_nvtx_status())
    cupti = by_name.get(CUPTI)
    if cupti is not None and cupti.available:
        status.extend(CollectorStatus(name, False, reason, 0, 0) for name, reason in cupti.switched_off())
    k = _placed(cupti.rows if cupti else {}, "kernel", t0s, offsets)
    names = sorted(set(k["name"]))
    index = {n: i for i, n in enumerate(names)}
    u = _placed(cupti.rows if cupti else {}, "um", t0s, offsets)
    known = np.array([kind in UM_KINDS for kind in u["kind"]], dtype=bool)
    m = _placed(cupti.rows if cupti else {}, "memcpy", t0s, offsets)
    nvml = by_name.get(NVML)
    n_rows = nvml.rows if nvml else {}
    keep, n_it, n_t = place(t0s, offsets, n_rows.get("t", []))
    if lengths is not None and len(n_t):
        ends = np.asarray(offsets, dtype=np.float64) + np.asarray(lengths, dtype=np.float64)
        inside = n_t <= ends[n_it]
        keep[np.flatnonzero(keep)[~inside]] = False
        n_t = n_t[inside]

    def col(rows: dict, key: str) -> np.ndarray:
        return np.asarray(rows.get(key, []), dtype=np.int64)[keep]

    collected = Collected(
        kernel_iteration=k["iteration"], kernel_start_ns=k["start"], kernel_end_ns=k["end"],
        kernel_stream=k["stream"], kernel_name=np.array([index[n] for n in k["name"]], dtype=np.int64),
        kernel_names=tuple(names),
        um_iteration=u["iteration"][known], um_start_ns=u["start"][known], um_end_ns=u["end"][known],
        um_kind=np.array([UM_KINDS.index(kind) for kind in np.asarray(u["kind"], dtype=object)[known]],
                         dtype=np.int64),
        um_value=u["value"][known],
        nvml_t_ns=n_t, nvml_memory_used_bytes=col(n_rows, "memory_used"),
        nvml_pcie_tx_bytes_per_s=col(n_rows, "pcie_tx"), nvml_pcie_rx_bytes_per_s=col(n_rows, "pcie_rx"),
        nvml_gpu_util_pct=col(n_rows, "gpu_util"),
        status=tuple(status),
        memcpy_iteration=m["iteration"], memcpy_start_ns=m["start"], memcpy_end_ns=m["end"],
        memcpy_stream=m["stream"], memcpy_bytes=m["value"],
        memcpy_kind=np.array([MEMCPY_KINDS.index(k) if k in MEMCPY_KINDS else 0 for k in m["kind"]], dtype=np.int64),
    )
    return thin(collected)


def _placed(rows: dict, prefix: str, t0s: list[int], offsets: list[float]) -> dict[str, Any]:
    """One table's records on the timeline: an end moves with its start, so a span never straddles two
    iterations' offsets."""
    start_raw = np.asarray(rows.get(f"{prefix}_start", []), dtype=np.int64)
    end_raw = np.asarray(rows.get(f"{prefix}_end", []), dtype=np.int64)
    keep, iteration, start = place(t0s, offsets, start_raw)
    out: dict[str, Any] = {"iteration": iteration, "start": start,
                           "end": start + np.maximum(end_raw[keep] - start_raw[keep], 0)}
    for key in ("stream", "value"):
        if f"{prefix}_{key}" in rows:
            out[key] = np.asarray(rows[f"{prefix}_{key}"], dtype=np.int64)[keep]
    for key in ("name", "kind"):
        if f"{prefix}_{key}" in rows:
            out[key] = [v for v, kept in zip(rows[f"{prefix}_{key}"], keep) if kept]
    out.setdefault("stream", np.zeros(0, dtype=np.int64))
    out.setdefault("value", np.zeros(0, dtype=np.int64))
    out.setdefault("name", [])
    out.setdefault("kind", [])
    return out


def _nvtx_status() -> CollectorStatus:
    try:
        import nvtx  # noqa: F401
    except ImportError:
        return CollectorStatus(NVTX, False, "the nvtx package is not installed: Nsight Systems shows no "
                               "ranges (the session's op spans are unaffected)", 0, 0)
    return CollectorStatus(NVTX, True, "", 0, 0)
