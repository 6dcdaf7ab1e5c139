"""Collectors with no GPU: they say why they are unavailable, and records land on the right iteration."""

import numpy as np

from vmexplorer.collectors import CuptiCollector, NvmlSampler
from vmexplorer.collectors.placement import place
from vmexplorer.records.collected import MEMCPY_KINDS


def test_records_land_on_the_iteration_that_began_before_them_and_warm_up_is_dropped():
    starts, offsets = [1_000, 5_000, 9_000], [0.0, 3_000.0, 6_500.0]
    keep, iteration, ns = place(starts, offsets, [500, 1_000, 4_999, 5_200, 12_000])
    assert keep.tolist() == [False, True, True, True, True]
    assert iteration.tolist() == [0, 0, 1, 2]
    assert ns.tolist() == [0, 3_999, 3_200, 9_500]


def test_collectors_without_their_packages_report_why_and_do_not_raise():
    cupti = CuptiCollector()
    cupti.start()
    cupti.flush()
    cupti.stop()
    try:
        import cupti as _  # noqa: F401
    except ImportError:
        assert not cupti.available and "cupti-python is not installed" in cupti.reason
    nvml = NvmlSampler(cupti.clock)
    nvml.start()
    nvml.stop()
    assert nvml.available or nvml.reason.startswith("NVML unavailable")
    assert all(len(v) == 0 for v in cupti.rows.values()) or cupti.available
    assert np.all(np.diff([cupti.clock(), cupti.clock()]) >= 0)


class _Fake:
    def __init__(self, name, rows, available=True, reason=""):
        self.name, self.rows, self.available, self.reason = name, rows, available, reason
        self.dropped, self.overhead_ns = 0, 4_000
        self.off: list[tuple[str, str]] = []

    def switched_off(self):
        return self.off


def test_raw_collector_rows_become_a_sessions_collected_records_on_its_axis():
    from vmexplorer.collectors.build import build_collected

    cupti = _Fake("cupti", {"kernel_start": [50, 1_100, 5_100], "kernel_end": [90, 1_400, 5_300],
                            "kernel_stream": [7, 7, 7], "kernel_name": ["warmup", "conv", "relu"],
                            "um_start": [1_200, 5_050], "um_end": [1_300, 5_150],
                            "um_kind": ["gpu_page_fault_groups", "bytes_htod"], "um_value": [12, 1 << 20],
                            "memcpy_start": [900, 1_500], "memcpy_end": [905, 1_510], "memcpy_stream": [7, 7],
                            "memcpy_kind": ["htod", "dtoh"], "memcpy_value": [8, 4]})
    nvml = _Fake("nvml", {}, available=False, reason="NVML unavailable: no driver")
    c = build_collected([cupti, nvml], t0s=[1_000, 5_000], offsets=[0.0, 2_000.0])
    assert c.kernel_names == ("conv", "relu")
    assert c.kernel_start_ns.tolist() == [100, 2_100] and c.kernel_end_ns.tolist() == [400, 2_300]
    assert c.um_iteration.tolist() == [0, 1] and c.um_value.tolist() == [12, 1 << 20]
    # the copy before the first recorded iteration is warm-up's
    assert (c.memcpy_start_ns.tolist(), c.memcpy_end_ns.tolist(), c.memcpy_bytes.tolist()) == ([500], [510], [4])
    assert [MEMCPY_KINDS[k] for k in c.memcpy_kind] == ["dtoh"]
    status = {s.name: s for s in c.status}
    assert status["nvml"].reason.startswith("NVML unavailable") and status["cupti"].overhead_ns == 2_000


def test_nvml_samples_taken_between_iterations_are_dropped_since_the_timeline_has_no_room_for_them():
    from vmexplorer.collectors.build import build_collected

    nvml = _Fake("nvml", {"t": [1_100, 1_900, 5_100], "memory_used": [1, 2, 3], "pcie_tx": [0, 0, 0],
                          "pcie_rx": [10, 20, 30], "gpu_util": [50, 0, 60]})
    # iteration 0 ran from clock 1,000 for 500 ns; the sample at 1,900 came while the collectors drained
    c = build_collected([nvml], t0s=[1_000, 5_000], offsets=[0.0, 500.0], lengths=[500.0, 400.0])
    assert c.nvml_t_ns.tolist() == [100, 600] and c.nvml_pcie_rx_bytes_per_s.tolist() == [10, 30]


