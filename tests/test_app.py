"""The app's logic (vmexplorer.appstate) as a specification, and the page built without a server."""

from __future__ import annotations

import dataclasses
import gzip
import html
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import panel as pn
import param
import pytest

from vmexplorer.appstate import DEFAULT_SAMPLE, SAMPLES, AppState
from vmexplorer.config import Mechanism
from vmexplorer.plan.validate import validate_plan
from vmexplorer.plots import SUMMARY_ROWS
from vmexplorer.session import load_session
from vmexplorer.timeline import comparison_figure, issue_after_at, timeline_figure, timeline_source
from vmexplorer.units import format_ns

UVM_TWIN = "vgg19-b64-uvm-50pct.measured.vms"
pytestmark = pytest.mark.skipif(not (SAMPLES / DEFAULT_SAMPLE).is_file(), reason="sample sessions are missing")


@pytest.fixture
def state() -> AppState:
    s = AppState()
    assert s.load_sample(), s.message
    return s


def snapshot(s: AppState) -> tuple[Any, ...]:
    return (s.session, s.loaded, list(s.moves), s.comparison, s.origin)


def iteration_ns(s: AppState) -> int:
    return int(s.session.summary["iteration_ns"])


def test_the_default_sample_opens_measured_and_every_figure_says_so(state: AppState) -> None:
    assert state.session.timeline.source == "measured" and state.message == ""
    rows = state.summary_rows()
    figures = {r["figure"]: r for r in rows}
    assert {"iteration time", "  compute", "  waiting on demand faults", "  waiting on evictions and prefetches",
            "  idle and launch gaps", "demand-faulted in", "moved to host", "moved to device (faults included)",
            "peak resident", "against device", "against uvm"} <= set(figures)
    assert all(r["source"].startswith("measured") for r in rows)
    # the uvm twin and the device session are samples: like is compared with like
    assert figures["against uvm"]["source"].startswith("measured vs measured uvm")
    assert figures["against device"]["value"].endswith("x slower than device")
    assert figures["against uvm"]["value"].endswith("x faster than uvm")
    assert state.moves == list(state.session.plan.moves) and state.moves
    assert state.cost_model.name.startswith("calibrated on vgg19")


def test_the_default_samples_uvm_twin_is_one_click_away(state: AppState) -> None:
    from vmexplorer.app import AppView

    twin = state.twin("uvm")
    assert twin is not None and twin != state.origin
    assert state.compare_with_twin("uvm") and state.message == ""
    c = state.comparison
    assert (c.plan.policy, c.timeline.source, c.plan.capacity) == ("uvm", "measured", state.session.plan.capacity)
    view = AppView()
    view.main()
    assert view.compare_twin.visible
    view.compare_twin.clicks += 1
    assert view.state.comparison is not None and view.TABS[view.tabs.active] == "Compare"
    assert state.simulate_config("alexnet", 32, "60%", "autovm") and state.twin("uvm") is None
    assert not state.compare_with_twin("uvm") and "no measured uvm sample" in state.message


def test_dragging_a_prefetch_earlier_replans_manual_and_changes_the_iteration(state: AppState) -> None:
    move = state.moves[-1]
    assert state.drag("prefetch", move.tensor, move.prefetch_after)  # unchanged moves, now simulated
    before = iteration_ns(state)
    assert state.session.timeline.source == "simulated" and state.session.plan.policy == "manual"
    lo, _ = state.marker_range("prefetch", move.tensor)
    assert state.drag("prefetch", move.tensor, lo), state.message
    assert iteration_ns(state) != before
    validate_plan(state.session.graph, state.session.plan)
    assert any(mv.tensor == move.tensor and mv.prefetch_after == lo for mv in state.session.plan.moves)
    assert [r["source"] for r in state.summary_rows()][0] == "simulated"


def test_an_edit_of_a_swap_session_stays_swap_with_its_copies_in_the_order_its_simulation_runs_fastest() -> None:
    from vmexplorer.policies import Simulation, order_copies
    from vmexplorer.simulator import simulate
    from vmexplorer.simulator.bound import lower_bound

    state = AppState()
    assert state.load(str(SAMPLES / "h200-vgg19-b64-tuned-swap-75pct.measured.vms")), state.message
    move = state.moves[0]
    assert state.drag("offload", move.tensor, move.offload_after + 1), state.message
    s = state.session
    assert s.plan.mechanism is Mechanism.SWAP and s.plan.policy == "manual"
    validate_plan(s.graph, s.plan)
    unordered = dataclasses.replace(s.plan, copy_order=())
    again = order_copies(s.graph, unordered, Simulation(simulate, lower_bound, state.cost_model))
    assert s.plan.copy_order == again.copy_order


@pytest.mark.parametrize("kind", ["offload", "prefetch"])
def test_a_drag_beyond_the_producer_or_the_first_use_is_clamped(state: AppState, kind: str) -> None:
    g = state.session.graph
    move = state.moves[0]
    first_use = next(u for u in g.uses[move.tensor] if u > move.offload_after)
    lo, hi = state.marker_range(kind, move.tensor)
    assert lo >= g.tensors[move.tensor].producer and hi < first_use
    for far, expected in ((-1, lo), (len(g.ops) + 5, hi)):
        assert state.drag(kind, move.tensor, far), state.message
        edited = next(mv for mv in state.moves if mv.tensor == move.tensor)
        assert (edited.offload_after if kind == "offload" else edited.prefetch_after) == expected
        assert "clamped" in state.status
        validate_plan(g, state.session.plan)


def test_toggling_an_offload_adds_then_removes_a_move(state: AppState) -> None:
    g = state.session.graph
    moved = {mv.tensor for mv in state.moves}
    t = next(i for i, tensor in enumerate(g.tensors) if i not in moved and tensor.kind.value == "activation"
             and tensor.nbytes >= 2 << 20 and any(b - a >= 2 for a, b in zip(g.uses[i], g.uses[i][1:])))
    n = len(state.moves)
    assert state.toggle_offload(g.tensors[t].name), state.message
    assert len(state.moves) == n + 1 and any(mv.tensor == t for mv in state.session.plan.moves)
    validate_plan(g, state.session.plan)
    assert state.toggle_offload(t) and len(state.moves) == n
    assert all(mv.tensor != t for mv in state.session.plan.moves)


def test_comparison_rows_align_by_op_index(state: AppState) -> None:
    assert state.compare_with(SAMPLES / UVM_TWIN)
    rows = state.delta_rows()
    ops = state.session.graph.ops
    assert [r["op"] for r in rows] == list(range(len(ops)))
    assert [r["name"] for r in rows] == [op.name for op in ops]
    assert all(r["delta_ns"] == r["b_ns"] - r["a_ns"] for r in rows)
    headline = {r["figure"]: r for r in state.summary_delta_rows()}
    assert headline["source"]["a"] == headline["source"]["b"] == "measured"
    assert float(headline["iteration time"]["b/a"]) > 1  # uvm is slower than autovm on this run
    fig = comparison_figure(state.session, state.comparison)
    lanes = [c.children[0] for c in fig.children]
    assert lanes[0].x_range is lanes[1].x_range


