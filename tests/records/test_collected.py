"""Collector records on the CPU: per-op attribution, per-iteration summaries, thinning that keeps every
total, validation of what the collectors hand over, and the Chrome trace of a session carrying them.
Everything runs on synthetic records: CI has no GPU."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import Direction
from vmexplorer.policies import compile_plan
from vmexplorer.records import Timeline
from vmexplorer.records.collected import (
    BYTES_DTOH,
    BYTES_HTOD,
    GPU_PAGE_FAULT_GROUPS,
    UM_KINDS,
    Collected,
    CollectedError,
    CollectorStatus,
    busiest_stream,
    check_against,
    collected_summary,
    migration_shares,
    no_records,
    per_op,
    thin,
)
from vmexplorer.session import new_session
from vmexplorer.session.trace import KERNELS, chrome_trace

FAULT, HTOD, DTOH = GPU_PAGE_FAULT_GROUPS, BYTES_HTOD, BYTES_DTOH
COMPUTE, COPY = 7, 13  # stream ids, as CUPTI numbers them

# Two iterations of three op rows each, with a gap of 10 ns before each iteration's last op:
#   iteration 0: [0, 100) [100, 250) gap [260, 300)     iteration 1: [300, 400) [400, 550) gap [560, 600)
SPANS = [(0, 0, 100), (0, 100, 250), (0, 260, 300), (1, 300, 400), (1, 400, 550), (1, 560, 600)]
OK = (CollectorStatus("cupti", True, "", 0, 1500), CollectorStatus("nvml", True, "", 2, 500))


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph("alexnet", 2, 64)


def timeline(spans: list[tuple[int, int, int]] = SPANS, source: str = "measured") -> Timeline:
    it, start, end = (np.array(c, dtype=np.int64) for c in zip(*spans))
    ops = np.arange(len(spans), dtype=np.int64) % 3
    none = np.zeros(0, dtype=np.int64)
    return Timeline(source, it, ops, start, end, np.zeros_like(it), np.zeros_like(it), none, none, none, none,
                    np.array([0]), np.array([100]))


def make(kernels: Sequence[tuple[int, int, int, int, int]] = (),
         um: Sequence[tuple[int, int, int, int, float]] = (),
         nvml: Sequence[tuple[int, int, float, float, float]] = (),
         status: tuple[CollectorStatus, ...] = OK, **extra: Any) -> Collected:
    """kernels: (iteration, start, end, stream, name); um: (iteration, start, end, kind, value);
    nvml: (t, memory used, tx, rx, util)."""
    def cols(rows: list[tuple[Any, ...]], n: int) -> list[list[Any]]:
        return [list(c) for c in zip(*rows)] if rows else [[] for _ in range(n)]

    k, u, v = cols(list(kernels), 5), cols(list(um), 5), cols(list(nvml), 5)
    return Collected(*k, ("sgemm", "relu_kernel", "im2col"), *u, *v, status, **extra)


# --- per-op attribution ---------------------------------------------------------------------------

def test_kernels_count_in_full_for_the_op_whose_span_holds_their_start(graph: Graph) -> None:
    c = make(kernels=[(0, 10, 60, COMPUTE, 0), (0, 60, 95, COMPUTE, 1),  # op row 0
                      (0, 99, 130, COMPUTE, 0),  # starts in row 0, ends in row 1: all of it to row 0
                      (0, 100, 240, COMPUTE, 2),  # starts exactly at row 1's start: row 1
                      (0, 252, 258, COMPUTE, 1),  # in the gap before row 2: nowhere
                      (1, 300, 390, COMPUTE, 0),  # row 3
                      (0, 20, 80, COPY, 1)])  # another stream: not the compute stream's time
    f = per_op(graph, timeline(), c)
    assert f["kernel_ns"].tolist() == [50 + 35 + 31, 140, 0, 90, 0, 0]
    assert f["kernels"].tolist() == [3, 1, 0, 1, 0, 0]
    assert f["kernel_ns"].dtype == np.int64 and len(f["kernel_ns"]) == len(SPANS)


def test_the_compute_stream_is_the_busiest_one_unless_named(graph: Graph) -> None:
    c = make(kernels=[(0, 0, 10, COMPUTE, 0), (0, 20, 30, COMPUTE, 0), (0, 0, 15, COPY, 0)])
    assert busiest_stream(c) == COMPUTE and busiest_stream(make()) is None
    assert per_op(graph, timeline(), c)["kernel_ns"][0] == 20
    assert per_op(graph, timeline(), c, compute_stream=COPY)["kernel_ns"][0] == 15
    assert per_op(graph, timeline(), c, compute_stream=99)["kernel_ns"].sum() == 0


def test_faults_and_bytes_count_in_the_op_where_they_start(graph: Graph) -> None:
    c = make(um=[(0, 5, 6, FAULT, 12), (0, 50, 52, FAULT, 30),  # row 0: two groups, 42 faults
                 (0, 255, 256, FAULT, 7),  # in the gap: nowhere
                 (0, 270, 271, FAULT, 1),  # row 2
                 (1, 400, 401, FAULT, 5),  # row 4, exactly at its start
                 (0, 10, 20, HTOD, 4096), (0, 110, 300, DTOH, 1 << 20), (1, 599, 700, HTOD, 65536)])
    f = per_op(graph, timeline(), c)
    assert f["faulted_pages"].tolist() == [2, 0, 1, 0, 1, 0]
    assert f["fault_groups"].tolist() == [42, 0, 1, 0, 5, 0]
    assert f["bytes_htod"].tolist() == [4096, 0, 0, 0, 0, 65536]
    assert f["bytes_dtoh"].tolist() == [0, 1 << 20, 0, 0, 0, 0]


def test_records_go_by_their_iteration_label_at_iteration_boundaries(graph: Graph) -> None:
    # t = 300 is where iteration 1 starts: a record labelled 0 there falls in no op of iteration 0
    c = make(um=[(1, 300, 301, FAULT, 3), (0, 300, 301, FAULT, 100), (1, 250, 251, FAULT, 1000)],
             kernels=[(1, 300, 320, COMPUTE, 0), (0, 299, 305, COMPUTE, 0)])
    f = per_op(graph, timeline(), c)
    assert f["fault_groups"].tolist() == [0, 0, 0, 3, 0, 0]
    assert f["kernel_ns"].tolist() == [0, 0, 6, 20, 0, 0]


def test_window_sums_share_a_long_transfer_among_the_ops_it_ran_under(graph: Graph) -> None:
    # a 1 MiB eviction from 50 to 250 ns: a quarter under row 0, three quarters under row 1
    c = make(um=[(0, 50, 250, DTOH, 1 << 20), (0, 120, 120, HTOD, 999),  # no duration: in full
                 (1, 500, 600, HTOD, 1000)])  # half in row 4, 10% in the gap, 40% in row 5
    f = per_op(graph, timeline(), c)
    assert f["window_bytes_dtoh"] == pytest.approx([(1 << 20) / 4, 3 * (1 << 20) / 4, 0, 0, 0, 0])
    assert f["window_bytes_htod"] == pytest.approx([0, 999, 0, 0, 500, 400])
    assert f["bytes_dtoh"].tolist() == [1 << 20, 0, 0, 0, 0, 0]  # by start: all of it where it began


def test_an_eviction_in_the_stall_before_an_op_counts_in_that_ops_window(graph: Graph) -> None:
    tl = dataclasses.replace(timeline(), op_stall_ns=np.array([0, 0, 10, 0, 0, 10]))
    c = make(um=[(0, 252, 258, DTOH, 600)])  # in the gap before iteration 0's last op
    f = per_op(graph, tl, c)
    assert f["window_bytes_dtoh"].tolist() == [0, 0, 600, 0, 0, 0]
    assert f["bytes_dtoh"].tolist() == [0] * 6  # by its start it falls between ops: it counts nowhere


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 590), st.integers(0, 300), st.integers(0, 10**9)), max_size=40))
def test_windows_that_tile_the_time_share_out_every_byte(graph: Graph, records: list[tuple[int, int, int]]) -> None:
    tiles = [(0, 0, 300), (1, 300, 900)]  # no gaps: every record lies within the ops' windows
    c = make(um=[(int(s >= 300), s, s + d, HTOD, v) for s, d, v in records])
    f = per_op(graph, timeline(tiles), c)
    total = sum(v for _, _, v in records)
    assert f["window_bytes_htod"].sum() == pytest.approx(total, rel=1e-9, abs=1e-3)
    assert f["bytes_htod"].sum() == total


# --- summary --------------------------------------------------------------------------------------

def test_the_summary_gives_medians_per_iteration_and_the_collectors_costs(graph: Graph) -> None:
    c = make(um=[(0, 5, 6, FAULT, 10), (0, 7, 8, FAULT, 20), (1, 305, 306, FAULT, 40),
                 (0, 10, 20, HTOD, 100), (1, 310, 320, HTOD, 300), (1, 320, 330, DTOH, 50)],
             kernels=[(0, 0, 90, COMPUTE, 0), (1, 300, 400, COMPUTE, 0), (1, 400, 420, COMPUTE, 1)],
             nvml=[(0, 10**9, 1e9, 2e9, 50.0), (300, 3 * 10**9, 1e9, 2e9, 100.0)])
    s = collected_summary(timeline(), c)
    assert (s["fault_groups"], s["faulted_pages"]) == (35, 1)  # medians of (30, 40) and (2, 1), truncated
    assert (s["bytes_htod"], s["bytes_dtoh"], s["kernel_ns"], s["kernels"]) == (200, 25, 105, 1)
    assert s["collector_flush_ns"] == 2000 and "collector_overhead_pct" not in s
    assert s["dropped_records"] == 2
    assert (s["nvml_peak_memory_used_bytes"], s["nvml_gpu_util_pct"]) == (3 * 10**9, 75.0)
    assert not any(k.endswith(("_unavailable", "_note")) for k in s)


def test_unified_memory_figures_come_from_the_counted_iterations_and_the_rest_from_the_timed_ones() -> None:
    counted = dataclasses.replace(timeline(), counted=1)  # iteration 1 ran with the counters on
    c = make(um=[(1, 305, 306, FAULT, 40), (1, 310, 320, HTOD, 300), (1, 320, 330, DTOH, 50)],
             kernels=[(0, 0, 90, COMPUTE, 0), (1, 300, 400, COMPUTE, 0), (1, 400, 420, COMPUTE, 1)])
    s = collected_summary(counted, c)
    assert (s["fault_groups"], s["bytes_htod"], s["bytes_dtoh"]) == (40, 300, 50)  # not the median with a 0
    assert (s["kernel_ns"], s["kernels"], s["um_counted_iterations"]) == (90, 1, 1)  # the timed iteration's
    every = collected_summary(timeline(), c)
    assert (every["bytes_htod"], every["kernel_ns"]) == (150, 105) and "um_counted_iterations" not in every


def test_an_unavailable_collector_gives_its_reason_and_no_zeros_in_its_place() -> None:
    status = (CollectorStatus("cupti", False, "cupti-python not installed", 0, 0),
              CollectorStatus("nvml", True, "PCIe counters unsupported", 0, 0))
    s = collected_summary(timeline(), no_records(status))
    assert s["cupti_unavailable"] == "cupti-python not installed"
    assert s["nvml_note"] == "PCIe counters unsupported"
    assert not {"fault_groups", "bytes_htod", "kernel_ns"} & set(s)
    um_off = no_records((CollectorStatus("cupti_um", False, "unified-memory counters unsupported on this device",
                                         0, 0),))
    s = collected_summary(timeline(), um_off)
    assert "kernel_ns" in s and "bytes_htod" not in s and "fault_groups" in s


def test_page_faults_switched_off_leave_the_fault_figures_out_and_keep_the_bytes() -> None:
    faults_off = no_records((CollectorStatus("cupti_faults", False, "switched off for this run (--collectors)",
                                             0, 0),))
    s = collected_summary(timeline(), faults_off)
    assert s["cupti_faults_unavailable"] == "switched off for this run (--collectors)"
    assert "bytes_htod" in s and "remote_map_bytes" in s and not {"fault_groups", "faulted_pages"} & set(s)


def test_migration_shares_set_cuptis_bytes_against_the_bytes_the_plan_moved_each_way(graph: Graph) -> None:
    plan = compile_plan(graph, max(graph.footprint // 2, graph.min_capacity[0]), "uvm")
    moved_in = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE)
    moved_out = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
    assert moved_in and moved_out, "the case must page"
    # iteration 0 delivers every byte in, iteration 1 half of them: the median iteration three quarters
    c = make(um=[(0, 10, 20, HTOD, moved_in), (1, 310, 320, HTOD, moved_in // 2),
                 (0, 30, 40, DTOH, moved_out), (1, 330, 340, DTOH, moved_out)])
    shares = migration_shares(plan, timeline(), c)
    assert shares == {"htod_share": pytest.approx(0.75, abs=1e-3), "dtoh_share": 1.0}
    assert migration_shares(plan, timeline(source="simulated"), c) == {}
    device = compile_plan(graph, graph.footprint, "device")
    assert migration_shares(device, timeline(), c) == {}  # nothing moved: nothing to set them against
    um_off = make(status=(CollectorStatus("cupti_um", False, "switched off for this run (--collectors)", 0, 0),))
    assert migration_shares(plan, timeline(), um_off) == {}


def test_memory_copies_give_their_count_and_bytes_per_iteration_and_follow_their_iteration() -> None:
    from vmexplorer.records.collected import MEMCPY_KINDS, one_iteration

    dtoh, htod = MEMCPY_KINDS.index("dtoh"), MEMCPY_KINDS.index("htod")
    c = make(memcpy_iteration=[0, 1, 1], memcpy_start_ns=[10, 310, 320], memcpy_end_ns=[11, 311, 330],
             memcpy_stream=[COMPUTE] * 3, memcpy_kind=[dtoh, dtoh, htod], memcpy_bytes=[4, 4, 100])
    s = collected_summary(timeline(), c)
    assert (s["memcpys"], s["memcpy_bytes"]) == (1, 54)  # medians of (1, 2) and (4, 104), truncated
    second = one_iteration(c, 1, origin=300)
    assert second.memcpy_start_ns.tolist() == [10, 20] and second.memcpy_iteration.tolist() == [0, 0]
    assert second.memcpy_kind.tolist() == [dtoh, htod] and second.memcpy_bytes.tolist() == [4, 100]
    with pytest.raises(CollectedError, match="memcpy_kind row 0 is 99: not an index into MEMCPY_KINDS"):
        make(memcpy_iteration=[0], memcpy_start_ns=[1], memcpy_end_ns=[2], memcpy_stream=[7], memcpy_kind=[99],
             memcpy_bytes=[4])


# --- thinning -------------------------------------------------------------------------------------

def totals(c: Collected) -> dict[tuple[int, int], tuple[int, int]]:
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for k, it, v, r in zip(c.um_kind.tolist(), c.um_iteration.tolist(), c.um_value.tolist(),
                           c.um_records.tolist()):
        a, b = out.get((k, it), (0, 0))
        out[(k, it)] = (a + v, b + r)
    return out


def test_thinning_merges_records_less_than_a_microsecond_apart_and_keeps_the_totals() -> None:
    c = make(um=[(0, 0, 100, FAULT, 3), (0, 600, 700, FAULT, 4),  # 500 ns apart: merged
                 (0, 1700, 1800, FAULT, 5),  # 1000 ns after the last end: not merged
                 (0, 650, 2000, HTOD, 10), (0, 2500, 2600, HTOD, 20),  # another kind: merged with itself
                 (1, 2650, 2700, FAULT, 6)])  # another iteration: never merged with iteration 0
    t = thin(c)
    assert totals(t) == totals(c)
    rows = list(zip(t.um_iteration.tolist(), t.um_start_ns.tolist(), t.um_end_ns.tolist(),
                    [UM_KINDS[k] for k in t.um_kind.tolist()], t.um_value.tolist(), t.um_records.tolist()))
    assert rows == [(0, 0, 700, "gpu_page_fault_groups", 7, 2), (0, 650, 2600, "bytes_htod", 30, 2),
                    (0, 1700, 1800, "gpu_page_fault_groups", 5, 1), (1, 2650, 2700, "gpu_page_fault_groups", 6, 1)]
    assert len(t.kernel_iteration) == len(c.kernel_iteration)


def test_thinning_to_a_row_budget_widens_the_gap_and_still_keeps_the_totals(graph: Graph) -> None:
    rng = np.random.default_rng(1)
    n = 5000
    starts = np.sort(rng.integers(0, 600, n) * 1000)
    its = (starts >= 300_000).astype(np.int64)
    c = Collected(*[np.zeros(0, np.int64)] * 5, (), its, starts, starts + rng.integers(0, 500, n),
                  rng.choice([FAULT, HTOD, DTOH], n), rng.integers(0, 2**40, n), *[np.zeros(0)] * 5, OK)
    for budget in (2000, 100, 6, 1):
        t = thin(c, max_rows=budget)
        assert totals(t) == totals(c)
        assert len(t.um_value) <= max(budget, 6)  # at worst one row per kind and iteration
        assert int(t.um_records.sum()) == n
    assert len(thin(c, max_rows=None, gap_ns=0).um_value) <= n
    assert totals(thin(thin(c))) == totals(c)
    tl = timeline([(0, 0, 300_000), (1, 300_000, 600_000)])
    f, g = per_op(graph, tl, c), per_op(graph, tl, thin(c, max_rows=6))
    assert g["faulted_pages"].tolist() == f["faulted_pages"].tolist()  # by iteration: each op is one
    assert g["fault_groups"].tolist() == f["fault_groups"].tolist()


def test_thinning_nothing_gives_back_the_same_records() -> None:
    c = make(kernels=[(0, 0, 1, COMPUTE, 0)])
    assert thin(c) is c
    with pytest.raises(ValueError, match="at least one row"):
        thin(c, max_rows=0)


# --- validation -----------------------------------------------------------------------------------

def test_columns_become_int64_or_float64_and_um_records_default_to_one() -> None:
    c = make(kernels=[(0, 0, 1, COMPUTE, 0)], um=[(0, 0, 5, FAULT, 3)],
             nvml=[(0, 10, 1.5, 2.0, 3.0)])
    assert c.kernel_start_ns.dtype == np.int64 and c.nvml_pcie_tx_bytes_per_s.dtype == np.float64
    assert c.um_records.tolist() == [1] and c.iterations == 1
    u = Collected(*[np.zeros(0, np.uint32)] * 5, (), np.array([0], np.uint64), np.array([1], np.uint64),
                  np.array([2], np.uint64), np.array([FAULT], np.uint32), np.array([2.0]), *[[]] * 5, ())
    assert u.um_start_ns.dtype == np.int64 and u.um_value.dtype == np.int64


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("name index", dict(kernels=[(0, 0, 1, COMPUTE, 3)]), "kernel_name row 0 is 3: not an index into kernel_names"),
    ("um kind", dict(um=[(0, 0, 1, 7, 1)]), "um_kind row 0 is 7: not an index into UM_KINDS; expected 0 to 6"),
    ("negative time", dict(um=[(0, -5, 1, FAULT, 1)]), "um_start_ns row 0 is -5"),
    ("negative value", dict(um=[(0, 5, 6, HTOD, -1)]), "um_value row 0 is -1"),
    ("backwards", dict(kernels=[(0, 9, 5, COMPUTE, 0)]), "kernel row 0 ends (kernel_end_ns) before it starts"),
    ("utilisation", dict(nvml=[(0, 1, 0.0, 0.0, 100.5)]), "nvml_gpu_util_pct row 0 is 100.5"),
    ("fractional bytes", dict(um=[(0, 5, 6, HTOD, 1.5)]), "um_value row 0 is 1.5: um_value holds whole numbers"),
    ("nan", dict(nvml=[(0, 1, float("nan"), 0.0, 1.0)]), "not a finite number"),
    ("lengths", dict(um=[(0, 5, 6, HTOD, 1)], um_records=[1, 1]), "must be of one length"),
    ("zero records", dict(um=[(0, 5, 6, HTOD, 1)], um_records=[0]), "um_records row 0 is 0"),
    ("twice", dict(status=(OK[0], OK[0])), "names collector 'cupti' twice"),
]


@pytest.mark.parametrize("columns, expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_malformed_records_are_one_clear_error(columns: dict[str, Any], expected: str) -> None:
    with pytest.raises(CollectedError) as info:
        make(**columns)
    assert expected in str(info.value)


def test_a_collector_status_says_why_it_is_unavailable() -> None:
    with pytest.raises(CollectedError, match="unavailable: say why"):
        CollectorStatus("cupti", False, " ", 0, 0)
    with pytest.raises(CollectedError, match="overhead_ns should be a whole number >= 0"):
        CollectorStatus("cupti", True, "", 0, -1)
    with pytest.raises(CollectedError, match="available should be true or false"):
        CollectorStatus("cupti", 1, "", 0, 0)  # type: ignore[arg-type]


def test_records_must_fit_a_measured_timeline() -> None:
    c = make(um=[(1, 300, 301, FAULT, 1)])
    check_against(c, timeline())
    with pytest.raises(CollectedError, match="um_iteration row 0 is 1, but the timeline records 1 iteration"):
        check_against(c, timeline(SPANS[:3]))
    with pytest.raises(CollectedError, match="belong to a measured session"):
        check_against(c, timeline(source="simulated"))


# --- Chrome trace ---------------------------------------------------------------------------------

def test_the_trace_shows_kernels_per_stream_memory_copies_and_um_counters_per_op() -> None:
    graph = build_graph("alexnet", 2, 64)
    plan = compile_plan(graph, graph.footprint, "device", {})
    n = len(graph.ops)
    spans = [(0, 100 * i, 100 * i + 90) for i in range(n)]
    tl = dataclasses.replace(timeline(spans), op_index=np.arange(n, dtype=np.int64))
    c = make(kernels=[(0, 0, 50, COMPUTE, 0), (0, 50, 80, COMPUTE, 1), (0, 10, 40, COPY, 2),
                      (0, 20, 30, COPY, 2)],
             um=[(0, 5, 6, FAULT, 12), (0, 105, 106, FAULT, 3), (0, 0, 180, HTOD, 1800)],
             memcpy_iteration=[0], memcpy_start_ns=[95], memcpy_end_ns=[97], memcpy_stream=[COMPUTE],
             memcpy_kind=[2], memcpy_bytes=[4])
    s = new_session(graph, plan, tl, collected=c)
    events = chrome_trace(s)["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[KERNELS] == "kernels (CUPTI)" and threads[KERNELS + 1] == f"kernels (CUPTI), stream {COPY}"
    kernels = [e for e in events if e["ph"] == "X" and e.get("cat") == "kernel"]
    assert sorted((e["tid"], e["name"], e["ts"]) for e in kernels) == [
        (KERNELS, "relu_kernel", 0.05), (KERNELS, "sgemm", 0.0), (KERNELS + 1, "im2col", 0.01),
        (KERNELS + 1, "im2col", 0.02)]
    copies = [e for e in events if e["ph"] == "X" and e.get("cat") == "memcpy"]
    assert threads[KERNELS + 2] == "memory copies (CUPTI)"
    assert [(e["tid"], e["name"], e["ts"], e["args"]["bytes"]) for e in copies] == [
        (KERNELS + 2, "memcpy dtoh 4 B", 0.095, 4)]
    faults = [e for e in events if e["name"] == "fault_groups"]
    assert [e["args"]["fault_groups"] for e in faults[:3]] == [12, 3, 0] and faults[-1]["args"]["fault_groups"] == 0
    htod = [e["args"]["htod"] for e in events if e["name"] == "UM bytes htod/dtoh"]
    assert htod[:3] == [900, 800, 0] and sum(htod) == 1700  # 100 of the 1800 bytes fell in the gaps
    assert chrome_trace(s)["metadata"]["collectors"] == {"cupti": True, "nvml": True}
