"""What the GPU collectors recorded during a run, as columns, and the figures derived from it on the CPU.

The collectors (CUPTI, NVML, NVTX in `vmexplorer.collectors`) produce raw records during a GPU run; a
`Collected` holds them, on the same time axis as the session's `Timeline` (ns from the start of the
first recorded iteration), each record labelled with the recorded iteration it belongs to. Records from
before the first recorded iteration (warm-up) or with negative times are the collector's to drop.

Four tables and the collectors' status:
- kernels (CUPTI CONCURRENT_KERNEL): one row per kernel execution, with its stream and its name (an
  index into `kernel_names`, so each name is stored once);
- unified-memory counters (CUPTI UnifiedMemoryCounter3): one row per record, its kind an index into
  `UM_KINDS`, its value in the kind's unit: bytes for `bytes_htod` / `bytes_dtoh`; for
  `gpu_page_fault_groups` CUPTI writes one record per faulting page (its address is the page's) and
  the value is the number of fault groups the driver took for that page (CUPTI's documentation of
  UnifiedMemoryCounter3.value; how many groups and bytes a record stands for varies from run to run,
  so it is read from a session's own rows, never assumed); for `remote_map` and `thrashing`, bytes
  (the region's size); for the others, counts of events. `um_records` says how many CUPTI records a
  row stands for: 1 for raw records, more after `thin` merged some;
- memory copies (CUPTI MEMCPY): one row per cudaMemcpy, with its stream, its direction (an index into
  `MEMCPY_KINDS`) and its bytes. The engine moves managed memory by migration, which the unified-memory
  counters see; a copy is explicit traffic (the loss read back after each iteration);
- NVML samples: device memory used, PCIe throughput each way, GPU utilisation, at sample times.
Everything here is plain numpy and runs on a machine with no GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Literal

import numpy as np

from ..graph import Graph
from ..plan import Direction, Plan
from .spans import Timeline


class UmKind(StrEnum):
    """CUPTI's unified-memory counter kinds that a session keeps, in `UM_KINDS` order."""

    BYTES_HTOD = "bytes_htod"  # bytes migrated host to device (faults and prefetches)
    BYTES_DTOH = "bytes_dtoh"  # bytes migrated device to host (evictions, offloads)
    GPU_PAGE_FAULT_GROUPS = "gpu_page_fault_groups"  # one record per faulting page; value: its fault groups
    THRASHING = "thrashing"
    THROTTLING = "throttling"
    REMOTE_MAP = "remote_map"
    CPU_PAGE_FAULT = "cpu_page_fault"  # CUPTI's count gave nonsense in our probe: kept, not summarised


UM_KINDS: tuple[str, ...] = tuple(k.value for k in UmKind)
BYTES_HTOD, BYTES_DTOH, GPU_PAGE_FAULT_GROUPS, THRASHING, THROTTLING, REMOTE_MAP = (
    UM_KINDS.index(k) for k in ("bytes_htod", "bytes_dtoh", "gpu_page_fault_groups", "thrashing", "throttling",
                                "remote_map"))
# CUPTI's memcpy directions, lower-cased (H host, D device, A array, P peer); anything else is "unknown"
MEMCPY_KINDS: tuple[str, ...] = ("unknown", "htod", "dtoh", "htoa", "atoh", "atoa", "atod", "dtoa", "dtod", "htoh",
                                 "ptop")
MAX_UM_ROWS = 250_000  # thin()'s default: its six columns take at most 1.5M of the 4M values a session may hold
THIN_GAP_NS = 1000.0  # thin() merges records of one kind and iteration less than 1 µs apart

CUPTI, NVML, NVTX = "cupti", "nvml", "nvtx"  # the collectors, by the names their status goes by


@dataclass(frozen=True)
class CollectorPart:
    """One part of what a recorded run collects, which a run can switch off on its own."""

    name: str  # as `RunSettings.collectors` and `vmexplorer run --collectors` spell it
    collector: str  # the collector that records it
    status: str  # the status entry that names it unavailable (the collector's own, for a part that is all of it)
    table: str  # what it fills, as `Collected.available` names it ("faults": the um table's page-fault rows)
    records: str  # what it records, as a reason names it
    counts_um: bool = False  # recorded by CUPTI's unified-memory counters, whose counting slows paging


