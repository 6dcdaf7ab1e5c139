"""The app's story panels: built once, fed new numbers through their data sources."""

from __future__ import annotations

import pytest

from vmexplorer.appstate import AppState
from vmexplorer.views import PagingCliff, WhereTimeGoes, headline


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
    source = view.figure.select_one({"name": "breakdown"})
    before = list(source.data["label"])
    assert state.open_sweep_point("uvm", 50.0), state.message
    assert view.figure.select_one({"name": "breakdown"}) is source
    assert list(source.data["label"]) != before and source.data["label"][0] == "this session (uvm), measured"
    assert view.headline.object.startswith("vgg19 batch 64, uvm")


def test_tapping_a_measured_point_of_the_cliff_opens_that_sample(state: AppState) -> None:
    view = PagingCliff(state=state)
    data = view.points.data
    i = next(k for k, name in enumerate(data["name"]) if name == "vgg19-b64-uvm-75pct.measured.vms")
    view.points.selected.indices = [i]
    assert state.session.plan.policy == "uvm" and state.session.timeline.source == "measured"
    assert round(100 * state.session.plan.capacity / state.session.graph.footprint) == 75
    assert view.points.selected.indices == []
