"""Finding things in a session: rows of every op and tensor, a bounded search over them, and the details of
one op or transfer in words, at the times the timeline draws them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vmexplorer.details import (
    MAX_QUERY_CHARS,
    filter_rows,
    memop_details,
    memop_range_name,
    memop_row,
    memop_span_ms,
    op_details,
    op_range_name,
    op_rows,
    op_span_ms,
    tensor_details,
    tensor_rows,
    tensor_span_ms,
    zoom_window,
)
from vmexplorer.plan import Direction, Mode, Origin
from vmexplorer.session import Session, load_session
from vmexplorer.session.iterations import iteration_view
from vmexplorer.units import format_bytes

SAMPLES = Path(__file__).resolve().parents[1] / "sample_sessions"


@pytest.fixture(scope="module")
def uvm() -> Session:
    return load_session(SAMPLES / "vgg19-b64-uvm-50pct.measured.vms")


@pytest.fixture(scope="module")
def autovm() -> Session:
    return load_session(SAMPLES / "vgg19-b64-autovm-50pct.measured.vms")


def _typical_op_column(session: Session, column: np.ndarray) -> np.ndarray:
    """A per-op column of the typical iteration, by op index, read straight off the timeline."""
    tl = session.timeline
    rows = tl.op_iteration == tl.typical_iteration()
    out = np.zeros(len(session.graph.ops), dtype=np.int64)
    out[tl.op_index[rows]] = column[rows]
    return out


def test_every_op_of_the_graph_has_one_row_in_execution_order_with_its_layer(uvm: Session) -> None:
    rows = op_rows(uvm)
    assert [r["op"] for r in rows] == list(range(len(uvm.graph.ops)))
    assert [r["name"] for r in rows] == [op.name for op in uvm.graph.ops]
    # vgg19's op names are the layer, or the layer and what its backward or update does
    assert all(r["layer"] == r["name"].removesuffix(".backward").removesuffix(".sgd") for r in rows)


def test_op_rows_carry_the_typical_iterations_time_stall_and_fault_bytes(uvm: Session) -> None:
    rows = op_rows(uvm)
    tl = uvm.timeline
    took = _typical_op_column(uvm, tl.op_end_ns - tl.op_start_ns)
    assert [r["time_ms"] for r in rows] == pytest.approx(took / 1e6, abs=1e-4)
    assert [r["stall_ms"] for r in rows] == pytest.approx(_typical_op_column(uvm, tl.op_stall_ns) / 1e6, abs=1e-4)
    assert [r["fault_bytes"] for r in rows] == _typical_op_column(uvm, tl.op_fault_bytes).tolist()
    assert sum(r["fault_bytes"] for r in rows) > 0


def test_tensor_rows_list_every_tensor_small_ones_too_with_how_the_plan_moves_it(autovm: Session) -> None:
    rows = tensor_rows(autovm)
    assert [r["name"] for r in rows] == [t.name for t in autovm.graph.tensors]
    assert any(r["bytes"] < 2 << 20 for r in rows)
    planned = {m.tensor for m in autovm.plan.memops if m.origin is Origin.PLAN and m.direction is Direction.TO_HOST}
    assert planned and {r["tensor"] for r in rows if r["offloaded"]} == planned
    weight = next(r for r in rows if r["name"] == "features.0.weight")
    assert weight["layer"] == "features.0" and weight["producer"] == "before the iteration"


def test_the_search_ignores_case_and_matches_names_and_layers(uvm: Session) -> None:
    rows = op_rows(uvm)
    found = filter_rows(rows, "FEATURES.10")
    assert found == filter_rows(rows, "features.10") and 0 < len(found) < len(rows)
    assert all("features.10" in r["name"] or "features.10" in r["layer"] for r in found)
    assert filter_rows(rows, "") == rows and filter_rows(rows, None) == rows


def test_the_search_is_a_plain_substring_cut_to_a_bounded_length() -> None:
    rows = [{"name": "a" * 200, "layer": ""}, {"name": "features.1", "layer": "features.1"}]
    assert filter_rows(rows, "a" * 100_000) == rows[:1]  # only the first MAX_QUERY_CHARS count
    assert filter_rows(rows, "a" * MAX_QUERY_CHARS + "b") == rows[:1]
    assert filter_rows(rows, ".*") == [] and filter_rows(rows, "features.[") == []


def test_the_kind_filter_keeps_rows_of_that_kind_or_pass(uvm: Session) -> None:
    backward = filter_rows(op_rows(uvm), "", "backward")
    assert backward and all(r["phase"] == "backward" for r in backward)
    convs = filter_rows(op_rows(uvm), "features", "conv2d")
    assert convs and all(r["kind"] == "conv2d" for r in convs)
    weights = filter_rows(tensor_rows(uvm), "classifier", "weight")
    assert [r["name"] for r in weights] == [f"classifier.{k}.{w}" for k in (0, 3, 6) for w in ("weight", "bias")]


def test_the_details_of_a_faulting_op_name_the_bytes_it_faulted_in(uvm: Session) -> None:
    faults = _typical_op_column(uvm, uvm.timeline.op_fault_bytes)
    op = int(np.argmax(faults))
    lines = dict(op_details(uvm, op))
    assert lines["faulted in while it ran"] == format_bytes(int(faults[op]))
    assert uvm.graph.ops[op].name in lines["op"] and lines["NVTX range"] == uvm.graph.ops[op].name
    faulted = [uvm.graph.tensors[m.tensor].name for m in uvm.plan.memops
               if m.mode is Mode.FAULT and m.complete_before == op]
    assert faulted and all(name in lines["tensors it faulted"] for name in faulted)
    quiet = int(np.flatnonzero(faults == 0)[0])
    assert dict(op_details(uvm, quiet))["faulted in while it ran"] == "no demand faults"


def test_the_details_of_an_op_list_the_transfers_issued_after_it(autovm: Session) -> None:
    m = next(m for m in autovm.plan.memops if m.origin is Origin.PLAN and m.direction is Direction.TO_HOST)
    issued = dict(op_details(autovm, m.issue_after))["transfers issued after it"]
    assert f"planned offload of {autovm.graph.tensors[m.tensor].name} to the host" in issued


def test_nvtx_range_names_are_what_the_executor_pushes(autovm: Session) -> None:
    g = autovm.graph
    assert [op_range_name(op) for op in g.ops] == [op.name for op in g.ops]
    issued = [(i, m) for i, m in enumerate(autovm.plan.memops) if m.mode is not Mode.FAULT]
    # as Nsight Systems shows them: the direction, then the tensor (the executor pushes these names)
    assert all(memop_range_name(g, m) == f"{m.direction.value} {g.tensors[m.tensor].name}" for _, m in issued)
    i, m = next((i, m) for i, m in issued if m.origin is Origin.PLAN and m.direction is Direction.TO_DEVICE)
    assert memop_range_name(g, m).startswith("to_device ")
    lines = dict(memop_details(autovm, memop_row(autovm, i, autovm.timeline.typical_iteration())))
    assert lines["NVTX range"] == memop_range_name(g, m)
    assert lines["what"].startswith("planned prefetch") and lines["direction"] == "to the GPU"


def test_a_demand_fault_says_so_in_words_and_has_no_range_of_its_own(uvm: Session) -> None:
    i, m = next((i, m) for i, m in enumerate(uvm.plan.memops) if m.mode is Mode.FAULT)
    lines = dict(memop_details(uvm, memop_row(uvm, i, uvm.timeline.typical_iteration())))
    assert lines["what"].startswith("demand fault") and lines["direction"] == "to the GPU"
    assert lines["faulted in by"].startswith(uvm.graph.ops[m.complete_before].name)
    assert lines["NVTX range"].startswith("none of its own")
    eviction = next(i for i, m in enumerate(uvm.plan.memops) if m.direction is Direction.TO_HOST)
    assert dict(memop_details(uvm, memop_row(uvm, eviction, 0)))["what"].startswith("driver eviction")


@pytest.mark.parametrize("iteration", [None, 0, 2])
def test_op_and_memop_spans_are_where_the_timeline_draws_one_iteration(uvm: Session, iteration: int | None) -> None:
    it = uvm.timeline.typical_iteration() if iteration is None else iteration
    drawn = iteration_view(uvm, it).timeline
    for k in (0, 17, len(uvm.graph.ops) - 1):
        row = int(np.flatnonzero(drawn.op_index == k)[0])
        assert op_span_ms(uvm, k, iteration) == pytest.approx((drawn.op_start_ns[row] / 1e6,
                                                               drawn.op_end_ns[row] / 1e6))
    rows = np.flatnonzero(uvm.timeline.memop_iteration == it)
    for k in (0, len(rows) - 1):
        assert memop_span_ms(uvm, int(rows[k])) == pytest.approx((drawn.memop_start_ns[k] / 1e6,
                                                                  drawn.memop_end_ns[k] / 1e6))


def test_a_tensor_spans_its_first_use_to_its_last_and_a_zoom_window_holds_the_span(autovm: Session) -> None:
    t = autovm.graph.tensor_id("features.1.out")
    uses = autovm.graph.uses[t]
    start, end = tensor_span_ms(autovm, t)
    assert start == op_span_ms(autovm, uses[0])[0] and end == op_span_ms(autovm, uses[-1])[1]
    lo, hi = zoom_window((start, end))
    assert lo < start and hi > end
    assert "features.1.out" in dict(tensor_details(autovm, t))["tensor"]


def test_an_op_row_or_iteration_the_session_lacks_is_refused_with_what_it_has(uvm: Session) -> None:
    with pytest.raises(ValueError, match="the graph has 110"):
        op_details(uvm, 110)
    with pytest.raises(ValueError, match="no iteration 99"):
        op_span_ms(uvm, 0, 99)
    with pytest.raises(ValueError, match="no memory operation at row -1"):
        memop_details(uvm, -1)


def test_a_copy_says_where_the_host_calls_it_in_the_executors_order_or_in_the_plans_copy_order(
        autovm: Session) -> None:
    import dataclasses

    from vmexplorer.plan.copies import asynchronous, earliest_deadline

    i, m = next((i, m) for i, m in enumerate(autovm.plan.memops) if m.mode is Mode.ASYNC)
    called = dict(memop_details(autovm, memop_row(autovm, i, 0)))["called"]
    assert called.startswith(f"before {autovm.graph.ops[m.complete_before].name} (op {m.complete_before})")
    assert "the executor's order" in called
    swap = load_session(SAMPLES / "h200-vgg19-b64-vdnn-swap-50pct.measured.vms")
    tl = swap.timeline
    order = earliest_deadline(swap.plan, tl.op_end_ns, tl.memop_end_ns - tl.memop_start_ns)
    ordered = dataclasses.replace(swap, plan=dataclasses.replace(swap.plan, copy_order=order))
    stream = asynchronous(ordered.plan, Direction.TO_DEVICE)
    called = dict(memop_details(ordered, memop_row(ordered, stream[1], 0)))["called"]
    assert f"as copy 2 of {len(stream)} on its stream in the plan's copy order" in called
