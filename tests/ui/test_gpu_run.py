"""Run on GPU with CPU runners in place of the GPU (VMEXPLORER_FAKE_RUNNER, read by the app): queued, followed
with progress, cancelled, failed, and cancelled when its tab is gone, with the page as it was."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from ui_helpers import snapshot

from vmexplorer.ui.page import Page
from vmexplorer.ui.state import AppState


# the worker processes import the runners by name, so they are module-level functions
def fake_gpu(request: Any, progress: Callable[[int, int, float], None], should_stop: Callable[[], bool]) -> Any:
    """The default runner with the simulator in place of the GPU, 0.05 s an iteration, stopping when asked."""
    from vmexplorer.session import new_session
    from vmexplorer.session.planned import graph_of
    from vmexplorer.simulator import H100_DEFAULT, simulate

    plan = request.plan
    graph = graph_of(plan.config, plan.planned_with)  # as the worker builds it
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
    from vmexplorer.ui.gpu import FAKE_RUNNER_ENV

    monkeypatch.setenv(FAKE_RUNNER_ENV, f"{__name__}:{runner}")
    view = Page()
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
    from vmexplorer.ui.gpu import run_queue

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
    from vmexplorer.ui.gpu import run_queue

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
    import vmexplorer.ui.gpu as gpu
    import vmexplorer.ui.serving as serving

    built: list[Any] = []

    class Recorded(Page):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(serving, "Page", Recorded)
    monkeypatch.setenv(gpu.FAKE_RUNNER_ENV, f"{__name__}:fake_hold")
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
    assert gpu.run_queue().wait(job, timeout=2.0).state == "cancelled"


def test_a_write_to_a_closed_tab_left_unawaited_logs_no_traceback_and_any_other_failure_still_does() -> None:
    import asyncio
    import gc

    from tornado.websocket import WebSocketClosedError

    from vmexplorer.ui.serving import ClosedTabWrites as _ClosedTabWrites

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


def test_the_page_does_not_wait_for_the_gpu_check_and_enables_run_when_it_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import vmexplorer.ui.gpu as gpu

    answers: list[tuple[bool, str] | None] = [None]
    monkeypatch.delenv(gpu.FAKE_RUNNER_ENV, raising=False)
    monkeypatch.setattr(gpu.worker, "gpu_check", lambda: answers[-1])
    view = Page()
    assert view.gpu.run.disabled and "checking for a GPU" in view.gpu.reason.object
    answers.append((True, "1 GPU: NVIDIA H100"))
    view.gpu._draw_gpu_reason()  # what the page's one-second callback does
    assert not view.gpu.run.disabled and view.gpu.reason.object == ""
    answers.append((False, "CuPy is not installed"))
    view.gpu._draw_gpu_reason()
    assert view.gpu.run.disabled and "CuPy is not installed" in view.gpu.reason.object


def test_run_on_gpu_queues_a_swap_plan_as_shown(state: AppState, monkeypatch: pytest.MonkeyPatch) -> None:
    import vmexplorer.ui.gpu as views

    submitted: list[Any] = []

    class Queue:
        def submit(self, request: Any, owner: str = "") -> object:
            submitted.append(request)
            return object()

    monkeypatch.setattr(views, "run_queue", lambda: Queue())
    monkeypatch.setattr(views.GpuRun, "_start_polling", lambda self: None)
    assert state.simulate_config("alexnet", 64, "50%", "autovm", {}, "swap"), state.message
    views.GpuRun(state=state)._on_run()
    assert state.message == "" and [r.plan for r in submitted] == [state.session.plan]