def test_compare_draws_the_typical_iteration_of_each_on_one_time_scale_and_leads_with_where_the_time_goes(
        state: AppState) -> None:
    assert state.compare_with(SAMPLES / UVM_TWIN)
    a, b = state.session, state.comparison
    fig = comparison_figure(a, b)
    ends = []
    for child, s in zip(fig.children, (a, b)):
        ops = timeline_source(child, "ops").data
        assert len(ops["left"]) == len(s.graph.ops), "one iteration each"
        assert min(ops["left"]) >= 0 and child.children[0].tags == ["time"]
        ends.append(max(ops["right"]))
        assert ends[-1] == pytest.approx(s.timeline.iteration_ns()[s.timeline.typical_iteration()] / 1e6, rel=0.02)
    assert ends[1] > 1.3 * ends[0], "uvm's iteration is drawn longer than autovm's on the same scale"
    assert fig.children[0].children[0].x_range.end >= max(ends)
    rows = state.summary_delta_rows()
    assert [r["figure"] for r in rows[:2]] == ["iteration time", SUMMARY_ROWS[1][1]]
    assert rows[0]["b - a"].startswith("+")
    bars = state.compare_breakdown_rows()
    assert [r["label"][:2] for r in bars] == ["A:", "B:"] and bars[1]["iteration_ms"] > bars[0]["iteration_ms"]


def test_before_and_after_an_edit_compare_by_op(state: AppState) -> None:
    move = state.moves[0]
    assert state.drag("prefetch", move.tensor, move.offload_after + 1)
    assert state.compare_with(state.loaded, "as loaded")
    assert len(state.delta_rows()) == len(state.session.graph.ops)
    assert state.compare_with(None) and state.delta_rows() == []


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


@pytest.mark.parametrize("upload, says", [
    (b"not a session at all", "not gzip-compressed"),
    (gz(b'{"format": "something else"}'), "not a vmexplorer session"),
    ((SAMPLES / DEFAULT_SAMPLE).read_bytes()[:200], "truncated"),
    (b"\x1f\x8b" + b"\0" * (48 * 2**20), "more than the 48.00 MiB a session file may be"),
])
def test_a_bad_upload_says_why_and_keeps_the_state(state: AppState, upload: bytes, says: str) -> None:
    kept = snapshot(state)
    assert not state.load(upload, "bad.vms")
    assert says in state.message
    assert snapshot(state) == kept
    assert not state.compare_with(upload, "bad.vms") and state.comparison is None


@pytest.mark.parametrize("capacity, says", [
    ("nonsense", "is not a size"), ("-5GiB", "is not a size"), ("0%", "above 0%"), ("3 parsecs", "unknown unit"),
    ("100MiB", "below the minimum"),
])
def test_a_bad_capacity_says_why_and_keeps_the_state(state: AppState, capacity: str, says: str) -> None:
    kept = snapshot(state)
    assert not state.simulate_config("vgg19", 64, capacity, "autovm", {})
    assert says in state.message and snapshot(state) == kept


@pytest.mark.parametrize("call, says", [
    (lambda s: s.drag("sideways", s.moves[0].tensor, 3), "'offload' or 'prefetch'"),
    (lambda s: s.drag("prefetch", "no.such.tensor", 3), "no tensor named"),
    (lambda s: s.drag("prefetch", 0, 3), "no planned round trip"),
    (lambda s: s.drag("prefetch", s.moves[0].tensor, "soon"), "soon"),
    (lambda s: s.toggle_offload(10**6), "not in the graph"),
    (lambda s: s.simulate_config("vgg99", 64, "50%", "autovm", {}), "unknown model"),
    (lambda s: s.simulate_config("vgg19", 64, "50%", "autovm", {"prefetch_distance": 0}), "at least 1"),
    (lambda s: s.simulate_config("vgg19", 64, "50%", "device", {}), "device policy needs"),
    (lambda s: s.load(Path("no/such/file.vms")), "cannot read"),
    (lambda s: s.load_sample("../pyproject.toml"), "no sample session"),
])
def test_an_edit_or_config_that_cannot_work_says_why_and_keeps_the_state(state: AppState, call: Any,
                                                                          says: str) -> None:
    kept = snapshot(state)
    assert call(state) is False
    assert says in state.message and snapshot(state) == kept


def test_simulating_a_config_uses_the_calibrated_model_for_the_same_graph(state: AppState) -> None:
    calibrated = state.cost_model
    assert state.simulate_config("vgg19", 64, "60%", "autovm", {"prefetch_distance": 2}), state.message
    assert state.session.cost_model is calibrated and state.session.plan.options["prefetch_distance"] == 2
    assert state.simulate_config("alexnet", 16, "4GiB", "uvm", {}), state.message
    assert state.session.cost_model.name == "h100-uncalibrated"
    assert all(r["source"].startswith("simulated") for r in state.summary_rows())


def test_a_session_keeps_its_own_cost_model(state: AppState) -> None:
    simulated = Path(__file__).parent / "session" / "data" / "schema1-vgg19-b64-device.simulated.vms"
    s = AppState()
    assert s.load(simulated)
    assert s.cost_model.name == load_session(simulated).cost_model.name == "h100-uncalibrated"
    stored = state.session.cost_model  # a sample carries the model fitted to it (bench/calibrate_samples.py)
    assert stored is not None and state.cost_model is stored


def test_after_an_edit_the_summary_holds_it_beside_the_unedited_plan_simulated_with_the_same_model(
        state: AppState) -> None:
    from vmexplorer.simulator import simulate
    from vmexplorer.units import format_ns

    assert state.unedited() is None and "value" in state.summary_rows()[0]
    mv = next(mv for mv in state.moves if mv.prefetch_after is not None)
    assert state.drag("prefetch", mv.tensor, mv.prefetch_after - 3), state.message
    rows = {r["figure"]: r for r in state.summary_rows()}
    loaded = state.loaded
    expected = simulate(loaded.graph, loaded.plan, state.cost_model)
    assert rows["iteration time"]["before the edits"] == format_ns(int(np.median(expected.iteration_ns())))
    assert rows["iteration time"]["edited"] == format_ns(state.session.summary["iteration_ns"])
    assert rows["iteration time"]["edited"] != rows["iteration time"]["before the edits"]
    labels = [r["label"] for r in state.breakdown_rows()]
    assert labels[1].startswith("before the edits") and "simulated" in labels[1]
    state.reset_edits()
    assert state.unedited() is None and not any(r["label"].startswith("before") for r in state.breakdown_rows())


