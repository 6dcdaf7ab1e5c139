"""The app's story panels: built once, fed new numbers through their data sources."""

from __future__ import annotations

import pytest

from vmexplorer.appstate import AppState
from vmexplorer.simulator import simulate
from vmexplorer.units import format_ns
from vmexplorer.views import LESSON, Lesson, PagingCliff, WhereTimeGoes, _bound, headline


@pytest.fixture
def state() -> AppState:
    s = AppState()
    assert s.load_sample(), s.message
    return s


def test_the_headline_says_the_iteration_time_against_device_and_where_most_of_it_went(state: AppState) -> None:
    text = headline(state)
    assert text.startswith("vgg19 batch 64, autovm: ") and "per iteration (measured)" in text
    assert "x slower than device" in text and "of it waiting on" in text


def test_where_the_time_goes_updates_its_bars_in_place_when_another_session_is_shown(state: AppState) -> None:
    view = WhereTimeGoes(state=state)
    assert view.figure is None  # drawn when the page first asks for the bars, after its first screen
    bars = view.bars
    source = view.figure.select_one({"name": "breakdown"})
    before = list(source.data["label"])
    assert state.open_sweep_point("uvm", 50.0), state.message
    assert view.bars is bars and view.figure.select_one({"name": "breakdown"}) is source
    assert list(source.data["label"]) != before and source.data["label"][0] == "this session (uvm), measured"
    assert view.headline.object.startswith("vgg19 batch 64, uvm")


def test_tapping_a_measured_point_of_the_cliff_opens_that_sample(state: AppState) -> None:
    view = PagingCliff(state=state, live=True)
    data = view.points.data
    i = next(k for k, name in enumerate(data["name"]) if name == "vgg19-b64-uvm-75pct.measured.vms")
    view.points.selected.indices = [i]
    assert state.session.plan.policy == "uvm" and state.session.timeline.source == "measured"
    assert round(100 * state.session.plan.capacity / state.session.graph.footprint) == 75
    assert view.points.selected.indices == []


@pytest.mark.parametrize("step", range(1, len(LESSON) + 1))
def test_each_lesson_step_opens_its_session_and_says_what_that_session_shows(step: int) -> None:
    state = AppState()
    lesson = Lesson(state=state)
    lesson.step = step
    assert state.message == "", state.message
    assert lesson.title.object == LESSON[step - 1].title
    assert state.origin.endswith(f"`{LESSON[step - 1].sample}`") or LESSON[step - 1].late_prefetch
    split = state.session.time_split()
    if step in (1, 2, 3):
        assert format_ns(split.iteration_ns) in lesson.words.object
    assert lesson.previous.disabled == (step == 1) and lesson.next.disabled == (step == len(LESSON))


def test_the_late_prefetch_step_shows_the_edit_against_the_unedited_plan_on_the_same_model() -> None:
    state = AppState()
    lesson = Lesson(state=state, step=3)
    lesson.step = 4
    assert state.session.plan.policy == "manual" and state.session.timeline.source == "simulated"
    edited = state.session.time_split().iteration_ns
    unedited = int(simulate(state.loaded.graph, state.loaded.plan, state.cost_model).iteration_ns().max())
    assert edited > unedited
    assert f"takes {format_ns(edited)} instead of {format_ns(unedited)}" in lesson.words.object


def test_the_late_prefetch_step_drags_the_prefetch_whose_lateness_costs_the_iteration_most() -> None:
    from dataclasses import replace

    from vmexplorer.plan import PlanError
    from vmexplorer.policies import compile_plan

    state = AppState()
    Lesson(state=state, step=4)
    assert state.load_sample(LESSON[3].sample)
    s, moves = state.session, list(state.moves)
    costs = {}
    for i, mv in enumerate(moves):
        latest = None if mv.prefetch_after is None else state.marker_range("prefetch", mv.tensor, mv.prefetch_after)[1]
        if latest is None or latest <= mv.prefetch_after:
            continue
        try:
            plan = compile_plan(s.graph, s.plan.capacity, "manual",
                                moves=[*moves[:i], replace(mv, prefetch_after=latest), *moves[i + 1:]])
        except PlanError:
            continue
        costs[mv.tensor] = int(simulate(s.graph, plan, state.cost_model).iteration_ns().max())
    lesson = Lesson(state=state)
    lesson.step = 4
    dragged = lesson.lit
    assert dragged is not None and costs[dragged] == max(costs.values())
    assert s.graph.tensors[dragged].name in lesson.words.object and len(costs) > 1