def test_a_part_of_cupti_switched_off_is_named_in_the_session_so_its_zeros_are_not_read_as_none():
    from vmexplorer.collectors.build import build_collected
    from vmexplorer.records import Timeline
    from vmexplorer.records.collected import collected_summary

    real = CuptiCollector(faults=False)
    assert [name for name, _ in real.switched_off()] == ["cupti_faults"]
    assert "GPU_PAGE_FAULT" not in real.want_um and "BYTES_TRANSFER_HTOD" in real.want_um
    cupti = _Fake("cupti", {"um_start": [1_200], "um_end": [1_300], "um_kind": ["bytes_htod"], "um_value": [4096]})
    cupti.off = real.switched_off()
    c = build_collected([cupti], t0s=[1_000], offsets=[0.0])
    status = {s.name: s for s in c.status}
    assert not status["cupti_faults"].available and "switched off" in status["cupti_faults"].reason
    one, none = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    tl = Timeline(source="measured", op_iteration=one, op_index=one, op_start_ns=one, op_end_ns=one + 1_000,
                  op_stall_ns=one, op_fault_bytes=one, memop_iteration=none, memop_index=none, memop_start_ns=none,
                  memop_end_ns=none, resident_t_ns=one, resident_bytes=one)
    s = collected_summary(tl, c)
    assert s["bytes_htod"] == 4096 and "fault_groups" not in s


def test_a_record_that_cannot_be_read_is_counted_as_dropped_and_the_rest_of_the_buffer_is_kept():
    import enum
    from types import SimpleNamespace

    class Kind(enum.IntEnum):
        UNIFIED_MEMORY_COUNTER = 1
        CONCURRENT_KERNEL = 2
        KERNEL = 3
        MEMCPY = 4

    class Copy(enum.IntEnum):
        UNKNOWN = 0
        HTOD = 1
        DTOH = 2

    class Counter(enum.IntEnum):
        BYTES_TRANSFER_HTOD = 1
        GPU_PAGE_FAULT = 4

    class Broken:
        kind = Kind.UNIFIED_MEMORY_COUNTER
        start, end, counter_kind = 5, 6, 1

        @property
        def value(self):
            raise ValueError("a record CUPTI could not decode")

    um = SimpleNamespace(kind=Kind.UNIFIED_MEMORY_COUNTER, start=10, end=20, counter_kind=1, value=4096)
    fault = SimpleNamespace(kind=Kind.UNIFIED_MEMORY_COUNTER, start=30, end=30, counter_kind=4, value=6)
    kernel = SimpleNamespace(kind=Kind.CONCURRENT_KERNEL, start=1, end=9, stream_id=7, name="conv")
    copy = SimpleNamespace(kind=Kind.MEMCPY, start=40, end=41, stream_id=7, copy_kind=2, bytes=4)
    c = CuptiCollector()
    c._cupti = SimpleNamespace(ActivityKind=Kind, ActivityUnifiedMemoryCounterKind=Counter, ActivityMemcpyKind=Copy)
    c._take([um, Broken(), kernel, copy, fault])
    assert c.rows["um_kind"] == ["bytes_htod", "gpu_page_fault_groups"] and c.rows["um_value"] == [4096, 6]
    assert c.rows["um_start"] == [10, 30] and c.rows["kernel_name"] == ["conv"]
    assert (c.rows["memcpy_kind"], c.rows["memcpy_value"], c.rows["memcpy_stream"]) == (["dtoh"], [4], [7])
    assert c.unreadable == 1


def test_counting_that_cannot_be_switched_mid_run_names_the_unified_memory_figures_missing_and_does_not_raise():
    from types import SimpleNamespace

    def refuse(*_):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    c = CuptiCollector(faults=False)
    c.available, c._um_kind_enabled, c._um_taken = True, True, ("BYTES_TRANSFER_HTOD",)
    c._cupti = SimpleNamespace(ActivityKind=SimpleNamespace(UNIFIED_MEMORY_COUNTER=1), activity_disable=refuse)
    c.counting(False)  # off for the timed iterations: refused
    c.counting(True)  # and nothing more is tried
    assert "refused to switch its unified-memory counters off" in c.counting_failed
    names = [name for name, _ in c.switched_off()]
    assert names == ["cupti_faults", "cupti_um"]  # each once: faults was switched off already
    assert dict(c.switched_off())["cupti_um"] == c.counting_failed