def test_editable_markers_map_a_dragged_x_back_to_an_op(state: AppState) -> None:
    for axis in ("op", "time"):
        fig = timeline_figure(state.session, axis, editable=True)
        data = timeline_source(fig, "prefetch_markers").data
        for x, it, after in zip(data["x"], data["iteration"], data["issue_after"]):
            assert issue_after_at(state.session, x, axis, int(it)) == after


def drag_first_marker(fig: Any, kind: str, ops_earlier: int) -> tuple[int, int]:
    """What the PointDrawTool sends back after the first `kind` marker is dragged onto the op boundary
    `ops_earlier` ops before the one it is issued after, on the axis drawn: (its tensor, that op)."""
    src = timeline_source(fig, f"{kind}_markers")
    ends = timeline_source(fig, "ops").data["right"]  # one iteration's ops, in order
    data = dict(src.data)
    to = int(data["issue_after"][0]) - ops_earlier
    data["x"] = [ends[to], *list(data["x"])[1:]]
    src.data = data
    return int(data["tensor_id"][0]), to


def test_the_page_builds_without_a_server_and_a_browser_drag_replans() -> None:
    from vmexplorer.app import AppView, page

    assert page() is not None
    view = AppView()
    assert view.gpu.run.disabled
    fig = view.timeline.object
    drag_first_marker(fig, "prefetch", 3)
    assert view.state.session.plan.policy == "manual" and view.state.message == ""
    view.config.capacity.value = "nonsense"
    view.config.simulate.clicks += 1
    assert view.alert.visible and "not a size" in view.alert.object


def test_an_edit_refills_the_drawn_figures_in_place_and_the_measured_lanes_step_aside() -> None:
    from bokeh.models import Model

    from vmexplorer.app import AppView

    view = AppView()
    fig = view.timeline.object
    models = {m.id for m in fig.references()}
    ops_before = dict(timeline_source(fig, "ops").data)
    drag_first_marker(fig, "prefetch", 3)
    assert view.timeline.object is fig, "the same figures: the browser keeps its models and its zoom"
    after = {m.id for m in fig.references()}
    assert after == models, "an edit adds no models and drops none"
    assert list(timeline_source(fig, "ops").data["right"]) != list(ops_before["right"])
    assert all(not child.visible for child in fig.children[3:]), "CUPTI's lanes are not the edit's simulation"
    assert isinstance(fig, Model)


def test_two_drags_in_a_row_both_take_effect_and_a_ghost_marks_where_each_marker_was() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    fig = view.timeline.object
    first, to_first = drag_first_marker(fig, "prefetch", 3)
    second, to_second = drag_first_marker(fig, "offload", -2)  # later: it may not go before its last use
    moves = {mv.tensor: mv for mv in view.state.moves}
    assert moves[first].prefetch_after == to_first and moves[second].offload_after == to_second
    ghosts = timeline_source(fig, "ghost_markers").data
    names = {view.state.session.graph.tensors[t].name for t in (first, second)}
    assert len(ghosts["x"]) >= 2 and all(any(n in w for w in ghosts["what"]) for n in names)
    view.editor.reset.clicks += 1
    view.state.reset_edits()
    assert len(timeline_source(view.timeline.object, "ghost_markers").data["x"]) == 0


def test_selecting_a_tensor_lights_up_its_transfers_and_markers_and_fades_the_rest() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    frame = view.editor.tensors.value
    row = int(frame.index[frame["offloaded"]][0])
    tensor = int(frame["id"].iloc[row])
    view.editor.tensors.selection = [row]
    fig = view.timeline.object
    for name in ("memops", "prefetch_markers", "offload_markers"):
        data = timeline_source(fig, name).data
        lit = {i for i, a in enumerate(data["alpha"]) if a > 0.5}
        assert lit == {i for i, t in enumerate(data["tensor_id"]) if int(t) == tensor} != set()
    view.editor.tensors.selection = []
    assert min(timeline_source(fig, "memops").data["alpha"]) > 0.5


def test_a_row_picked_in_the_finder_zooms_the_timeline_to_it_on_the_time_axis() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    view.x_axis.value = "op"
    view.finder.search.value_input = "features.0"
    view.finder.ops.selection = [0]
    assert view.x_axis.value == "time"
    x_range = view.timeline.object.children[0].x_range
    start, end = view.finder.focus
    assert x_range.start <= start < end <= x_range.end
    assert x_range.end - x_range.start < 0.5 * float(timeline_source(view.timeline.object, "ops").data["right"].max())


def test_tapping_an_op_or_a_transfer_in_the_timeline_shows_its_details_and_lights_up_its_tensor() -> None:
    from bokeh.events import Tap

    from vmexplorer.app import AppView
    from vmexplorer.plots import LANES

    view = AppView()
    fig = view.timeline.object
    lanes = fig.children[0]
    ops = timeline_source(fig, "ops").data
    x = (ops["left"][5] + ops["right"][5]) / 2
    assert view.finder_card.collapsed and not view.finder_card.objects  # not built for the first screen
    view.lanes._on_tap(Tap(lanes, x=x, y=LANES["compute"] + 0.4))
    name = view.state.session.graph.ops[int(view.lanes.drawn.timeline.op_index[5])].name
    assert name in view.finder.details.object
    assert not view.finder_card.collapsed and view.finder_card.objects  # opened, to show them
    memops = timeline_source(fig, "memops").data
    row = next(i for i, k in enumerate(memops["kind"]) if k == "prefetch")
    x = (memops["left"][row] + memops["right"][row]) / 2
    view.lanes._on_tap(Tap(lanes, x=x, y=LANES["to device"] + 0.4))
    tensor = int(memops["tensor_id"][row])
    assert view.state.session.graph.tensors[tensor].name in view.finder.details.object
    lit = {i for i, a in enumerate(timeline_source(fig, "memops").data["alpha"]) if a > 0.5}
    assert row in lit and all(int(memops["tensor_id"][i]) == tensor for i in lit)
    view.lanes._on_tap(Tap(lanes, x=x, y=LANES["to device"] - 0.1))  # between the lanes: nothing changes
    assert {i for i, a in enumerate(timeline_source(fig, "memops").data["alpha"]) if a > 0.5} == lit


def test_the_link_follows_the_view_and_a_new_page_given_that_link_shows_the_same_edits() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    assert view.link.sample == view.state.sample != "" and view.link.edits == ""
    drag_first_marker(view.timeline.object, "prefetch", 3)
    view.x_axis.value = "op"
    link = dict(view.link.param.values())
    assert link["edits"] and link["axis"] == "op"
    other = AppView()
    other.link.param.update({k: link[k] for k in ("sample", "iteration", "axis", "edits")})
    assert other.state.message == ""
    assert sorted(other.state.moves, key=repr) == sorted(view.state.moves, key=repr)
    assert other.x_axis.value == "op" and other.state.session.summary == view.state.session.summary


