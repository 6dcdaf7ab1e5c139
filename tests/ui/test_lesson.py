"""The lesson: each step opens its sample and sets the view a class looks at, and its words are the figures
that view shows: each claim a student reads can be found on the screen the step sets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vmexplorer.config import Mechanism
from vmexplorer.plan import Direction, Mode, Origin
from vmexplorer.plots.timeline import timeline_source
from vmexplorer.session.planned import plan_for
from vmexplorer.session.samples import read_sample
from vmexplorer.simulator import simulate
from vmexplorer.ui import lesson, numbers
from vmexplorer.ui.lesson import LESSON
from vmexplorer.ui.page import Page
from vmexplorer.ui.state import TABS, AppState
from vmexplorer.units import format_bytes, format_ns

# the steps some tests open by what they are, wherever the lesson puts them
DRIVER = next(n for n, step in enumerate(LESSON, start=1) if step.tab == "Compare")
RECOMPUTE = next(n for n, step in enumerate(LESSON, start=1) if step.title.endswith("Move or recompute?"))


def opened(n: int) -> AppState:
    state = AppState()
    assert lesson.open_step(state, n), state.message
    return state


@pytest.mark.parametrize("n", range(1, len(LESSON) + 1))
def test_each_step_opens_its_sample_on_the_time_axis_and_typical_iteration_in_its_tab(n: int) -> None:
    state = opened(n)
    step = LESSON[n - 1]
    assert state.step == n and state.tab == step.tab and state.axis == "time" and state.iteration == ""
    assert state.loaded is not None and state.source.name == step.sample
    assert (state.picked is not None) == (step.lit is not None), step.title
    words = lesson.words(state)
    assert words and state.message == ""
    if state.picked is not None:
        assert state.session.graph.tensors[state.picked].name in words


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_first_steps_say_the_iteration_time_the_headline_shows(n: int) -> None:
    from vmexplorer.ui.story import headline

    state = opened(n)
    shown = format_ns(state.session.time_split().iteration_ns)
    assert shown in lesson.words(state) and shown in headline(state)


def test_the_autovm_step_says_what_it_moves_and_the_faults_it_leaves_to_the_update() -> None:
    state = opened(3)
    s, words = state.session, lesson.words(state)
    planned = sum(m.nbytes for m in s.plan.memops if m.origin is Origin.PLAN and m.direction is Direction.TO_HOST)
    update = {op for op, o in enumerate(s.graph.ops) if o.phase.value == "update"}
    faulted = sum(m.nbytes for m in s.plan.memops if m.mode is Mode.FAULT and m.complete_before in update)
    assert format_bytes(planned) in words and format_bytes(faulted) in words and faulted > 0
    assert "does not plan" in words


def test_the_early_prefetch_step_drags_the_prefetch_whose_earliness_costs_most_and_the_headline_shows_it() -> None:
    from vmexplorer.ui.story import headline

    state = AppState()
    assert state.open_sample(LESSON[3].sample)
    s, moves = state.session, list(state.moves)
    config = replace(s.plan.config, policy="manual", options={})
    costs = {}
    for i, mv in enumerate(moves):
        if mv.prefetch_after is None:
            continue
        earliest = state.marker_range("prefetch", mv.tensor, mv.prefetch_after)[0]
        if earliest < mv.prefetch_after:
            plan = plan_for(config, state.cost_model, [*moves[:i], replace(mv, prefetch_after=earliest),
                                                       *moves[i + 1:]], graph=s.graph).plan
            costs[mv.tensor] = int(simulate(s.graph, plan, state.cost_model).iteration_ns().max())
    assert lesson.open_step(state, 4), state.message
    assert state.picked is not None and costs[state.picked] == max(costs.values()) and len(costs) > 1
    edited, was = state.session.time_split().iteration_ns, state.unedited().time_split().iteration_ns
    assert edited > 1.1 * was, "the effect is one a class sees on the bars and in the headline"
    words = lesson.words(state)
    assert f"{format_ns(edited)} per iteration instead of {format_ns(was)}" in words
    assert format_ns(edited - was) in headline(state)


def test_the_cliff_step_says_what_the_cliff_draws() -> None:
    state = opened(5)
    sweep = numbers.sweep(state)
    lines = {line["policy"]: line for line in sweep["lines"]}
    worst = lines["uvm"]["iteration_ms"][0] / lines["device"]["iteration_ms"][0]
    assert f"{worst:.1f}x slower than device" in lesson.words(state) and sweep["bound"]["iteration_ms"]


def test_the_bound_step_holds_the_best_schedule_against_the_bound_drawn_on_the_bars_of_its_own_gpu() -> None:
    page = Page()
    page.main()
    page.banner.go(6)
    state = page.state
    s = state.session
    assert s.environment["gpu"] == "NVIDIA H200" and s.plan.policy == "tuned"
    b = numbers.bound(state)
    words = lesson.words(state)
    assert format_ns(b.lower_bound_ns) in words and b.set_by in words
    assert format_ns(s.time_split().iteration_ns) in words
    assert format_ns(numbers.baseline(state, "uvm").iteration_ns) in words  # uvm measured on the same GPU
    label = next(a for a in page.bars.figure.center if a.name == "bound_label")
    assert label.visible and f"{b.lower_bound_ns / 1e6:.1f} ms" in label.text


def test_the_driver_step_sets_the_swap_run_beside_the_same_schedule_through_unified_memory_in_compare() -> None:
    page = Page()
    page.main()
    page.banner.go(DRIVER)
    state = page.state
    s, twin = state.session, state.comparison
    assert s.plan.mechanism is Mechanism.SWAP and twin is not None and twin.plan.mechanism is Mechanism.UVM
    assert twin.plan.policy == s.plan.policy and twin.timeline.source == s.timeline.source == "measured"
    assert TABS[page.tabs.active] == "Compare"
    words = lesson.words(state)
    # a swap plan may be made with less room than the capacity (its pool must fit), so its moves may differ
    same = twin.plan.moves == s.plan.moves
    assert ("the same schedule" in words) == same and (f"{s.plan.policy}'s schedule for each" in words) != same
    bars = numbers.compare_breakdown_rows(state)
    for ns in (twin.time_split().iteration_ns, s.time_split().iteration_ns):
        assert format_ns(ns) in words and any(abs(r["iteration_ms"] - ns / 1e6) < 1e-9 for r in bars)
    times = numbers.times_than(s.time_split().iteration_ns, twin.time_split().iteration_ns, "through the driver")
    assert times in words
    by_driver, with_copies = (numbers.bound_through(state, m) for m in (Mechanism.UVM, Mechanism.SWAP))
    assert format_ns(by_driver.lower_bound_ns) in words and format_ns(with_copies.lower_bound_ns) in words
    assert by_driver.lower_bound_ns <= twin.time_split().iteration_ns, "no measured run beats its bound"


def test_the_move_or_recompute_step_weighs_the_largest_feature_map_moved_at_its_gpus_rates() -> None:
    state = opened(RECOMPUTE)
    s, cost, words = state.session, state.cost_model, lesson.words(state)
    g = s.graph
    moved = {m.tensor for m in s.plan.memops if m.origin is Origin.PLAN}
    feature_maps = [t for t, x in enumerate(g.tensors) if t in moved and x.kind.value == "activation"
                    and x.producer >= 0 and g.ops[x.producer].phase.value == "forward"]
    assert feature_maps and s.plan.mechanism is Mechanism.UVM
    t = g.tensors[state.picked]
    assert state.picked in feature_maps and t.nbytes == max(g.tensors[f].nbytes for f in feature_maps)
    out_ns = cost.call_ns + t.nbytes / cost.evict_bytes_per_ns  # under uvm: the driver's rates
    in_ns = cost.call_ns + t.nbytes / cost.prefetch_bytes_per_ns
    again_ns = cost.op_times_ns(g)[t.producer]
    assert again_ns < out_ns + in_ns, "the sample makes the point the step says"
    for said in (format_ns(out_ns), format_ns(in_ns), format_ns(out_ns + in_ns), format_ns(again_ns),
                 f"{(out_ns + in_ns) / again_ns:.0f}x less than moving it", g.ops[t.producer].name):
        assert said in words, said


def test_the_move_or_recompute_step_says_what_checkpoint_spends_recomputing_as_its_bar_shows() -> None:
    state = opened(RECOMPUTE)
    bar = next(r for r in numbers.breakdown_rows(state) if r["policy"] == "checkpoint")
    assert bar["recompute_ms"] > 0
    assert format_ns(round(bar["recompute_ms"] * 1e6)) in lesson.words(state)


def test_a_step_the_lesson_has_not_is_refused_in_one_message() -> None:
    state = AppState()
    assert not lesson.open_step(state, 99) and f"steps 1 to {len(LESSON)}" in state.message
    assert lesson.open_step(state, 0) and state.step == 0


def test_the_banner_steps_through_the_lesson_and_not_past_its_ends_and_ends_it() -> None:
    page = Page()
    banner = page.banner
    assert not banner._banner.visible and banner.start.visible  # no lesson until a step is asked for
    banner.start.clicks += 1
    assert page.state.step == 1 and banner._banner.visible and not banner.start.visible
    banner.previous.clicks += 1
    assert page.state.step == 1
    for _ in range(len(LESSON) + 2):
        banner.next.clicks += 1
    assert page.state.step == len(LESSON) and banner.next.disabled
    assert banner.title.object == LESSON[-1].title and banner.words.object == lesson.words(page.state)
    banner.close.clicks += 1
    assert page.state.step == 0 and not banner._banner.visible


def test_each_step_lights_its_tensor_up_in_the_timeline_it_sets() -> None:
    page = Page()
    page.main()
    page.state.axis = "op"
    for number, step in enumerate(LESSON, start=1):
        page.banner.go(number)
        s = page.state.session
        assert page.timeline.x_axis.value == "time", step.title
        typical = str(s.timeline.typical_iteration() + 1) if s.timeline.iterations > 1 else "all"
        assert page.timeline.iteration.value == typical
        lit = page.state.picked
        if lit is not None and step.tab == "Session":
            memops = timeline_source(page.timeline.pane.object, "memops").data
            alpha = dict(zip(memops["tensor_id"], memops["alpha"], strict=True))
            assert alpha and alpha.get(lit, 1.0) > min(alpha.values()), step.title


def test_the_uvm_twin_of_the_driver_step_was_measured_on_the_same_gpu() -> None:
    state = opened(DRIVER)
    twin = read_sample(state.twin(state.session.plan.policy, Mechanism.UVM))
    assert twin.environment["gpu"] == state.session.environment["gpu"]
