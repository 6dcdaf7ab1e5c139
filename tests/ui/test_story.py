"""The story panels: the headline, where the time goes with the bound, and the paging cliff, each built once
and fed new numbers through its data sources."""

from __future__ import annotations

from vmexplorer.ui import numbers
from vmexplorer.ui.cliff import PagingCliff
from vmexplorer.ui.state import AppState
from vmexplorer.ui.story import WhereTimeGoes, headline


def test_the_headline_says_the_configuration_the_iteration_time_against_device_and_where_most_of_it_went(
        state: AppState) -> None:
    text = headline(state)
    assert text.startswith("VGG-19, batch 64, autovm at 50%: ") and "per iteration (measured on the H100)" in text
    assert "x slower than device" in text and "of it waiting on" in text


def test_where_the_time_goes_updates_its_bars_and_its_bound_in_place_when_another_session_is_shown(
        state: AppState) -> None:
    view = WhereTimeGoes(state=state)
    source = view.figure.select_one({"name": "breakdown"})
    before = list(source.data["label"])
    assert state.open_sweep_point("uvm", 50.0), state.message
    view.draw()
    assert view.figure.select_one({"name": "breakdown"}) is source
    assert list(source.data["label"]) != before and source.data["label"][0] == "this session (uvm), measured"
    span = view.figure.select_one({"name": "bound"})
    assert span.visible and span.location == numbers.bound(state).lower_bound_ns / 1e6


def test_the_bars_legend_sits_above_the_plot_clear_of_every_bar(state: AppState) -> None:
    fig = WhereTimeGoes(state=state).figure
    assert [legend.name for legend in fig.above] == ["breakdown_legend"] and fig.legend[0] not in fig.center


def test_tapping_a_measured_point_of_the_cliff_opens_that_sample(state: AppState) -> None:
    view = PagingCliff(state=state, live=True)
    data = view.points.data
    i = next(k for k, name in enumerate(data["name"]) if name == "vgg19-b64-uvm-75pct.measured.vms")
    view.points.selected.indices = [i]
    assert state.session.plan.policy == "uvm" and state.session.timeline.source == "measured"
    assert round(100 * state.session.plan.capacity / state.session.graph.footprint) == 75
    assert view.points.selected.indices == []


def test_the_cliff_simulates_nothing_until_the_page_shows_it_and_then_draws_the_bound(state: AppState) -> None:
    view = PagingCliff(state=state)
    assert view.points.data["name"] == []
    view.live = True
    view.draw()
    assert "vgg19-b64-uvm-50pct.measured.vms" in view.points.data["name"]
    bound = view.figure.select_one({"name": "sweep_bound"}).data
    assert bound["iteration_ms"] == numbers.sweep(state)["bound"]["iteration_ms"] != []


def test_the_cliff_draws_every_policy_that_plans_alone_checkpoint_included_each_in_a_colour_of_its_own(
        state: AppState) -> None:
    from vmexplorer.policies import POLICIES

    view = PagingCliff(state=state, live=True)
    lines = view.figure.select_one({"name": "sweep_lines"}).data
    planned_alone = [name for name, spec in POLICIES.items() if not spec.takes_moves and not spec.searches]
    assert "checkpoint" in planned_alone
    assert lines["policy"] == [f"{name} (simulated)" for name in planned_alone]
    assert len(set(lines["color"])) == len(planned_alone)
    assert len(lines["ys"][planned_alone.index("checkpoint")]) > 1, "a line, not a point"


def test_tapping_a_checkpoint_point_of_the_cliff_opens_a_simulation_that_recomputes(state: AppState) -> None:
    view = PagingCliff(state=state, live=True)
    data = view.points.data
    i = next(k for k, (policy, pct) in enumerate(zip(data["policy"], data["capacity_pct"]))
             if policy == "checkpoint" and pct < 100)
    view.points.selected.indices = [i]
    s = state.session
    assert state.message == "" and s.plan.policy == "checkpoint" and s.timeline.source == "simulated"
    assert s.plan.recomputes and s.time_split().recompute_ns > 0