@pytest.mark.parametrize("field, value, says", [
    ("sample", "../../etc/passwd", "there is no sample session"),
    ("edits", "<b>1:2</b>", "the link's edits cannot be applied"),
    ("edits", "3:999999.1", "the link's edits cannot be applied"),
])
def test_a_link_that_does_not_fit_says_so_once_and_the_page_keeps_what_it_shows(
        field: str, value: str, says: str) -> None:
    from vmexplorer.app import AppView

    view = AppView()
    shown = view.state.session
    setattr(view.link, field, value)
    assert says in view.state.message and view.alert.visible
    assert view.state.session is shown
    assert getattr(view.link, field) != value, "the link says what the page shows, not what it could not"


def test_an_edited_session_saves_and_exports_from_the_page() -> None:
    from vmexplorer.app import AppView
    from vmexplorer.session import session_from_bytes

    view = AppView()
    move = view.state.moves[0]
    assert view.state.drag("prefetch", move.tensor, move.offload_after + 1)
    saved = view._session_bytes()
    assert saved is not None
    again = session_from_bytes(saved.getvalue(), "saved.vms")
    assert again.plan.policy == "manual" and again.plan.moves == view.state.session.plan.moves
    assert b"traceEvents" in view._trace_bytes().getvalue()
    assert b"<html" in view._html_bytes().getvalue().lower()


def test_the_apps_exported_page_holds_the_story_beside_the_summary_and_the_timeline() -> None:
    from vmexplorer.app import AppView
    from vmexplorer.views import headline

    view = AppView()
    page = view._html_bytes().getvalue().decode()
    for name in ("summary", "breakdown", "sweep_lines", "sweep_points", "prefetch_markers"):
        assert f'"name":"{name}"' in page, name
    assert headline(view.state).split(":")[0] in page


# --- "Run on GPU" with CPU runners in place of the GPU (VMEXPLORER_FAKE_RUNNER, read by the app); the
# worker processes import them by name, so they are module-level functions
def fake_gpu(request: Any, progress: Callable[[int, int, float], None], should_stop: Callable[[], bool]) -> Any:
    """The default runner with the simulator in place of the GPU, 0.05 s an iteration, stopping when asked."""
    from vmexplorer.graph import build_graph
    from vmexplorer.session import new_session
    from vmexplorer.simulator import H100_DEFAULT, simulate

    plan = request.plan
    graph = build_graph(*plan.key)
    for i in range(request.iterations):
        if should_stop():
            break
        time.sleep(0.05)
        progress(i + 1, request.iterations, 1.0 / (i + 1))
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)


def fake_hold(request: Any, progress: Callable[[int, int, float], None], should_stop: Callable[[], bool]) -> None:
    """A run that holds the GPU until it is asked to stop (or a minute passes), then stops at once."""
    end, i = time.monotonic() + 60, 0
    while not should_stop() and time.monotonic() < end:
        time.sleep(0.05)
        i += 1
        progress(i, max(i, request.iterations), 1.0)


def fake_raise(config: Any, progress: Callable[[int, int, float], None], should_stop: Callable[[], bool]) -> bytes:
    progress(1, config.iterations, 1.0)
    raise RuntimeError("cuDNN said no")


def fake_die(config: Any, progress: Callable[[int, int, float], None], should_stop: Callable[[], bool]) -> bytes:
    os._exit(3)


def _run_view(monkeypatch: pytest.MonkeyPatch, runner: str) -> Any:
    from vmexplorer.app import AppView
    from vmexplorer.views import FAKE_RUNNER_ENV

    monkeypatch.setenv(FAKE_RUNNER_ENV, f"{__name__}:{runner}")
    view = AppView()
    assert not view.gpu.run.disabled and view.gpu.reason.object == ""
    return view


def _run_until(view: Any, check: Callable[[Any], bool], timeout: float = 60.0) -> Any:
    """Poll as the page's periodic callback does, until check(status) holds."""
    end = time.monotonic() + timeout
    while True:
        st = view.gpu.poll()
        if st is not None and check(st):
            return st
        assert view.gpu.job is not None or st is not None, "the run ended without a status"
        assert time.monotonic() < end, f"timed out; the run note says {view.gpu.note.object!r}"
        time.sleep(0.02)


