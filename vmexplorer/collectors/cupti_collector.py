"""CUPTI activity records: unified-memory counters, kernels and memory copies, buffered and flushed per
iteration."""

from __future__ import annotations

import ctypes
import time
from typing import Any

from ..records.collected import CUPTI, PARTS

UM_COUNTERS = {  # CUPTI counter kind name -> our kind name
    "BYTES_TRANSFER_HTOD": "bytes_htod",
    "BYTES_TRANSFER_DTOH": "bytes_dtoh",
    "GPU_PAGE_FAULT": "gpu_page_fault_groups",
    "THRASHING": "thrashing",
    "THROTTLING": "throttling",
    "REMOTE_MAP": "remote_map",
}
# what each part a user can switch off asks of CUPTI: "migrations" (bytes each way, and the driver's
# thrashing, throttling and remote-mapping events) and "faults" (GPU page-fault records) are both
# unified-memory counters; "kernels" is kernel activity, "memcpy" memory-copy activity
MIGRATION_COUNTERS = ("BYTES_TRANSFER_HTOD", "BYTES_TRANSFER_DTOH", "THRASHING", "THROTTLING", "REMOTE_MAP")
FAULT_COUNTERS = ("GPU_PAGE_FAULT",)
# This collector's parts as `PARTS` lists them; its keyword arguments carry their names.
KERNELS, MIGRATIONS, FAULTS, MEMCPY = (p for p in PARTS if p.collector == CUPTI)
# CUPTI asks for a fresh buffer after every flush, inside the next iteration, so a large buffer slows
# the iterations it is allocated in: 8 MiB, where a 64 MiB one made device iterations with collectors
# much slower on the H100 (commit 02562cf)
BUFFER_BYTES = 8 << 20
# CUPTI takes one pair of buffer callbacks per process: register them once and hand the records to
# whichever collector is running (one run at a time per process)
_ACTIVE: list[CuptiCollector] = []
_REGISTERED: list[bool] = []


def _requested() -> tuple[int, int]:
    return BUFFER_BYTES, 0


def _completed(activities: list) -> None:
    if _ACTIVE:
        _ACTIVE[-1]._take(activities)
    else:
        _ORPHANS[0] += len(activities)


_ORPHANS = [0]  # records delivered while no collector was running (counted as dropped by the next)


def _dropped(cupti: Any) -> int:
    """Records CUPTI dropped for want of buffer space since the last call (its global queue); the
    count comes back through a pointer."""
    count = ctypes.c_size_t(0)
    cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(count))
    return int(count.value)


