"""The store (`vmexplorer.ui.state`) as a specification: opening, configuring, editing and comparing, each
problem said once with the store left as it was."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path
from typing import Any

import pytest
from ui_helpers import UVM_TWIN, iteration_ns, snapshot

from vmexplorer.config import Mechanism
from vmexplorer.plan.validate import validate_plan
from vmexplorer.session import load_session
from vmexplorer.session.samples import DEFAULT_SAMPLE, SAMPLES
from vmexplorer.ui import numbers
from vmexplorer.ui.state import AppState


def test_the_default_sample_opens_measured_with_the_cost_model_fitted_to_its_gpu(state: AppState) -> None:
    assert state.session.timeline.source == "measured" and state.message == ""
    assert state.moves == list(state.session.plan.moves) and state.moves
    assert state.cost_model is state.session.cost_model and state.cost_model.name.startswith("the H100's vgg19 b64")
    assert state.source.kind == "sample" and state.source.name == DEFAULT_SAMPLE
    assert state.status == f"opened {DEFAULT_SAMPLE}"


def test_the_default_samples_uvm_twin_is_one_click_away(state: AppState) -> None:
    assert state.twin("uvm") == UVM_TWIN
    assert state.compare_with_twin("uvm") and state.message == ""
    c = state.comparison
    assert (c.plan.policy, c.timeline.source, c.plan.capacity) == ("uvm", "measured", state.session.plan.capacity)
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
    assert state.origin.endswith("(edited)") and state.edited


def test_an_edit_of_a_swap_session_stays_swap_with_its_copies_in_the_order_its_simulation_runs_fastest() -> None:
    from vmexplorer.policies import Simulation, order_copies
    from vmexplorer.simulator import simulate
    from vmexplorer.simulator.bound import lower_bound

    state = AppState()
    assert state.open_sample("h200-vgg19-b64-tuned-swap-75pct.measured.vms"), state.message
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


def test_undoing_the_edits_shows_the_session_as_loaded_again(state: AppState) -> None:
    loaded = state.session
    move = state.moves[0]
    assert state.drag("prefetch", move.tensor, move.offload_after + 1)
    assert state.edits_text() != "" and state.unedited() is not None
    assert state.reset_edits() and state.session is loaded and not state.edited
    assert state.edits_text() == "" and state.unedited() is None and state.status == "edits undone"


def test_a_links_edits_apply_to_the_loaded_plan_and_no_edits_undo_them(state: AppState) -> None:
    move = state.moves[0]
    assert state.drag("prefetch", move.tensor, move.offload_after + 1)
    text, moves = state.edits_text(), list(state.moves)
    other = AppState()
    assert other.open_sample() and other.apply_edits(text), other.message
    assert sorted(other.moves, key=repr) == sorted(moves, key=repr) and other.status == "opened the link's edits"
    assert other.apply_edits("") and not other.edited


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
    (lambda s: s.simulate_config("vgg19", 64, "50%", "belady", {}, "paper"), "unknown mechanism 'paper'"),
    (lambda s: s.load(Path("no/such/file.vms")), "cannot read"),
    (lambda s: s.open_sample("../pyproject.toml"), "no sample session"),
    (lambda s: s.open_sample("x" * 500), "no sample session"),
])
def test_an_edit_or_config_that_cannot_work_says_why_and_keeps_the_state(state: AppState, call: Any,
                                                                          says: str) -> None:
    kept = snapshot(state)
    assert call(state) is False
    assert says in state.message and snapshot(state) == kept


def test_simulating_a_config_uses_the_calibrated_model_for_the_same_graph_and_names_where_it_came_from(
        state: AppState) -> None:
    calibrated = state.cost_model
    assert state.simulate_config("vgg19", 64, "60%", "autovm", {"prefetch_distance": 2}), state.message
    assert state.session.cost_model is calibrated and state.session.plan.options["prefetch_distance"] == 2
    assert state.source.kind == "config" and state.source.cost == DEFAULT_SAMPLE
    assert state.simulate_config("vgg19", 64, "70%", "uvm"), state.message
    assert state.source.cost == DEFAULT_SAMPLE  # a configuration of a configuration: the same model, named so
    assert state.simulate_config("alexnet", 16, "4GiB", "uvm", {}), state.message
    assert state.session.cost_model.name == "h100-uncalibrated" and state.source.cost == ""


def test_a_session_keeps_its_own_cost_model(state: AppState) -> None:
    simulated = Path(__file__).parents[1] / "session" / "data" / "schema1-vgg19-b64-device.simulated.vms"
    s = AppState()
    assert s.load(simulated)
    assert s.cost_model.name == load_session(simulated).cost_model.name == "h100-uncalibrated"
    assert s.source.kind == "upload"


def test_a_failing_action_takes_the_last_actions_status_away(state: AppState) -> None:
    assert state.status.startswith("opened")
    assert not state.simulate_config("vgg19", 64, "nonsense", "autovm")
    assert "not a size" in state.message and state.status == ""


def test_a_new_session_shows_its_typical_iteration_and_a_tensor_of_another_graph_is_let_go(state: AppState) -> None:
    state.iteration, state.picked = "2", len(state.session.graph.tensors) - 1
    assert state.shown_iteration() == 1
    assert state.open_sample(UVM_TWIN)
    s = state.session
    assert state.shown_iteration() == s.timeline.typical_iteration() and state.picked is not None
    assert state.simulate_config("alexnet", 32, "60%", "autovm"), state.message
    assert state.picked is None and state.shown_iteration() is None  # one iteration: all of it


def test_a_point_of_the_sweep_opens_its_sample_where_one_was_measured_else_its_simulation(state: AppState) -> None:
    assert state.open_sweep_point("uvm", 50.0), state.message
    assert state.session.timeline.source == "measured" and state.session.plan.policy == "uvm"
    assert state.open_sweep_point("autovm", 70.0), state.message
    s = state.session
    assert s.timeline.source == "simulated" and s.plan.policy == "autovm"
    assert round(100 * s.plan.capacity / s.graph.footprint) == 70


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


def test_a_swap_configuration_is_refused_for_a_policy_that_runs_under_uvm_only(state: AppState) -> None:
    assert state.simulate_config("vgg19", 64, "55%", "belady", {}, "swap"), state.message
    s = state.session
    assert s.plan.mechanism == "swap" and "through swap" in state.origin
    assert not state.simulate_config("vgg19", 64, "50%", "uvm", {}, "swap")
    assert "swap" in state.message and state.session is s  # refused in one message, the view kept


def test_pages_of_one_process_share_the_baselines_their_edits_are_held_against() -> None:
    """A class opens the same sample and drags: the first drag of each page needs every policy simulated
    with the sample's cost model, once per server process, not once per page."""
    pages = [AppState(), AppState()]
    for page in pages:
        assert page.open_sample(), page.message
        mv = page.moves[0]
        assert page.drag("offload", mv.tensor, mv.offload_after + 1, mv.offload_after), page.message
        assert page.session.timeline.source == "simulated"
    first, second = (numbers.baseline(page, "autovm") for page in pages)
    assert first is not None and first.split is second.split