def test_a_gpu_run_is_queued_then_runs_with_progress_then_opens_its_session(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _run_view(monkeypatch, "fake_gpu")
    second = _run_view(monkeypatch, "fake_gpu")
    move = first.state.moves[0]
    assert first.state.drag("prefetch", move.tensor, move.offload_after + 1), first.state.message
    edited = list(first.state.moves)
    request = first.gpu.request()
    assert request.plan is first.state.session.plan and list(request.plan.moves) == edited  # compiled once
    assert request.plan.policy == "manual" and request.iterations == 5
    assert second.gpu.request().plan is second.state.session.plan
    first.gpu.iterations.value = 40
    first.gpu.run.clicks += 1
    assert first.gpu.job is not None and first.gpu.run.disabled and first.gpu.cancel.visible
    assert first.gpu.progress.visible and first.gpu.progress.max == 40
    second.gpu.run.clicks += 1
    st = _run_until(second, lambda st: st.state != "queued" or st.queue_position == 1)
    assert st.state == "queued" and "queued: number 1" in second.gpu.note.object
    st = _run_until(first, lambda st: st.state == "running" and st.iteration >= 2)
    assert first.gpu.progress.value >= 2 and "iteration" in first.gpu.note.object
    st = _run_until(first, lambda st: st.state not in ("queued", "running"))
    assert st.state == "done", st.message
    assert first.gpu.job is None and not first.gpu.run.disabled and not first.gpu.cancel.visible
    assert first.state.message == "" and "GPU run" in first.state.origin
    assert "finished" in first.state.status and "done" in first.gpu.note.object
    assert list(first.state.session.plan.moves) == edited and first.state.session.plan.policy == "manual"
    st = _run_until(second, lambda st: st.state not in ("queued", "running"))
    assert st.state == "done" and second.state.session.plan.policy == "autovm" and second.state.message == ""


def test_a_gpu_run_can_be_cancelled_and_the_page_stays_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    view = _run_view(monkeypatch, "fake_gpu")
    kept = snapshot(view.state)
    view.gpu.iterations.value = 400
    view.gpu.run.clicks += 1
    _run_until(view, lambda st: st.state == "running" and st.iteration >= 1)
    view.gpu.cancel.clicks += 1
    st = _run_until(view, lambda st: st.state not in ("queued", "running"))
    assert st.state == "cancelled" and "cancelled" in view.gpu.note.object
    assert snapshot(view.state) == kept and view.state.message == ""
    assert view.gpu.job is None and not view.gpu.run.disabled and not view.gpu.progress.visible


@pytest.mark.parametrize("runner, says", [("fake_raise", "cuDNN said no"), ("fake_die", "exited with status 3")])
def test_a_failed_gpu_run_says_why_and_the_page_stays_usable(monkeypatch: pytest.MonkeyPatch, runner: str,
                                                            says: str) -> None:
    view = _run_view(monkeypatch, runner)
    kept = snapshot(view.state)
    view.gpu.run.clicks += 1
    st = _run_until(view, lambda st: st.state not in ("queued", "running"))
    assert st.state == "failed"
    assert view.alert.visible and "GPU run failed" in view.alert.object and says in view.alert.object
    assert snapshot(view.state) == kept and view.gpu.job is None and not view.gpu.run.disabled
    move = view.state.moves[0]
    assert view.state.drag("prefetch", move.tensor, move.offload_after + 1)
    assert not view.alert.visible


def test_closing_the_browser_tab_cancels_its_gpu_run_so_the_next_person_is_not_kept_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vmexplorer.views import run_queue

    view = _run_view(monkeypatch, "fake_gpu")
    view.gpu.iterations.value = 400
    view.gpu.run.clicks += 1
    job = view.gpu.job
    _run_until(view, lambda st: st.state == "running")
    view.close()
    assert view.gpu.job is None
    assert run_queue().wait(job, timeout=30).state == "cancelled"


def test_a_run_whose_tab_has_gone_is_cancelled_at_the_pages_next_poll_within_2_s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vmexplorer.views import run_queue

    view = _run_view(monkeypatch, "fake_hold")
    view.gpu.run.clicks += 1
    job = view.gpu.job
    _run_until(view, lambda st: st.state == "running" and st.iteration >= 1)
    view.gpu.tab_open = lambda: False  # the server session has no connection left
    closed = time.monotonic()
    view.gpu._tick()  # what the page's periodic callback does while a run lasts
    assert view.gpu.job is None
    assert run_queue().wait(job, timeout=2.0).state == "cancelled"
    assert time.monotonic() - closed < 2.0


def test_the_served_page_cancels_its_run_when_bokeh_ends_the_session_after_clearing_the_script(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`panel serve` runs app.py as a new module for each browser session and, when the session ends,
    clears that module's globals before it calls the session-destroyed hooks."""
    from bokeh.document import Document
    from panel.io.handlers import ScriptHandler

    import vmexplorer.app as app
    import vmexplorer.views as views

    built: list[Any] = []

    class Recorded(app.AppView):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(app, "AppView", Recorded)
    monkeypatch.setenv(views.FAKE_RUNNER_ENV, f"{__name__}:fake_hold")
    doc = Document()
    ScriptHandler(filename=app.__file__).modify_document(doc)
    assert len(built) == 1, "the served script builds its page with the package's module"
    view = built[0]
    view.gpu.run.clicks += 1
    job = view.gpu.job
    _run_until(view, lambda st: st.state == "running" and st.iteration >= 1)
    doc.modules.destroy()  # what Bokeh does to the session's module first
    for hook in list(doc.session_destroyed_callbacks):
        hook(None)
    assert view.gpu.job is None
    assert views.run_queue().wait(job, timeout=2.0).state == "cancelled"


def test_a_write_to_a_closed_tab_left_unawaited_logs_no_traceback_and_any_other_failure_still_does() -> None:
    import asyncio
    import gc

    from tornado.websocket import WebSocketClosedError

    from vmexplorer.app import _ClosedTabWrites

    reported: list[Any] = []

    def before(loop: Any, context: dict[str, Any]) -> None:
        reported.append(type(context.get("exception")))

    async def fail(e: Exception) -> None:
        raise e

    async def server() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(before)
        _ClosedTabWrites.install()
        _ClosedTabWrites.install()  # once per loop, however many pages it serves
        assert loop.get_exception_handler().previous is before
        for e in (WebSocketClosedError(), RuntimeError("a bug")):
            task = loop.create_task(fail(e))
            await asyncio.wait([task])
            del task  # never awaited: asyncio reports its exception as it goes
            gc.collect()

    # a loop of its own, in a thread: a test before this one may leave a loop running in this thread
    failures: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run_catching(asyncio.run, server(), failures))
    thread.start()
    thread.join(30)
    assert failures == [] and reported == [RuntimeError]


def _run_catching(run: Callable[[Any], Any], coroutine: Any, failures: list[BaseException]) -> None:
    try:
        run(coroutine)
    except BaseException as e:  # handed to the test's thread, which asserts there were none
        failures.append(e)


def test_the_timeline_opens_on_the_time_axis_and_the_op_axis_is_one_click_away() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    assert view.x_axis.value == "time" and "op" in view.x_axis.options

    def label() -> str:
        return str(view.timeline.object.children[0].xaxis[0].axis_label)

    assert label() == "time (ms)"
    view.x_axis.value = "op"
    assert label().startswith("op")


def test_a_marker_dragged_on_the_time_axis_is_issued_after_the_op_boundary_it_is_dropped_on() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    assert view.x_axis.value == "time"
    tensor, to = drag_first_marker(view.timeline.object, "prefetch", 3)
    assert view.state.message == ""
    assert next(mv for mv in view.state.moves if mv.tensor == tensor).prefetch_after == to
    shown = view.state.session
    src = timeline_source(view.timeline.object, "prefetch_markers")
    data = dict(src.data)
    data["x"] = [data["x"][0] + 1e-6, *list(data["x"])[1:]]  # nudged within its op: nothing to re-plan
    src.data = data
    assert view.state.session is shown


def test_a_marker_release_from_an_earlier_drawing_is_not_read_as_a_drag() -> None:
    """The browser may send a release made on the markers it held before the server's redraw reached it
    (the tool's position, then the snapped one): read against the new drawing it would move some other
    marker. It is told apart by where its markers were drawn (`x0`) and left alone."""
    from vmexplorer.app import AppView

    view = AppView()
    src = timeline_source(view.timeline.object, "prefetch_markers")
    stale = {k: list(v) for k, v in src.data.items()}
    tensor, to = drag_first_marker(view.timeline.object, "prefetch", 3)
    assert next(mv for mv in view.state.moves if mv.tensor == tensor).prefetch_after == to
    moves, shown = list(view.state.moves), view.state.session
    assert list(src.data["x0"]) != stale["x0"], "the edit must move the drawn markers for this test"
    stale["x"] = [x + 5.0 for x in stale["x"]]  # every marker somewhere else: a drag, if it were current
    src.data = stale
    assert view.state.moves == moves and view.state.session is shown


def test_the_page_does_not_wait_for_the_gpu_check_and_enables_run_when_it_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import vmexplorer.app as app
    import vmexplorer.views as views

    answers: list[tuple[bool, str] | None] = [None]
    monkeypatch.delenv(views.FAKE_RUNNER_ENV, raising=False)
    monkeypatch.setattr(views.worker, "gpu_check", lambda: answers[-1])
    view = app.AppView()
    assert view.gpu.run.disabled and "checking for a GPU" in view.gpu.reason.object
    answers.append((True, "1 GPU: NVIDIA H100"))
    view.gpu._draw_gpu_reason()  # what the page's one-second callback does
    assert not view.gpu.run.disabled and view.gpu.reason.object == ""
    answers.append((False, "CuPy is not installed"))
    view.gpu._draw_gpu_reason()
    assert view.gpu.run.disabled and "CuPy is not installed" in view.gpu.reason.object


def test_a_measured_session_is_drawn_one_iteration_at_a_time_the_median_first_and_all_on_request() -> None:
    from vmexplorer.app import AppView
    from vmexplorer.views import ALL_ITERATIONS

    view = AppView()
    s = view.state.session
    n = s.timeline.iterations
    assert n > 1 and view.iteration.visible
    assert list(view.iteration.options.values()) == [ALL_ITERATIONS, *map(str, range(1, n + 1))]
    # the sample counted unified memory in its last iteration, after the timed ones: named in the list,
    # and the timed iteration drawn first says where CUPTI's migrations are
    assert s.timeline.counted == 1 and list(view.iteration.options)[-1] == f"{n} (UM counted)"
    rows = {r["figure"]: r["value"] for r in view.state.summary_rows()}
    assert rows["iterations timed"] == str(n - 1)
    assert rows["iterations counting unified memory (after the timed ones, slower)"] == "1"
    assert int(view.iteration.value) <= s.timeline.timed_iterations
    notes = [d.text for d in view.timeline.object.select({"name": "collector_notes"})]
    assert any(f"counted unified memory in iteration {n} only" in t for t in notes)
    from bokeh.models import Plot

    view.iteration.value = str(n)  # the counted iteration says in its title that it ran slower
    titles = [p.title.text.text for p in view.timeline.object.select({"type": Plot}) if p.title.text]
    assert any("(unified memory counted: slower than the timed ones)" in t for t in titles)
    assert list(view.timeline.object.select({"name": "measured_htod"}))
    ops = timeline_source(view.timeline.object, "ops").data
    assert len(ops["left"]) == len(s.graph.ops)  # one iteration's ops
    view.iteration.value = ALL_ITERATIONS
    ops = timeline_source(view.timeline.object, "ops").data
    assert len(ops["left"]) == n * len(s.graph.ops)
    view.iteration.value = "1"
    drag_first_marker(view.timeline.object, "prefetch", 3)  # a drag in the shown iteration re-plans like any other
    assert view.state.session.plan.policy == "manual" and view.state.message == ""
    assert not view.iteration.visible  # the simulated edit has one iteration
    counting = "iterations counting unified memory (after the timed ones, slower)"
    assert counting not in [r["figure"] for r in view.state.summary_rows()]  # a simulation counts nothing


# --- messages: several parameters changing at once, an error never beside an old status
def test_comparing_while_an_error_is_shown_compares_and_clears_the_error() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    view.config.capacity.value = "nonsense"
    view.config.simulate.clicks += 1
    assert view.alert.visible
    view.comparison.go.clicks += 1  # clears the message and sets the status in one batch
    assert view.state.message == "" and not view.alert.visible
    assert view.state.comparison is not None and "comparing with" in view.state.status


def test_every_watcher_of_several_parameters_takes_one_event_per_parameter_changed_in_a_batch() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    watched = [view.state, *(v for v in vars(view).values() if isinstance(v, param.Parameterized))]
    several = [w for obj in watched for by_what in obj.param.watchers.values() for ws in by_what.values()
               for w in ws if getattr(w.fn, "__qualname__", "").startswith("AppView.") and len(w.parameter_names) > 1]
    assert several
    for w in several:
        w.fn(*[None] * len(w.parameter_names))  # what param passes when all of them changed together


def test_a_failing_action_takes_the_last_actions_status_away(state: AppState) -> None:
    assert state.status.startswith("opened")
    assert not state.simulate_config("vgg19", 64, "nonsense", "autovm")
    assert "not a size" in state.message and state.status == ""


def test_a_problem_the_page_finds_also_takes_the_last_status_away() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    assert view.state.status
    view.editor.toggle.clicks += 1  # no tensor selected
    assert "select a tensor" in view.alert.object and view.state.status == "" and view.info.object == ""


# --- sessions the page cannot draw as they are: opened fully with a note, or refused with the page as it was
def opening(monkeypatch: pytest.MonkeyPatch, session: Any) -> None:
    """Hand the app `session` as if a loader had let it through."""
    monkeypatch.setattr("vmexplorer.appstate._open", lambda source, name=None: (session, name or "crafted.vms"))


def crafted(policy: str = "autovm", options: dict[str, Any] | None = None) -> Any:
    s = load_session(SAMPLES / DEFAULT_SAMPLE)
    config = dataclasses.replace(s.plan.config, policy=policy, options=s.plan.options if options is None else options)
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, config=config))