class CuptiCollector:
    name = CUPTI

    def __init__(self, device: int = 0, kernels: bool = True, migrations: bool = True, faults: bool = True,
                 memcpy: bool = True) -> None:
        self.device, self.want_kernels, self.want_memcpy = device, kernels, memcpy
        self.want_um = (MIGRATION_COUNTERS if migrations else ()) + (FAULT_COUNTERS if faults else ())
        self.available, self.reason = False, "not started"
        self.note = ""  # a limitation of a collector that runs
        self.dropped = 0
        self.unreadable = 0  # records that raised when read (counted in dropped)
        self._stopped = False
        self._um_taken: tuple[str, ...] = ()  # the counters CUPTI accepted
        self._um_kind_enabled = False
        self.counting_failed = ""  # why unified-memory counting could not be switched mid-run, if it could not
        self._um_kind: Any = None
        self._kernel_kinds: set[Any] = set()
        self._um_names: dict[int, str] = {}
        self._memcpy_kind: Any = None
        self._copy_names: dict[int, str] = {}
        # host time the run is held up: the flush at each iteration's end (callbacks run inside it or on
        # CUPTI's own thread); the full cost is what bench/gpu/bench_collectors.py measures side by side
        self.overhead_ns = 0
        self.rows: dict[str, list] = {k: [] for k in ("kernel_start", "kernel_end", "kernel_stream", "kernel_name",
                                                      "um_start", "um_end", "um_kind", "um_value",
                                                      "memcpy_start", "memcpy_end", "memcpy_stream", "memcpy_kind",
                                                      "memcpy_value")}
        self._kinds: list[Any] = []
        self._cupti: Any = None

    def clock(self) -> int:
        """CUPTI's timestamp now, in ns: the clock every record here is on."""
        return int(self._cupti.get_timestamp()) if self._cupti is not None else time.monotonic_ns()

    def start(self) -> None:
        try:
            from cupti import cupti
        except ImportError as e:
            self.reason = f"cupti-python is not installed ({e})"
            return
        self._cupti = cupti
        try:
            if not _REGISTERED:
                cupti.activity_register_callbacks(_requested, _completed)
                _REGISTERED.append(True)
            _ACTIVE.append(self)
            if self.want_um:
                self._configure_unified_memory(cupti)
                self._enable(cupti.ActivityKind.UNIFIED_MEMORY_COUNTER)
                self._um_kind_enabled = True
            if self.want_kernels:
                self._enable(cupti.ActivityKind.CONCURRENT_KERNEL)
            if self.want_memcpy:
                self._enable(cupti.ActivityKind.MEMCPY)
        except Exception as e:  # another profiler attached, no permission, unsupported device
            self.stop()
            self.reason = f"CUPTI refused: {type(e).__name__}: {e}"
            self._cupti = None
            return
        self.available, self.reason = True, self.note

    def _configure_unified_memory(self, cupti: Any) -> None:
        """All the counters asked for; when CUPTI refuses the set, each alone, keeping those it takes and
        naming the rest in the reason (a driver may not know a newer kind such as REMOTE_MAP)."""
        try:
            self._configure(cupti, self.want_um)
            self._um_taken = tuple(self.want_um)
            return
        except Exception:
            pass
        taken: list[str] = []
        refused: list[str] = []
        for name in self.want_um:
            try:
                self._configure(cupti, (*taken, name))
                taken.append(name)
            except Exception as e:
                refused.append(f"{name} ({type(e).__name__})")
        if not taken:
            raise RuntimeError("no unified-memory counter could be configured: " + ", ".join(refused))
        self._um_taken = tuple(taken)
        self.note = "unified-memory counters refused: " + ", ".join(refused)

    def _configure(self, cupti: Any, names: tuple[str, ...] | list[str], enable: int = 1) -> None:
        kinds = [getattr(cupti.ActivityUnifiedMemoryCounterKind, k) for k in names]
        config = cupti.ActivityUnifiedMemoryCounterConfig(len(kinds))
        config.scope = 1  # this process, one device
        config.device_id = self.device
        config.enable = enable
        for i, kind in enumerate(kinds):
            config[i].kind = kind
        cupti.activity_configure_unified_memory_counter(config.ptr, len(kinds))

    def counting(self, on: bool) -> None:
        """Unified-memory counting on or off between iterations, the other records untouched. CUPTI
        follows only managed memory allocated after its counters were first enabled, so `start()`
        enables them before the run allocates and a run that times its iterations without them switches
        them off here, then on again for the iterations it counts."""
        if not (self.available and self.want_um) or self._um_kind_enabled is on or self.counting_failed:
            return
        kind = self._cupti.ActivityKind.UNIFIED_MEMORY_COUNTER
        try:
            if on:
                self._configure(self._cupti, self._um_taken)
                self._enable(kind)
            else:
                self._cupti.activity_disable(kind)
                self._kinds.remove(kind)
                self._configure(self._cupti, self._um_taken, enable=0)
        except Exception as e:  # the run goes on; its unified-memory figures are named as missing
            self.counting_failed = f"CUPTI refused to switch its unified-memory counters {'on' if on else 'off'} " \
                                   f"between iterations: {type(e).__name__}: {e}"
            return
        self._um_kind_enabled = on

    def switched_off(self) -> list[tuple[str, str]]:
        """(status name, reason) for each part of CUPTI's records this run was asked not to collect, or
        that it could not count, so a session never reads a zero from a counter that was off as "none
        happened"."""
        why = "switched off for this run (--collectors)"
        off = [(part.status, f"{part.records} {why}") for part, on in (
            (KERNELS, self.want_kernels),
            (MIGRATIONS, bool(set(MIGRATION_COUNTERS) & set(self.want_um))),
            (FAULTS, bool(set(FAULT_COUNTERS) & set(self.want_um))),
            (MEMCPY, self.want_memcpy),
        ) if not on]
        named = {name for name, _ in off}
        return off + [(part.status, self.counting_failed) for part in (MIGRATIONS, FAULTS)
                      if self.counting_failed and part.status not in named]

    def _enable(self, kind: Any) -> None:
        self._cupti.activity_enable(kind)
        self._kinds.append(kind)

    def _take(self, activities: list) -> None:
        """Records to rows. A record that cannot be read is counted as dropped, never allowed to stop
        the rest of the buffer from being read (an exception here would lose them silently)."""
        cupti, rows = self._cupti, self.rows
        if self._um_kind is None:
            self._um_kind = cupti.ActivityKind.UNIFIED_MEMORY_COUNTER
            self._kernel_kinds = {cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.KERNEL}
            self._um_names = {int(k): UM_COUNTERS.get(k.name, k.name.lower())
                              for k in cupti.ActivityUnifiedMemoryCounterKind}
            self._memcpy_kind = cupti.ActivityKind.MEMCPY
            self._copy_names = {int(k): k.name.lower() for k in cupti.ActivityMemcpyKind}
        um_kind, kernel_kinds, names = self._um_kind, self._kernel_kinds, self._um_names
        um_start, um_end, um_kinds, um_value = (rows[k] for k in ("um_start", "um_end", "um_kind", "um_value"))
        for a in activities:
            try:
                kind = a.kind
                if kind == um_kind:
                    um_start.append(int(a.start))
                    um_end.append(int(a.end))
                    um_kinds.append(names.get(int(a.counter_kind), "unknown"))
                    um_value.append(int(a.value))
                elif kind in kernel_kinds:
                    rows["kernel_start"].append(int(a.start))
                    rows["kernel_end"].append(int(a.end))
                    rows["kernel_stream"].append(int(a.stream_id))
                    rows["kernel_name"].append(str(a.name))
                elif kind == self._memcpy_kind:
                    rows["memcpy_start"].append(int(a.start))
                    rows["memcpy_end"].append(int(a.end))
                    rows["memcpy_stream"].append(int(a.stream_id))
                    rows["memcpy_kind"].append(self._copy_names.get(int(a.copy_kind), "unknown"))
                    rows["memcpy_value"].append(int(a.bytes))
                # a record of a kind this collector did not enable is ignored
            except Exception:
                self.unreadable += 1
                for prefix, keys in (("um", ("start", "end", "kind", "value")),
                                     ("kernel", ("start", "end", "stream", "name")),
                                     ("memcpy", ("start", "end", "stream", "kind", "value"))):
                    columns = [rows[f"{prefix}_{k}"] for k in keys]
                    n = min(len(c) for c in columns)
                    for column in columns:
                        del column[n:]  # a record half read leaves no half row

    def flush(self) -> None:
        if self.available:
            t = time.perf_counter_ns()
            self._cupti.activity_flush_all(1)
            self.overhead_ns += time.perf_counter_ns() - t

    def stop(self) -> None:
        if self._cupti is None or self._stopped:
            return
        self._stopped = True
        try:
            self._cupti.activity_flush_all(1)
            for kind in self._kinds:
                self._cupti.activity_disable(kind)
            if self._um_taken and self._um_kind_enabled:
                # counters stay configured in the process: switch them off so a later run that asks
                # for fewer does not inherit them
                self._configure(self._cupti, self._um_taken, enable=0)
            self._kinds.clear()
            self.dropped += _dropped(self._cupti)
        except Exception:  # counting dropped records is best effort across cupti-python versions
            pass
        finally:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        self.dropped += self.unreadable + _ORPHANS[0]
        _ORPHANS[0] = 0
        if self.unreadable and self.available and not self.reason:
            self.reason = f"{self.unreadable} CUPTI records could not be read and were dropped"
