"""A page's slow actions done on a copy of its store in the work pool: the page ends as if done here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from vmexplorer import pool as work_pool
from vmexplorer.session import planned
from vmexplorer.session.samples import DEFAULT_SAMPLE
from vmexplorer.ui import link, numbers, work
from vmexplorer.ui.page import Page, compare_and_show
from vmexplorer.ui.state import AppState


def _done_here(state: AppState, job: work.Job, sweep: bool = False) -> AppState:
    """`job` run as a worker runs it, its outcome applied to `state`."""
    work.apply(state, work.run(work.snapshot(state), job, sweep))
    return state


def _comparable(state: AppState) -> dict[str, Any]:
    s = state.session
    return {"status": state.status, "message": state.message, "origin": state.origin, "tab": state.tab,
            "source": state.source, "moves": list(state.moves),
            "iteration_ns": None if s is None else s.timeline.iteration_ns().tolist(),
            "comparison": None if state.comparison is None else state.comparison.plan.policy}


@pytest.mark.parametrize("method, args", [
    ("simulate_config", ("alexnet", 32, "60%", "belady")),
    ("open_sample", ("h100-vgg19-b64-uvm-50pct.measured.vms",)),
    ("compare_mechanisms", ()),
    ("simulate_config", ("alexnet", 32, "1%", "belady")),  # refused: the message comes back
])
def test_a_store_method_done_in_a_copy_leaves_the_store_as_doing_it_here_does(method: str,
                                                                             args: tuple[Any, ...]) -> None:
    here, there = AppState(), AppState()
    for s in (here, there):
        s.open_sample(DEFAULT_SAMPLE)
    getattr(here, method)(*args)
    assert _comparable(_done_here(there, work.Job(method, args))) == _comparable(here)


def test_a_function_of_the_store_done_in_a_copy_is_a_link_opened_or_a_comparison_shown() -> None:
    here, there = AppState(), AppState()
    for s in (here, there):
        s.open_sample(DEFAULT_SAMPLE)
    fields = {"model": "alexnet", "batch": "32", "capacity": "70%", "policy": "autovm", "tab": "Paging cliff"}
    link.apply(here, fields)
    _done_here(there, work.job_of(there, link.apply, (there, fields)) or pytest.fail("not a job"))
    assert _comparable(there) == _comparable(here)
    _done_here(there, work.Job(compare_and_show, ("compare_mechanisms",)))
    assert there.comparison is not None and there.tab == "Compare"


def test_what_drawing_asks_for_is_worked_out_in_the_copy_and_kept_by_the_store() -> None:
    state = AppState()
    state.open_sample(DEFAULT_SAMPLE)
    outcome = work.run(work.snapshot(state), work.Job("simulate_config", ("alexnet", 32, "55%", "vdnn")), True)
    assert {"_bound", "_split"} <= set(outcome.kept)
    for kept in planned._MEMOS.values():
        kept.clear()  # as in the server, which never worked them out
    work.apply(state, outcome)
    with planned.recording() as looked_up:
        numbers.summary_rows(state), numbers.breakdown_rows(state), numbers.sweep(state)
    for name, rows in looked_up.items():
        assert all(planned._MEMOS[name]._kept.get(key) is value for key, value in rows.items())
        assert set(rows) <= set(outcome.kept[name])  # every one came from the copy


def test_the_unedited_plans_simulation_comes_back_with_an_edited_link() -> None:
    state = AppState()
    state.open_sample(DEFAULT_SAMPLE)
    state.toggle_offload(state.moves[0].tensor)
    edits = state.edits_text()
    state.reset_edits()
    _done_here(state, work.Job("apply_edits", (edits,)))
    assert state.edited and state.unedited_kept() is not None


def test_edits_of_what_is_shown_stay_on_the_event_loop_and_opening_anything_goes_to_the_pool() -> None:
    state = AppState()
    assert work.job_of(state, state.drag, ("prefetch", 1, 3)) is None
    assert work.job_of(state, state.toggle_offload, (1,)) is None
    assert work.job_of(state, state.reset_edits, ()) is None
    for method in (state.open_sample, state.load, state.simulate_config, state.open_sweep_point,
                   state.compare_with, state.apply_edits):
        job = work.job_of(state, method, ())
        assert job is not None and job.action == method.__name__
    assert work.job_of(state, lambda s: None, (state,)) is None  # cannot reach a worker: done here


class _Doc:
    """A document whose next tick comes at once, as a served one's comes soon."""

    def add_next_tick_callback(self, callback: Callable[[], None]) -> None:
        callback()


@pytest.fixture
def one_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[work_pool.WorkPool]:
    with work_pool.WorkPool(1) as pool:
        monkeypatch.setattr(work_pool, "shared_pool", lambda: pool)
        yield pool


def _until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_pages_job_shows_it_is_under_way_and_its_outcome_is_drawn_when_it_comes(one_worker: Any) -> None:
    page = Page()
    page.working.start(work.Job("simulate_config", ("alexnet", 32, "60%", "belady")), _Doc())
    assert page.working.row.visible and page.working.note.object.startswith("Simulating")
    # the status is set before the page draws (in the pool's thread here): wait for the drawing
    _until(lambda: "AlexNet" in page.headline.text.object)
    assert page.state.status.startswith("simulated belady") and not page.working.row.visible


def test_cancel_stops_the_job_says_so_and_leaves_what_is_shown(one_worker: Any) -> None:
    page = Page()
    shown = page.state.session
    page.working.start(work.Job("simulate_config", ("resnet152", 64, "50%", "tuned")), _Doc())
    page.working.stop("cancelled")
    assert page.state.status == "simulating: cancelled" and not page.working.row.visible
    assert page.state.session is shown


def test_a_job_replaced_from_another_tab_of_the_same_visitor_says_so(one_worker: Any) -> None:
    first, second = Page(), Page()
    first.working.owner = second.working.owner = "127.0.0.1"
    first.working.start(work.Job("simulate_config", ("resnet152", 64, "50%", "tuned")), _Doc())
    second.working.start(work.Job("simulate_config", ("alexnet", 32, "60%", "belady")), _Doc())
    _until(lambda: bool(first.state.message))
    assert "replaced by a newer request" in first.state.message
    _until(lambda: second.state.status.startswith("simulated belady"))