def test_a_session_of_a_policy_the_page_has_no_knobs_for_is_not_half_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader refuses such a file; a session that reaches the page anyway leaves it as it was."""
    from vmexplorer.app import AppView

    view = AppView()
    before = view.state.shown()
    opening(monkeypatch, crafted("mystery"))
    view.upload.filename, view.upload.value = "mystery.vms", b"\x1f\x8b"
    assert view.state.shown() == before and view.alert.visible
    assert "mystery.vms` cannot be shown" in view.state.message and "unexpected error" not in view.state.message
    assert view.lanes.drawn.plan.policy == view.config.policy.value == "autovm"


def test_a_session_the_page_cannot_draw_leaves_the_one_shown_before_with_a_clear_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import vmexplorer.app as app
    import vmexplorer.views as views

    view = app.AppView()
    before = view.state.shown()
    draw = views.timeline_figure

    def only_autovm(session: Any, *args: Any, **kwargs: Any) -> Any:
        if session.plan.policy != "autovm":
            raise ValueError("no glyph for this")
        return draw(session, *args, **kwargs)

    monkeypatch.setattr(views, "timeline_figure", only_autovm)
    view.sample.value = UVM_TWIN
    view.open_sample.clicks += 1
    assert view.state.shown() == before and view.state.status == ""
    assert view.alert.visible and "unexpected error" not in view.state.message
    assert f"{UVM_TWIN}` cannot be shown (ValueError: no glyph for this)" in view.state.message
    assert view.lanes.drawn.plan.policy == view.config.policy.value == "autovm"  # drawn again, widgets and all


# --- text from files, file names and typing reaches the page as text: never markup, Markdown or math
PAYLOAD = ('<img src=x onerror="window.__pwned=1"> <script>window.__pwned=1</script> '
           "[click](javascript:window.__pwned=1) **bold** $x^2$ $$y^2$$")


def inner_html(pane: Any) -> str:
    """What the browser sets as the pane's innerHTML (Panel sends it HTML-escaped once more)."""
    model = pane.get_root()
    assert model.disable_math, "math must stay off: $x$ from a file would render"
    return html.unescape(model.text)


