"""The figures beside the shown session (`vmexplorer.ui.numbers`): one cost model for all of them, like
against like for the baselines, the bound under the same model, and the parts adding up."""

from __future__ import annotations

import numpy as np
import pytest
from ui_helpers import UVM_TWIN

from vmexplorer.plots import SUMMARY_ROWS
from vmexplorer.records.breakdown import PARTS as BREAKDOWN_PARTS
from vmexplorer.session import bound_for
from vmexplorer.session.planned import bound_at
from vmexplorer.simulator import simulate
from vmexplorer.simulator.bound import lower_bound
from vmexplorer.ui import numbers
from vmexplorer.ui.state import AppState
from vmexplorer.units import format_ns


def test_every_figure_of_a_measured_sample_says_so_and_its_baselines_are_measured_samples_too(state: AppState) -> None:
    rows = numbers.summary_rows(state)
    figures = {r["figure"]: r for r in rows}
    assert {"iteration time", "  compute", "  waiting on demand faults", "  waiting on evictions and prefetches",
            "  idle and launch gaps", "demand-faulted in", "moved to host", "moved to device (faults included)",
            "peak resident", "against device", "against uvm", "against the bound"} <= set(figures)
    assert all(r["source"].startswith("measured") for r in rows)
    assert figures["against uvm"]["source"].startswith("measured vs measured uvm")
    assert figures["against device"]["value"].endswith("x slower than device")
    assert figures["against uvm"]["value"].endswith("x faster than uvm")


def test_the_bound_is_the_shown_configurations_under_the_stores_cost_model_and_no_measurement_beats_it(
        state: AppState) -> None:
    s = state.session
    b = numbers.bound(state)
    assert b == lower_bound(s.graph, s.plan.capacity, state.cost_model, s.plan.mechanism)
    assert b == (s.bound or bound_for(s.graph, s.plan, s.cost_model)), "what `vmexplorer info` says of the file"
    rows = {r["figure"]: r for r in numbers.summary_rows(state)}
    assert rows["against the bound"]["value"] == b.versus(s.time_split().iteration_ns)
    assert s.time_split().iteration_ns >= b.lower_bound_ns


def test_an_edit_is_held_against_the_same_bound_and_beside_the_unedited_plan_simulated_with_the_same_model(
        state: AppState) -> None:
    bound = numbers.bound(state)
    assert state.unedited() is None and "value" in numbers.summary_rows(state)[0]
    mv = next(mv for mv in state.moves if mv.prefetch_after is not None)
    assert state.drag("prefetch", mv.tensor, mv.prefetch_after - 3), state.message
    assert numbers.bound(state) == bound
    rows = {r["figure"]: r for r in numbers.summary_rows(state)}
    expected = simulate(state.loaded.graph, state.loaded.plan, state.cost_model)
    assert rows["iteration time"]["before the edits"] == format_ns(int(np.median(expected.iteration_ns())))
    assert rows["iteration time"]["edited"] == format_ns(state.session.time_split().iteration_ns)
    assert rows["iteration time"]["edited"] != rows["iteration time"]["before the edits"]
    labels = [r["label"] for r in numbers.breakdown_rows(state)]
    assert labels[1].startswith("before the edits") and "simulated" in labels[1]
    state.reset_edits()
    assert not any(r["label"].startswith("before") for r in numbers.breakdown_rows(state))
    # the policies beside it, but joint, whose search would keep a class waiting seconds for one bar
    assert any(r["label"].startswith("checkpoint") for r in numbers.breakdown_rows(state))
    assert not any(r["label"].startswith("joint") for r in numbers.breakdown_rows(state))


def test_the_summary_parts_add_up_to_the_iteration_time_it_shows_which_is_one_iteration_not_an_average(
        state: AppState) -> None:
    import numpy as np

    fig = {r["figure"]: r["value"] for r in numbers.summary_rows(state)}
    split = state.session.time_split()
    assert fig["iteration time"] == format_ns(split.iteration_ns)  # the parts' sum (records.breakdown)
    timed = state.session.timeline.timed_ns()
    assert len(timed) % 2 == 0 and np.median(timed) not in timed, "an even count: its median is no iteration's"
    assert state.session.summary["iteration_ns"] == split.iteration_ns in timed  # the one drawn, everywhere


def test_a_simulated_configuration_has_simulated_figures_and_simulated_baselines(state: AppState) -> None:
    assert state.simulate_config("alexnet", 16, "4GiB", "uvm", {}), state.message
    assert all(r["source"].startswith("simulated") for r in numbers.summary_rows(state))


def test_a_sample_recorded_with_its_workspaces_outside_the_capacity_says_so_and_a_new_simulation_does_not(
        state: AppState) -> None:
    rows = {r["figure"]: r for r in numbers.summary_rows(state)}  # the default sample: schema 10 or older
    assert rows["kernel workspaces"]["value"] == "outside the capacity"
    assert state.simulate_config("alexnet", 16, "4GiB", "uvm", {}), state.message
    assert "kernel workspaces" not in {r["figure"] for r in numbers.summary_rows(state)}