def test_the_driver_step_sets_a_swap_run_beside_the_same_schedule_through_unified_memory() -> None:
    from vmexplorer.appstate import read_sample
    from vmexplorer.config import Mechanism

    state = AppState()
    lesson = Lesson(state=state)
    lesson.step = len(LESSON)
    s = state.session
    assert s.plan.mechanism is Mechanism.SWAP and s.timeline.source == "measured"
    twin = read_sample(state.twin(s.plan.policy, Mechanism.UVM))
    assert twin.plan.mechanism is Mechanism.UVM and twin.timeline.source == "measured"
    words = lesson.words.object
    for ns in (twin.time_split().iteration_ns, s.time_split().iteration_ns, state.bound().lower_bound_ns):
        assert format_ns(ns) in words
    assert "than through the driver" in words and f"{twin.cost_model.evict_bytes_per_ns:.1f} GB/s" in words


def test_the_lesson_does_not_step_past_its_ends() -> None:
    lesson = Lesson(state=AppState())
    lesson.previous.clicks += 1
    assert lesson.step == 1
    for _ in range(len(LESSON) + 2):
        lesson.next.clicks += 1
    assert lesson.step == len(LESSON)


def test_the_cliff_simulates_nothing_until_the_page_shows_it(state: AppState) -> None:
    view = PagingCliff(state=state)
    assert view.points.data["name"] == []
    view.live = True
    assert "vgg19-b64-uvm-50pct.measured.vms" in view.points.data["name"]


def test_the_timeline_panel_draws_a_session_picks_its_typical_iteration_and_keeps_its_figures_through_an_edit(
        state: AppState) -> None:
    from vmexplorer.views import ALL_ITERATIONS, TimelinePanel

    panel = TimelinePanel(state=state)
    s = state.session
    panel.show_session(s)
    assert panel.iteration.value == str(s.timeline.typical_iteration() + 1) != ALL_ITERATIONS
    assert panel.shown_iteration == s.timeline.typical_iteration() and panel.pane.object is not None
    assert state.simulate_config("vgg19", 64, "50%", "autovm"), state.message
    panel.show_session(state.session)
    fig = panel.pane.object
    move = state.moves[0]
    assert state.drag("prefetch", move.tensor, move.prefetch_after - 1)
    panel.draw()  # an edit's simulation goes into the figures drawn: a person's zoom stays
    assert panel.pane.object is fig and panel.drawn is state.session
    panel.x_axis.value = "op"  # another axis: drawn anew
    assert panel.pane.object is not fig and panel.pane.object.children[0].tags == ["op"]


def test_the_bound_step_holds_the_best_schedule_against_the_bound_of_its_own_gpu(state: AppState) -> None:
    from vmexplorer.simulator.bound import lower_bound

    lesson = Lesson(state=state)
    lesson.step = next(i for i, step in enumerate(LESSON, start=1) if step.words is _bound)
    s = state.session
    assert s.environment["gpu"] == "NVIDIA H200" and s.plan.policy == "tuned"
    bound = lower_bound(s.graph, s.plan.capacity, state.cost_model)
    words = lesson.words.object
    assert format_ns(bound.lower_bound_ns) in words and bound.set_by in words
    assert format_ns(s.time_split().iteration_ns) in words
    assert format_ns(state.baseline_ns("uvm")) in words  # uvm measured on the same GPU