def shows_as_text(pane: Any, text: str) -> bool:
    inner = inner_html(pane)
    return "<" not in inner and text in html.unescape(inner)


def test_a_file_name_a_cost_model_name_and_typing_show_as_text_in_every_pane() -> None:
    from vmexplorer.app import AppView
    from vmexplorer.session import session_to_bytes

    s = load_session(SAMPLES / DEFAULT_SAMPLE)
    upload = session_to_bytes(dataclasses.replace(s, cost_model=dataclasses.replace(s.cost_model, name=PAYLOAD)))
    view = AppView()
    view.upload.filename, view.upload.value = PAYLOAD, upload
    assert view.state.message == "" and shows_as_text(view.info, f"opened {PAYLOAD}")
    view.config.simulate.clicks += 1  # the same graph: simulated with the session's own cost model, which says its name
    assert shows_as_text(view.info, f"with {PAYLOAD}")
    view.comparison.upload.filename, view.comparison.upload.value = PAYLOAD, upload
    assert shows_as_text(view.comparison.note, f"B: {PAYLOAD}")
    view.config.capacity.value = PAYLOAD
    view.config.simulate.clicks += 1
    assert view.alert.visible and shows_as_text(view.alert, "capacity '<img src=x")  # quoted, maybe cut short
    panes = [v for part in (view, view.comparison, view.gpu, view.editor, view.config) for v in vars(part).values()
             if isinstance(v, pn.pane.PaneBase) and not isinstance(v, pn.pane.Bokeh)]
    assert len(panes) >= 8 and all("<" not in inner_html(p) for p in panes)


def test_a_load_error_quoting_a_name_from_the_file_shows_it_as_text() -> None:
    from vmexplorer.app import AppView

    doc = json.loads(gzip.decompress((SAMPLES / DEFAULT_SAMPLE).read_bytes()))
    doc["config"]["policy"] = PAYLOAD  # quoted by the error (an unknown policy), today and after
    view = AppView()
    before = view.state.shown()
    view.upload.filename, view.upload.value = PAYLOAD, gz(json.dumps(doc).encode())
    if view.state.message:  # refused: the page as it was, the file's name and the policy as text
        assert view.state.shown() == before and shows_as_text(view.alert, PAYLOAD)
        assert "<img src=x onerror=" in html.unescape(inner_html(view.alert)).split(PAYLOAD, 1)[1]
    else:  # opened: the policy named as text under the knobs
        assert shows_as_text(view.config.policy_help, PAYLOAD)


@pytest.mark.parametrize("ns, base_ns, says", [(1000, 100, "10.0x slower than device"),
                                               (100, 250, "2.5x faster than device"),
                                               (100, 100, "as fast as device"), (0, 100, "n/a")])
def test_a_time_against_a_baseline_is_said_as_slower_or_faster_never_as_a_speedup_below_one(
        ns: int, base_ns: int, says: str) -> None:
    from vmexplorer.appstate import times_than

    assert times_than(ns, base_ns, "device") == says


def test_where_the_time_goes_shows_the_session_first_then_each_other_policy_labelled_by_source(
        state: AppState) -> None:
    rows = state.breakdown_rows()
    assert rows[0]["label"] == "this session (autovm), measured"
    others = {r["label"] for r in rows[1:]}
    assert {"device, measured", "uvm, measured"} <= others  # the default sample's twins are samples
    for r in rows:
        parts = r["compute_ms"] + r["fault_wait_ms"] + r["transfer_wait_ms"] + r["idle_ms"]
        assert abs(parts - r["iteration_ms"]) < 1e-6
    uvm = next(r for r in rows if r["label"].startswith("uvm"))
    assert uvm["fault_wait_ms"] > rows[0]["fault_wait_ms"]


def test_the_capacity_sweep_draws_each_policy_from_the_least_capacity_to_the_footprint_with_the_samples(
        state: AppState) -> None:
    sweep = state.capacity_sweep(points=6)
    lines = {line["policy"]: line for line in sweep["lines"]}
    g = state.session.graph
    least = 100 * g.min_capacity[0] / g.footprint
    assert lines["uvm"]["capacity_pct"][0] == pytest.approx(least, abs=0.01)
    assert lines["uvm"]["capacity_pct"][-1] == pytest.approx(100)
    assert lines["device"]["capacity_pct"] == [pytest.approx(100)]  # device cannot page
    # the cliff: less memory, slower, for the paging policies
    assert lines["uvm"]["iteration_ms"][0] > 5 * lines["uvm"]["iteration_ms"][-1]
    assert {(m["policy"], round(m["capacity_pct"])) for m in sweep["measured"]} >= {("uvm", 50), ("autovm", 50)}
    assert sweep["cost_model"] == state.cost_model.name


def test_a_point_of_the_sweep_opens_its_sample_where_one_was_measured_else_its_simulation(state: AppState) -> None:
    assert state.open_sweep_point("uvm", 50.0), state.message
    assert state.session.timeline.source == "measured" and state.session.plan.policy == "uvm"
    assert state.open_sweep_point("autovm", 70.0), state.message
    s = state.session
    assert s.timeline.source == "simulated" and s.plan.policy == "autovm"
    assert round(100 * s.plan.capacity / s.graph.footprint) == 70


def test_the_page_tells_the_story_first_then_offers_the_cliff_the_lesson_and_compare() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    view.main()
    assert list(view.tabs._names) == ["Session", "Paging cliff", "Lesson", "Compare"]
    session = view.tabs[0]
    assert session[0] is view.story.headline and "per iteration" in view.story.headline.object
    assert session[2] is view.timeline
    sidebar = pn.Column()
    assert not session[3].objects and not sidebar.objects  # the first screen's document: the story alone
    view.complete(sidebar)
    assert session[3][0] is view.story.bars and any(o is view.sample for o in sidebar.objects)
    assert not view.cliff.live
    view.tabs.active = 1
    assert view.cliff.live and view.cliff.points.data["name"]