def test_where_the_time_goes_shows_the_session_first_then_each_other_policy_labelled_by_source(
        state: AppState) -> None:
    rows = numbers.breakdown_rows(state)
    assert rows[0]["label"] == "this session (autovm), measured"
    others = {r["label"] for r in rows[1:]}
    assert {"device, measured", "uvm, measured"} <= others  # the default sample's twins are samples
    for r in rows:
        parts = sum(r[key.replace("_ns", "_ms")] for key, _ in BREAKDOWN_PARTS)
        assert abs(parts - r["iteration_ms"]) < 1e-6
    uvm = next(r for r in rows if r["label"].startswith("uvm"))
    assert uvm["fault_wait_ms"] > rows[0]["fault_wait_ms"]


def test_the_paging_cliff_runs_from_the_least_capacity_to_the_footprint_with_the_samples_and_the_bound(
        state: AppState) -> None:
    sweep = numbers.sweep(state, points=6)
    lines = {line["policy"]: line for line in sweep["lines"]}
    g = state.session.graph
    least = 100 * g.min_capacity[0] / g.footprint
    assert lines["uvm"]["capacity_pct"][0] == pytest.approx(least, abs=0.01)
    assert lines["uvm"]["capacity_pct"][-1] == pytest.approx(100)
    assert lines["device"]["capacity_pct"] == [pytest.approx(100)]  # device cannot page
    assert lines["uvm"]["iteration_ms"][0] > 5 * lines["uvm"]["iteration_ms"][-1]  # the cliff
    assert {(m["policy"], round(m["capacity_pct"])) for m in sweep["measured"]} >= {("uvm", 50), ("autovm", 50)}
    assert sweep["cost_model"] == state.cost_model.name
    bound = sweep["bound"]
    assert bound["capacity_pct"] == lines["uvm"]["capacity_pct"]
    for pct, ms, line_ms in zip(bound["capacity_pct"], bound["iteration_ms"], lines["uvm"]["iteration_ms"]):
        capacity = int(g.footprint * pct / 100)
        assert ms <= line_ms  # no policy below the bound
        assert ms == pytest.approx(bound_at(g, capacity, state.cost_model, "uvm").lower_bound_ns / 1e6, rel=1e-3)


@pytest.mark.parametrize("ns, base_ns, says", [(1000, 100, "10.0x slower than device"),
                                               (100, 250, "2.5x faster than device"),
                                               (100, 100, "as fast as device"), (0, 100, "n/a")])
def test_a_time_against_a_baseline_is_said_as_slower_or_faster_never_as_a_speedup_below_one(
        ns: int, base_ns: int, says: str) -> None:
    assert numbers.times_than(ns, base_ns, "device") == says


def test_comparison_rows_align_by_op_index_and_lead_with_where_the_time_goes(state: AppState) -> None:
    assert state.compare_with(UVM_TWIN)
    rows = numbers.delta_rows(state)
    ops = state.session.graph.ops
    assert [r["op"] for r in rows] == list(range(len(ops)))
    assert [r["name"] for r in rows] == [op.name for op in ops]
    assert all(r["delta_ns"] == r["b_ns"] - r["a_ns"] for r in rows)
    summary = numbers.summary_delta_rows(state)
    head = {r["figure"]: r for r in summary}
    assert head["source"]["a"] == head["source"]["b"] == "measured"
    assert float(head["iteration time"]["b/a"]) > 1  # uvm is slower than autovm on this run
    assert [r["figure"] for r in summary[:2]] == ["iteration time", SUMMARY_ROWS[1][1]]
    assert summary[0]["b - a"].startswith("+")
    bars = numbers.compare_breakdown_rows(state)
    assert [r["label"][:2] for r in bars] == ["A:", "B:"] and bars[1]["iteration_ms"] > bars[0]["iteration_ms"]


def test_before_and_after_an_edit_compare_by_op(state: AppState) -> None:
    move = state.moves[0]
    assert state.drag("prefetch", move.tensor, move.offload_after + 1)
    assert state.compare_with(state.loaded, "as loaded")
    assert len(numbers.delta_rows(state)) == len(state.session.graph.ops)
    assert state.compare_with(None) and numbers.delta_rows(state) == []


def test_the_tensor_table_lists_the_moved_first_largest_first_with_their_trips(state: AppState) -> None:
    rows = numbers.tensor_rows(state.session, list(state.moves))
    moved = [r for r in rows if r["offloaded"]]
    assert rows[:len(moved)] == moved and {r["id"] for r in moved} == {mv.tensor for mv in state.moves}
    sizes = [state.session.graph.tensors[r["id"]].nbytes for r in moved]
    assert sizes == sorted(sizes, reverse=True)