# The one spelling of the collectors' parts: the executor's choices, the command line's and the tables'
# feeds below all derive from it.
PARTS = (CollectorPart("kernels", CUPTI, "cupti_kernels", "kernel", "kernel records"),
         CollectorPart("migrations", CUPTI, "cupti_um", "um", "migration counters", counts_um=True),
         CollectorPart("faults", CUPTI, "cupti_faults", "faults", "GPU page-fault records", counts_um=True),
         CollectorPart("memcpy", CUPTI, "cupti_memcpy", "memcpy", "memory-copy records"),
         CollectorPart("nvml", NVML, NVML, "nvml", "NVML samples"))
# Which collectors feed which table: a table's summary figures are left out when one of its collectors
# reports itself unavailable (a zero fault count from a CUPTI that never ran would read as "no faults").
FEEDS = {p.table: tuple(dict.fromkeys((p.collector, p.status))) for p in PARTS}


class CollectedError(ValueError):
    """Records that do not make a valid `Collected`; the message names the column and the row."""


@dataclass(frozen=True, eq=False)
class CollectorStatus:
    """How one collector fared: `available` False with the `reason` ("cupti-python not installed",
    "CUPTI refused: another profiler is attached"); an available collector may still carry a reason
    for a limitation ("unified-memory counters unsupported on this device"), else "".
    `dropped_records`: records lost (CUPTI buffers full, samples missed) over the whole run.
    `overhead_ns`: host time the collector took per recorded iteration at the iteration's end, draining
    its buffers (CUPTI's flush), in ns; it falls between timed iterations, so it lengthens the run but
    not the iteration times. What collecting does to the iterations themselves is measured side by side,
    with and without, by bench/gpu/bench_collectors.py."""

    name: str  # "cupti", "cupti_um", "nvml", "nvtx"
    available: bool
    reason: str
    dropped_records: int
    overhead_ns: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise CollectedError(f"a collector's name should be non-empty text, not {self.name!r}")
        if not isinstance(self.available, (bool, np.bool_)):
            raise CollectedError(f"collector {self.name}: available should be true or false")
        object.__setattr__(self, "available", bool(self.available))
        if not isinstance(self.reason, str):
            raise CollectedError(f"collector {self.name}: reason should be text")
        if not self.available and not self.reason.strip():
            raise CollectedError(f"collector {self.name} is unavailable: say why (reason is empty)")
        for name in ("dropped_records", "overhead_ns"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
                raise CollectedError(f"collector {self.name}: {name} should be a whole number >= 0, "
                                     f"not {value!r}")
            object.__setattr__(self, name, int(value))


@dataclass(frozen=True, eq=False)  # eq=False: numpy columns
class Collected:
    """Raw collector records of one run; times in ns on the session timeline's axis.

    Build it from lists or arrays: integer columns become int64, time and rate columns int64 when
    whole, else float64; anything malformed raises `CollectedError`. `um_records` may be left out
    (each row is one CUPTI record)."""

    kernel_iteration: np.ndarray
    kernel_start_ns: np.ndarray
    kernel_end_ns: np.ndarray
    kernel_stream: np.ndarray  # CUPTI's stream id
    kernel_name: np.ndarray  # index into kernel_names
    kernel_names: tuple[str, ...]
    um_iteration: np.ndarray
    um_start_ns: np.ndarray
    um_end_ns: np.ndarray
    um_kind: np.ndarray  # index into UM_KINDS
    um_value: np.ndarray  # bytes, or a page's fault groups, or a count: see the module's docstring
    nvml_t_ns: np.ndarray
    nvml_memory_used_bytes: np.ndarray
    nvml_pcie_tx_bytes_per_s: np.ndarray  # device to host, bytes/s (NVML reports KB/s: convert)
    nvml_pcie_rx_bytes_per_s: np.ndarray  # host to device, bytes/s
    nvml_gpu_util_pct: np.ndarray  # 0 to 100
    status: tuple[CollectorStatus, ...]
    um_records: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # CUPTI records per row
    # memory copies (a session of schema 3 or older has none: its collectors did not ask for them)
    memcpy_iteration: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    memcpy_start_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    memcpy_end_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    memcpy_stream: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    memcpy_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # index into MEMCPY_KINDS
    memcpy_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        for name in _WHOLE + _NUMBER:
            object.__setattr__(self, name, _as_column(getattr(self, name), name, name in _WHOLE))
        if not len(self.um_records) and len(self.um_value):
            object.__setattr__(self, "um_records", np.ones(len(self.um_value), dtype=np.int64))
        names = tuple(self.kernel_names)
        bad = next((i for i, n in enumerate(names) if not isinstance(n, str)), None)
        if bad is not None:
            raise CollectedError(f"kernel_names row {bad} should be text, not {names[bad]!r}")
        object.__setattr__(self, "kernel_names", names)
        status = tuple(self.status)
        if not all(isinstance(s, CollectorStatus) for s in status):
            raise CollectedError("status should hold CollectorStatus objects")
        seen = [s.name for s in status]
        twice = next((n for n in seen if seen.count(n) > 1), None)
        if twice is not None:
            raise CollectedError(f"status names collector {twice!r} twice")
        object.__setattr__(self, "status", status)
        self._check()

    def _check(self) -> None:
        for table, columns in _TABLES.items():
            rows = len(getattr(self, columns[0]))
            for name in columns[1:]:
                if len(getattr(self, name)) != rows:
                    raise CollectedError(f"{name} has {len(getattr(self, name))} values, but {columns[0]} "
                                         f"has {rows}: the {table} columns must be of one length")
        _within(self.kernel_name, "kernel_name", 0, len(self.kernel_names), "an index into kernel_names")
        _within(self.um_kind, "um_kind", 0, len(UM_KINDS), "an index into UM_KINDS")
        _within(self.memcpy_kind, "memcpy_kind", 0, len(MEMCPY_KINDS), "an index into MEMCPY_KINDS")
        _within(self.um_records, "um_records", 1, None, "a count of records")
        _within(self.nvml_gpu_util_pct, "nvml_gpu_util_pct", 0, 100, "a percentage", inclusive=True)
        for name in ("kernel_iteration", "um_iteration", "kernel_stream", "um_value", "kernel_start_ns",
                     "um_start_ns", "nvml_t_ns", "nvml_memory_used_bytes", "nvml_pcie_tx_bytes_per_s",
                     "nvml_pcie_rx_bytes_per_s", "memcpy_iteration", "memcpy_start_ns", "memcpy_stream",
                     "memcpy_bytes"):
            _within(getattr(self, name), name, 0, None, "allowed here")
        for table in ("kernel", "um", "memcpy"):
            late = np.flatnonzero(getattr(self, f"{table}_end_ns") < getattr(self, f"{table}_start_ns"))
            if late.size:
                raise CollectedError(f"{table} row {late[0]} ends ({table}_end_ns) before it starts "
                                     f"({table}_start_ns)")

    @property
    def iterations(self) -> int:
        """One more than the highest iteration any record names (0 with no records)."""
        its = [a.max() for a in (self.kernel_iteration, self.um_iteration, self.memcpy_iteration) if len(a)]
        return int(max(its)) + 1 if its else 0

    def available(self, table: str) -> bool:
        """Whether the figures of a table ("kernel", "um", "faults", "memcpy", "nvml") mean anything: no collector that
        feeds it reported itself unavailable."""
        return not any(s.name in FEEDS[table] and not s.available for s in self.status)


_TABLES = {
    "kernel": ("kernel_iteration", "kernel_start_ns", "kernel_end_ns", "kernel_stream", "kernel_name"),
    "um": ("um_iteration", "um_start_ns", "um_end_ns", "um_kind", "um_value", "um_records"),
    "memcpy": ("memcpy_iteration", "memcpy_start_ns", "memcpy_end_ns", "memcpy_stream", "memcpy_kind", "memcpy_bytes"),
    "nvml": ("nvml_t_ns", "nvml_memory_used_bytes", "nvml_pcie_tx_bytes_per_s", "nvml_pcie_rx_bytes_per_s",
             "nvml_gpu_util_pct"),
}
_WHOLE = ("kernel_iteration", "kernel_stream", "kernel_name", "um_iteration", "um_kind", "um_value",
          "um_records", "nvml_memory_used_bytes", "memcpy_iteration", "memcpy_stream", "memcpy_kind", "memcpy_bytes")
_NUMBER = ("kernel_start_ns", "kernel_end_ns", "um_start_ns", "um_end_ns", "memcpy_start_ns", "memcpy_end_ns",
           "nvml_t_ns",
           "nvml_pcie_tx_bytes_per_s", "nvml_pcie_rx_bytes_per_s", "nvml_gpu_util_pct")
_INT64_MAX = np.iinfo(np.int64).max


def _as_column(values: Any, name: str, whole: bool) -> np.ndarray:
    try:
        a = np.asarray(values)
    except (ValueError, OverflowError):
        raise CollectedError(f"{name} should be a list of numbers") from None
    if a.ndim != 1:
        raise CollectedError(f"{name} should be one column of numbers, not an array of shape {a.shape}")
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    if a.dtype.kind == "u":
        if a.max() > _INT64_MAX:
            raise CollectedError(f"{name} holds a number beyond 64 bits")
        return a.astype(np.int64)
    if a.dtype.kind == "i":
        return a.astype(np.int64, copy=False)
    if a.dtype.kind != "f":
        raise CollectedError(f"{name} should hold numbers, not {a.dtype} values")
    a = a.astype(np.float64, copy=False)
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise CollectedError(f"{name} row {bad[0]} is {a[bad[0]]}, not a finite number")
    if whole:
        fraction = np.flatnonzero((a != np.round(a)) | (np.abs(a) > 2.0**63 - 1024))
        if fraction.size:
            raise CollectedError(f"{name} row {fraction[0]} is {a[fraction[0]]}: {name} holds whole numbers "
                                 "(counts, indices, bytes)")
        return a.astype(np.int64)
    return a


def _within(values: np.ndarray, name: str, lo: int, hi: int | None, what: str, inclusive: bool = False) -> None:
    above = np.zeros(len(values), dtype=bool) if hi is None else (values > hi if inclusive else values >= hi)
    hits = np.flatnonzero((values < lo) | above)
    if hits.size:
        i = int(hits[0])
        expected = f"at least {lo}" if hi is None else f"{lo} to {hi if inclusive else hi - 1}"
        raise CollectedError(f"{name} row {i} is {values[i]}: not {what}; expected {expected}")


def check_against(collected: Collected, timeline: Timeline) -> None:
    """Raise CollectedError unless the records fit the timeline: a measured one, and every record in
    one of its iterations."""
    if timeline.source != "measured":
        raise CollectedError(f"collector records belong to a measured session, not a {timeline.source} one")
    n = timeline.iterations
    for name in ("kernel_iteration", "um_iteration", "memcpy_iteration"):
        over = np.flatnonzero(getattr(collected, name) >= n)
        if over.size:
            raise CollectedError(f"{name} row {over[0]} is {getattr(collected, name)[over[0]]}, but the "
                                 f"timeline records {n} iteration(s), 0 to {n - 1}")


# --- per-op figures -------------------------------------------------------------------------------

def busiest_stream(collected: Collected) -> int | None:
    """The stream that ran the most kernel time (the lowest id on a tie); None with no kernels."""
    if not len(collected.kernel_stream):
        return None
    streams, inverse = np.unique(collected.kernel_stream, return_inverse=True)
    busy = np.bincount(inverse, weights=collected.kernel_end_ns - collected.kernel_start_ns)
    return int(streams[int(np.argmax(busy))])


def per_op(graph: Graph, timeline: Timeline, collected: Collected,
           compute_stream: int | None = None) -> dict[str, np.ndarray]:
    """Measured figures per timeline op row (one value per row, in the timeline's row order).

    By start (a record counts in full for the op row of its own iteration whose [start_ns, end_ns)
    span contains the record's start; records that start between ops count nowhere):
    - `kernel_ns`, `kernels`: time and number of kernels on the compute stream (`compute_stream`, by
      default the stream with the most kernel time);
    - `faulted_pages`, `fault_groups`: GPU page-fault records, one per faulting page (`um_records`
      summed, so thinned rows still count every record), and the fault groups they report (values);
    - `bytes_htod`, `bytes_dtoh`: unified-memory bytes migrated, from records of any stream.
    By window (`window_fault_groups`, `window_bytes_htod`, `window_bytes_dtoh`, float64): each record's value
    spread evenly over its [start_ns, end_ns] and summed over the op's window, whatever its iteration: so
    a long prefetch or eviction on a copy stream is shared among the ops it ran under instead of counted
    in full by the op it started under. An op's window is its span with the stall before it,
    [start_ns - stall_ns, end_ns): the driver's evictions under `uvm` run in that stall (the op waits for
    the room they make), so they count for the op that needed them; the windows of one iteration tile
    it. A record of zero duration counts in full in the window holding its start.
    """
    tl, c = timeline, collected
    if len(tl.op_index) and int(tl.op_index.max()) >= len(graph.ops):
        raise CollectedError(f"the timeline names op {int(tl.op_index.max())}, but the graph has "
                             f"{len(graph.ops)} ops")
    n = len(tl.op_index)
    stream = busiest_stream(c) if compute_stream is None else compute_stream
    on_stream = c.kernel_stream == stream
    k_row = _op_rows(tl, c.kernel_iteration[on_stream], c.kernel_start_ns[on_stream])
    k_ns = (c.kernel_end_ns - c.kernel_start_ns)[on_stream]
    u_row = _op_rows(tl, c.um_iteration, c.um_start_ns)

    def total(rows: np.ndarray, values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        keep = rows >= 0 if mask is None else (rows >= 0) & mask
        sums = np.bincount(rows[keep], weights=values[keep], minlength=n)
        return np.rint(sums).astype(np.int64) if values.dtype.kind == "i" else sums

    faults, htod, dtoh = (c.um_kind == k for k in (GPU_PAGE_FAULT_GROUPS, BYTES_HTOD, BYTES_DTOH))
    out = {
        "kernel_ns": total(k_row, k_ns),
        "kernels": total(k_row, np.ones(len(k_row), dtype=np.int64)),
        "faulted_pages": total(u_row, c.um_records, faults),
        "fault_groups": total(u_row, c.um_value, faults),
        "bytes_htod": total(u_row, c.um_value, htod),
        "bytes_dtoh": total(u_row, c.um_value, dtoh),
    }
    for name, mask in (("fault_groups", faults), ("bytes_htod", htod), ("bytes_dtoh", dtoh)):
        out[f"window_{name}"] = _window_sums(c.um_start_ns[mask], c.um_end_ns[mask], c.um_value[mask],
                                             tl.op_start_ns - tl.op_stall_ns, tl.op_end_ns)
    return out


def _op_rows(tl: Timeline, iteration: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each record, the timeline op row of its iteration whose [start, end) holds t, or -1.
    Op spans of one iteration do not overlap (they run one after another on the compute stream)."""
    rows = np.full(len(t), -1, dtype=np.int64)
    if not len(t) or not len(tl.op_index):
        return rows
    op_order = np.lexsort((tl.op_start_ns, tl.op_iteration))
    op_its, starts, ends = tl.op_iteration[op_order], tl.op_start_ns[op_order], tl.op_end_ns[op_order]
    rec_order = np.argsort(iteration, kind="stable")
    rec_its = iteration[rec_order]
    for it in np.unique(rec_its):
        lo, hi = np.searchsorted(op_its, it, "left"), np.searchsorted(op_its, it, "right")
        a, b = np.searchsorted(rec_its, it, "left"), np.searchsorted(rec_its, it, "right")
        if lo == hi:
            continue
        sel = rec_order[a:b]
        pos = np.searchsorted(starts[lo:hi], t[sel], "right") - 1 + lo
        ok = pos >= lo
        pos = np.maximum(pos, lo)
        ok &= t[sel] < ends[pos]
        rows[sel[ok]] = op_order[pos[ok]]
    return rows


def _window_sums(s: np.ndarray, e: np.ndarray, v: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sum over records of v times the share of [s, e] inside [a, b), for each window [a, b)."""
    s, e, v = s.astype(np.float64), e.astype(np.float64), v.astype(np.float64)
    point = e <= s

    def mass(t: np.ndarray) -> np.ndarray:  # value accumulated up to time t, piecewise linear in t
        t = np.asarray(t, dtype=np.float64)
        out = _cumulative(s[point], v[point], t, "left")  # instantaneous records strictly before t
        ds, de, dv = s[~point], e[~point], v[~point]
        rate = dv / (de - ds) if len(ds) else dv
        out += _cumulative(de, dv, t, "right")  # records over by t count in full
        running = _cumulative(ds, rate, t, "right") - _cumulative(de, rate, t, "right")
        running_start = _cumulative(ds, rate * ds, t, "right") - _cumulative(de, rate * ds, t, "right")
        # records running at t (started at or before it, not over): rate * (t - start)
        return out + t * running - running_start

    return np.maximum(mass(b) - mass(a), 0.0) if len(a) else np.zeros(0)


def _cumulative(keys: np.ndarray, weights: np.ndarray, t: np.ndarray, side: Literal["left", "right"]
                ) -> np.ndarray:
    """Sum of weights whose key is <= t ("right") or < t ("left"), for each t."""
    order = np.argsort(keys, kind="stable")
    sums = np.concatenate([[0.0], np.cumsum(weights[order])])
    return sums[np.searchsorted(keys[order], t, side)]


# --- per-iteration figures ------------------------------------------------------------------------

def collected_summary(timeline: Timeline, collected: Collected) -> dict[str, float | int | str]:
    """Per iteration, the median over the timeline's recorded iterations (records go by their iteration label;
    unified-memory figures over the iterations CUPTI counted them in, the rest over the timed ones):
    `fault_groups`, `faulted_pages`, `bytes_htod`, `bytes_dtoh` (measured migrations), `kernel_ns` (kernel time
    summed over all streams), `kernels`, `memcpys` and `memcpy_bytes` (explicit copies); NVML's
    `nvml_peak_memory_used_bytes` and `nvml_gpu_util_pct` (mean of the samples); the collectors'
    `collector_flush_ns` (host time per iteration spent draining their buffers between timed iterations: see
    CollectorStatus), `dropped_records` (the whole run); and `<collector>_unavailable` (its reason) for each
    collector that did not run, or `<collector>_note` for one that ran with a limitation. Figures of a table
    whose collector was unavailable are left out rather than reported as zeros."""
    c = collected
    n = max(timeline.iterations, c.iterations, 1)
    split = timeline.timed_iterations if timeline.counted else 0  # with none counted, every iteration both
    timed, counted = np.arange(split or n), np.arange(split, n)
    out: dict[str, float | int | str] = {}

    def median(iteration: np.ndarray, values: np.ndarray, over: np.ndarray = timed) -> int:
        per = np.bincount(iteration, weights=values, minlength=n)[over]
        return int(np.median(per)) if len(per) else 0

    for table, name, kind, column in (("faults", "fault_groups", GPU_PAGE_FAULT_GROUPS, c.um_value),
                                      ("faults", "faulted_pages", GPU_PAGE_FAULT_GROUPS, c.um_records),
                                      ("um", "bytes_htod", BYTES_HTOD, c.um_value),
                                      ("um", "bytes_dtoh", BYTES_DTOH, c.um_value),
                                      ("um", "remote_map_bytes", REMOTE_MAP, c.um_value),
                                      ("um", "thrashing_bytes", THRASHING, c.um_value),
                                      ("um", "throttling", THROTTLING, c.um_value)):
        if c.available(table):
            mask = c.um_kind == kind
            out[name] = median(c.um_iteration[mask], column[mask], counted)
    if c.available("kernel"):
        out["kernel_ns"] = median(c.kernel_iteration, c.kernel_end_ns - c.kernel_start_ns)
        out["kernels"] = median(c.kernel_iteration, np.ones(len(c.kernel_iteration)))
    if c.available("memcpy"):
        out["memcpys"] = median(c.memcpy_iteration, np.ones(len(c.memcpy_iteration)))
        out["memcpy_bytes"] = median(c.memcpy_iteration, c.memcpy_bytes)
    if c.available("nvml") and len(c.nvml_t_ns):
        out["nvml_peak_memory_used_bytes"] = int(c.nvml_memory_used_bytes.max())
        out["nvml_gpu_util_pct"] = round(float(c.nvml_gpu_util_pct.mean()), 1)
    if timeline.counted:
        out["um_counted_iterations"] = int(len(counted))
    out["collector_flush_ns"] = sum(s.overhead_ns for s in c.status if s.available)
    out["dropped_records"] = sum(s.dropped_records for s in c.status)
    for s in c.status:
        if s.reason:
            out[f"{s.name}_{'note' if s.available else 'unavailable'}"] = s.reason
    return out


def migration_shares(plan: Plan, timeline: Timeline, collected: Collected,
                     summary: Mapping[str, Any] | None = None) -> dict[str, float]:
    """CUPTI's bytes each way per iteration (the median, as in `collected_summary`) as a share of the
    bytes the run moved that way: `htod_share`, `dtoh_share`, for each direction the plan moves bytes
    in, when the migration counters ran.

    The capacity emulation carries out the plan exactly (every eviction is the engine's own call and
    every fault back in follows from it), so the plan is the ledger CUPTI's counts are checked
    against. The check matters: on the H100 CUPTI delivers only part of its unified-memory records,
    and says nothing (its count of dropped records stays 0), even for one managed buffer sent to the
    host and touched again with nothing else running (notes/cupti-lost-um-records.md: timings show
    every page made the trip, while CUPTI saw only part of the bytes come back and none of the faults
    after the first trip). A share below 1 is how much of the migration lane is missing, not bytes
    that did not move. `summary`: `collected_summary` of the same records,
    when the caller has it already."""
    if not collected.available("um") or timeline.source != "measured":
        return {}
    summary = collected_summary(timeline, collected) if summary is None else summary
    out = {}
    for direction, key, name in ((Direction.TO_DEVICE, "bytes_htod", "htod_share"),
                                 (Direction.TO_HOST, "bytes_dtoh", "dtoh_share")):
        moved = sum(m.nbytes for m in plan.memops if m.direction is direction)
        if moved and key in summary:
            out[name] = round(int(summary[key]) / moved, 3)
    return out


# --- thinning -------------------------------------------------------------------------------------

def thin(collected: Collected, max_rows: int | None = MAX_UM_ROWS, gap_ns: float = THIN_GAP_NS) -> Collected:
    """Fewer unified-memory rows, the same totals: records of one kind and one iteration are merged
    when the next starts less than `gap_ns` after the latest end so far (overlapping ones always).
    A merged row spans from its first start to its latest end, its value is the sum of the values and
    `um_records` the sum of the records, so every total per kind and iteration is kept exactly.
    If more than `max_rows` rows remain, the gap doubles until they fit (at worst one row per kind and
    iteration). Rows come out ordered by start, kind, iteration, end. Kernel and NVML rows are kept."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows is {max_rows}; thinning keeps at least one row")
    c = collected
    n = len(c.um_value)
    if not n:
        return c
    order = np.lexsort((c.um_end_ns, c.um_start_ns, c.um_iteration, c.um_kind))
    kind, it = c.um_kind[order], c.um_iteration[order]
    start, end = c.um_start_ns[order], c.um_end_ns[order]
    group = np.ones(n, dtype=bool)
    group[1:] = (kind[1:] != kind[:-1]) | (it[1:] != it[:-1])
    bounds = np.append(np.flatnonzero(group), n)
    latest = np.empty_like(end)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        latest[a:b] = np.maximum.accumulate(end[a:b])
    gaps = (start[1:] - latest[:-1]).astype(np.float64)
    span = float(end.max() - start.min())
    gap = float(gap_ns)
    while True:
        first = group.copy()
        first[1:] |= gaps >= gap
        if max_rows is None or first.sum() <= max_rows or gap > span:
            break
        gap = max(2 * gap, 1.0)
    idx = np.flatnonzero(first)
    merged = {"um_kind": kind[idx], "um_iteration": it[idx], "um_start_ns": start[idx],
              "um_end_ns": np.maximum.reduceat(end, idx), "um_value": np.add.reduceat(c.um_value[order], idx),
              "um_records": np.add.reduceat(c.um_records[order], idx)}
    final = np.lexsort((merged["um_end_ns"], merged["um_iteration"], merged["um_kind"], merged["um_start_ns"]))
    m = {k: v[final] for k, v in merged.items()}
    return replace(c, um_kind=m["um_kind"], um_iteration=m["um_iteration"], um_start_ns=m["um_start_ns"],
                   um_end_ns=m["um_end_ns"], um_value=m["um_value"], um_records=m["um_records"])


def no_records(status: Sequence[CollectorStatus] = ()) -> Collected:
    """No records, only the collectors' status (say, every collector unavailable)."""
    columns: dict[str, Any] = {f.name: np.zeros(0, dtype=np.int64) for f in fields(Collected)
                               if f.name not in ("kernel_names", "status")}
    return Collected(**columns, kernel_names=(), status=tuple(status))


def one_iteration(collected: Collected, iteration: int, origin: int, end: int | None = None) -> Collected:
    """The records of one iteration, renumbered 0, times from `origin` (clipped at 0); NVML samples
    taken in [origin, end). Pairs with `records.one_iteration`."""
    c = collected
    k, u, m = c.kernel_iteration == iteration, c.um_iteration == iteration, c.memcpy_iteration == iteration
    n = (c.nvml_t_ns >= origin) & (c.nvml_t_ns < (np.inf if end is None else end))

    def shift(a: np.ndarray) -> np.ndarray:
        return np.maximum(a - origin, 0)

    return replace(
        c, kernel_iteration=np.zeros(int(k.sum()), dtype=np.int64), kernel_start_ns=shift(c.kernel_start_ns[k]),
        kernel_end_ns=shift(c.kernel_end_ns[k]), kernel_stream=c.kernel_stream[k], kernel_name=c.kernel_name[k],
        um_iteration=np.zeros(int(u.sum()), dtype=np.int64), um_start_ns=shift(c.um_start_ns[u]),
        um_end_ns=shift(c.um_end_ns[u]), um_kind=c.um_kind[u], um_value=c.um_value[u], um_records=c.um_records[u],
        memcpy_iteration=np.zeros(int(m.sum()), dtype=np.int64), memcpy_start_ns=shift(c.memcpy_start_ns[m]),
        memcpy_end_ns=shift(c.memcpy_end_ns[m]), memcpy_stream=c.memcpy_stream[m], memcpy_kind=c.memcpy_kind[m],
        memcpy_bytes=c.memcpy_bytes[m],
        nvml_t_ns=c.nvml_t_ns[n] - origin, nvml_memory_used_bytes=c.nvml_memory_used_bytes[n],
        nvml_pcie_tx_bytes_per_s=c.nvml_pcie_tx_bytes_per_s[n], nvml_pcie_rx_bytes_per_s=c.nvml_pcie_rx_bytes_per_s[n],
        nvml_gpu_util_pct=c.nvml_gpu_util_pct[n])