def test_each_lesson_step_sets_its_tab_the_time_axis_the_typical_iteration_and_what_it_lights_up() -> None:
    from vmexplorer.app import AppView
    from vmexplorer.views import LESSON

    view = AppView()
    view.main()
    assert not view.lesson._banner.visible  # no lesson until a step is asked for
    view.x_axis.value = "op"
    for number, step in enumerate(LESSON, start=1):
        view.lesson.step = number
        s = view.state.session
        assert view.lesson._banner.visible and view.TABS[view.tabs.active] == step.tab
        assert view.x_axis.value == "time"
        typical = str(s.timeline.typical_iteration() + 1) if s.timeline.iterations > 1 else "all"
        assert view.iteration.value == typical
        lit = view.lesson.lit
        assert (lit is not None) == (step.lit is not None), step.title
        assert view.lanes.picked == lit
        if lit is not None:  # the timeline shows it: its markers and transfers at full colour, the rest faded
            memops = timeline_source(view.timeline.object, "memops").data
            alpha = dict(zip(memops["tensor_id"], memops["alpha"], strict=True))
            assert alpha and alpha.get(lit, 1.0) > min(alpha.values()), step.title
            assert s.graph.tensors[lit].name in view.lesson.words.object
    view.lesson.close.clicks += 1
    assert view.lesson.step == 0 and not view.lesson._banner.visible


def test_a_tensor_picked_in_one_graph_is_let_go_when_another_graph_is_shown() -> None:
    from vmexplorer.app import AppView

    view = AppView()
    view.main()
    last = len(view.state.session.graph.tensors) - 1
    view.lanes.picked = last
    assert view.state.simulate_config("alexnet", 32, "60%", "autovm"), view.state.message
    assert view.lanes.picked is None and not view.state.message  # drawn, nothing lit up


def test_the_iteration_picker_the_browser_holds_names_the_iteration_the_timeline_draws() -> None:
    from bokeh.document import Document

    from vmexplorer.app import AppView

    view = AppView()
    view.main()
    model = view.iteration.get_root(Document())  # what the browser is sent
    view.iteration.value = "2"
    assert model.value == "2"
    assert view.state.load_sample("vgg19-b64-uvm-50pct.measured.vms"), view.state.message
    s = view.state.session
    typical = str(s.timeline.typical_iteration() + 1)
    assert view.iteration.value == typical and model.value == typical
    assert f"iteration {typical} of {s.timeline.iterations}" in view.timeline.object.children[0].title.text.text


def test_the_summary_holds_the_session_against_the_bound_under_the_baselines_cost_model(state):
    from vmexplorer.simulator.bound import lower_bound

    rows = {r["figure"]: r for r in state.summary_rows()}
    s = state.session
    bound = lower_bound(s.graph, s.plan.capacity, state.cost_model)
    typical = s.time_split().iteration_ns
    assert rows["against the bound"]["value"] == bound.versus(typical)
    assert float(rows["against the bound"]["value"].split("x")[0]) >= 1.0  # a measured run never beats it
    assert rows["against the bound"]["source"].startswith("measured")


def test_the_summary_parts_add_up_to_the_iteration_time_it_shows(state):
    fig = {r["figure"]: r["value"] for r in state.summary_rows()}
    split = state.session.time_split()
    assert fig["iteration time"] == format_ns(split.iteration_ns)  # the parts' sum (records.breakdown)
    assert state.session.summary["iteration_ns"] != split.iteration_ns  # this sample's median is not an iteration


def test_tuned_searches_in_the_cost_model_it_is_simulated_with_and_says_how_far_it_ends_from_the_bound(state):
    assert state.simulate_config("alexnet", 256, "50%", "tuned"), state.message
    said = [n for n in state.session.notes if n.startswith("tuned:")]
    assert len(said) == 1 and "the lower bound" in said[0]
    tuned_ns = iteration_ns(state)
    assert state.simulate_config("alexnet", 256, "50%", "belady"), state.message
    assert tuned_ns <= iteration_ns(state)  # the search starts from the best of the others, belady among them


def test_the_same_schedule_through_swap_is_one_click_away_simulated_with_the_sessions_cost_model(state):
    assert state.other_mechanism() == "swap"
    assert state.compare_mechanisms(), state.message
    other = state.comparison
    assert other.plan.mechanism == "swap" and other.plan.policy == "manual"
    assert list(other.plan.moves) == list(state.moves)  # the shown schedule, move for move
    assert other.timeline.source == "simulated" and other.cost_model == state.cost_model
    assert state.comparison_origin == "the same schedule through swap (simulated)"
    # pinned copies run both ways at once and fault nothing in: the driver's cost shows
    assert other.time_split().iteration_ns < state.session.time_split().iteration_ns


def test_a_swap_plan_is_simulated_held_against_its_own_bound_and_its_copies_are_named_for_what_they_are(state):
    from bokeh.models import Legend

    from vmexplorer.simulator.bound import lower_bound

    assert state.simulate_config("vgg19", 64, "45%", "belady", {}, "swap"), state.message
    s = state.session
    assert s.plan.mechanism == "swap" and "through swap" in state.origin
    rows = {r["figure"]: r["value"] for r in state.summary_rows()}
    bound = lower_bound(s.graph, s.plan.capacity, s.cost_model, s.plan.mechanism)
    assert rows["against the bound"] == bound.versus(s.time_split().iteration_ns)
    assert bound.set_by != "migration bandwidth"  # the two directions overlap: never their sum
    fig = timeline_figure(s)
    (legend,) = fig.children[0].select({"type": Legend})
    labels = {item.label["value"] for item in legend.items}
    assert {"copied in on demand", "copied out to make room"} <= labels and "demand fault" not in labels
    assert not state.simulate_config("vgg19", 64, "50%", "uvm", {}, "swap")
    assert "swap" in state.message and state.session is s  # refused in one message, the view kept


def test_pages_of_one_process_share_the_baselines_their_edits_are_held_against() -> None:
    """A class opens the same sample and drags: the first drag of each page needs every policy simulated
    with the sample's cost model, once per server process, not once per page."""
    pages = [AppState(), AppState()]
    for page in pages:
        assert page.load_sample(), page.message
        mv = page.moves[0]
        assert page.drag("offload", mv.tensor, mv.offload_after + 1, mv.offload_after), page.message
        assert page.session.timeline.source == "simulated"
    first, second = (page._baseline("autovm") for page in pages)
    assert first is not None and first is second


def test_run_on_gpu_queues_a_swap_plan_as_shown(state: AppState, monkeypatch: pytest.MonkeyPatch) -> None:
    import vmexplorer.views as views

    submitted: list[Any] = []

    class Queue:
        def submit(self, request: Any) -> object:
            submitted.append(request)
            return object()

    monkeypatch.setattr(views, "run_queue", lambda: Queue())
    monkeypatch.setattr(views.GpuRun, "_start_polling", lambda self: None)
    assert state.simulate_config("alexnet", 64, "50%", "autovm", {}, "swap"), state.message
    views.GpuRun(state=state)._on_run()
    assert state.message == "" and [r.plan for r in submitted] == [state.session.plan]
