"""Run the shown plan on the GPU: queued on the server's one queue (`worker.shared_queue`), followed with a
progress bar while the page lasts, its measured session opened when it ends. The server never imports
CuPy: whether a GPU is there is asked of a subprocess once (`worker.gpu_check`), and no page waits for it."""

from __future__ import annotations

import atexit
import functools
import importlib
import os
from collections.abc import Callable
from typing import Any

import panel as pn
import param

from .. import worker
from .state import AppState, store_param
from .widgets import Text, widget


def _now(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


FAKE_RUNNER_ENV = "VMEXPLORER_FAKE_RUNNER"  # tests only: module:function, a CPU stand-in for the GPU runner
POLL_MS = 500
CHECKING = "checking for a GPU"


def gpu_reason() -> str | None:
    """None when a GPU run can work here, else why not (the button says it), or CHECKING while the
    worker's GPU check (a subprocess, once per server, in the background) has not answered: CuPy never
    loads in the server and no page waits for the check."""
    if os.environ.get(FAKE_RUNNER_ENV):
        return None
    answer = worker.gpu_check()
    if answer is None:
        return CHECKING
    ok, why = answer
    return None if ok else why


def run_queue() -> worker.RunQueue:
    """The server's one run queue; with VMEXPLORER_FAKE_RUNNER set (tests), one over that runner."""
    spec = os.environ.get(FAKE_RUNNER_ENV)
    return _fake_queue(spec) if spec else worker.shared_queue()


@functools.cache
def _fake_queue(spec: str) -> worker.RunQueue:
    module, _, name = spec.partition(":")
    runner = getattr(importlib.import_module(module), name)
    per_owner, max_queued = worker.queue_limits()
    queue = worker.RunQueue(runner=runner, grace_s=2.0, per_owner=per_owner, max_queued=max_queued)
    atexit.register(queue.close)
    return queue


def _every(callback: Any, period_ms: int) -> Any:
    """A periodic callback of this browser session, or None with no event loop (a page built outside
    a server)."""
    try:
        return pn.state.add_periodic_callback(callback, period=period_ms)
    except Exception:
        return None


class GpuRun(pn.viewable.Viewer):
    """Run the shown plan on the GPU: queued on the server's one queue (`worker.shared_queue`), followed
    with a progress bar while this page lasts, its measured session opened when it ends. `tab_open`
    says whether the page's browser tab is still there (`app.page` asks the server session); `act` runs
    the page's actions. Bokeh may call `close` after it has cleared the served script's module: this
    class lives outside it and names nothing of it."""

    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")
    tab_open = param.Callable(default=lambda: True, doc="whether the page's browser tab is still there")
    visitor = param.String(default="", doc="who asks (the browser's address): one run at a time each")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.iterations = widget(pn.widgets.IntInput, "GPU run: iterations", start=1, end=1000, value=5)
        self.run = widget(pn.widgets.Button, "Run on GPU", button_type="primary")
        self.reason = Text(styles={"font-size": "0.85em", "font-style": "italic"})
        self._gpu_waiter: Any = None
        self.progress = pn.indicators.Progress(value=0, max=1, visible=False, sizing_mode="stretch_width")
        self.note = Text(styles={"font-size": "0.85em"})
        self.cancel = widget(pn.widgets.Button, "Cancel the run", visible=False)
        self.job: int | None = None  # the GPU run this page waits for
        self._queue: worker.RunQueue | None = None  # the queue it waits in
        self._poller: Any = None
        self.run.on_click(self._on_run)
        self.cancel.on_click(self._on_cancel)
        self._draw_gpu_reason()

    def follow_gpu_check(self) -> None:
        """Show what the GPU check says now, and keep looking while it is still checking, in the session
        this view is shown in (a view made ahead of its session could not)."""
        self._stop_gpu_waiter()
        self._draw_gpu_reason()

    def _draw_gpu_reason(self) -> None:
        """Enable Run on GPU when the GPU check says yes; while it is still checking, look again each
        second (a page served before the check answered must not stay disabled)."""
        reason = gpu_reason()
        self.run.disabled = reason is not None or self.job is not None
        self.iterations.disabled = reason is not None
        self.run.description = reason or "run the shown plan on the GPU and open the measured session"
        self.reason.object = f"Run on GPU: {reason}{'…' if reason == CHECKING else '.'}" if reason else ""
        if reason == CHECKING and self._gpu_waiter is None:
            self._gpu_waiter = _every(self._draw_gpu_reason, 1000)
        elif reason != CHECKING:
            self._stop_gpu_waiter()

    def _stop_gpu_waiter(self) -> None:
        waiter, self._gpu_waiter = self._gpu_waiter, None
        self._stop(waiter)

    def close(self) -> None:
        """The browser tab is gone: cancel its GPU run (queued or running) and stop polling, so a closed
        tab does not hold the GPU for the next person. Bokeh may call this after it has cleared a served
        script's module, so this and what it calls name no module global, only what the view holds."""
        job, queue, self.job = self.job, self._queue, None
        self._stop_polling()
        self._stop_gpu_waiter()
        if job is not None and queue is not None:
            try:
                queue.cancel(job)
                queue.forget(job)  # a queued run has ended now; a running one stays known until it stops
            except Exception:  # already ended and forgotten, or the queue closed with the server
                pass

    @staticmethod
    def _stop(callback: Any) -> None:
        if callback is not None:
            try:
                callback.stop()
            except Exception:  # already stopped with its session
                pass

    def request(self) -> worker.RunRequest | None:
        """The shown plan as a GPU run, as edited: the plan itself, compiled once when it was shown."""
        s = self.state.session
        return None if s is None else worker.RunRequest(s.plan, int(self.iterations.value or 5))

    def _on_run(self, *_: Any) -> None:
        if self.job is not None:
            self.state.fail("a GPU run of this page is under way: wait for it or cancel it")
            return
        request = self.request()
        if request is None:
            self.state.fail("nothing to run: load or simulate a session first")
            return
        try:
            self._queue = run_queue()
            self.job = self._queue.submit(request, owner=self.visitor)
        except worker.QueueFull as e:  # this visitor's run is under way elsewhere, or the class's queue is full
            self.state.fail(str(e))
            return
        except Exception as e:  # a closed queue, a bad iteration count: say it, keep the state
            self.state.fail(f"the GPU run could not be queued ({type(e).__name__}): {e}")
            return
        self.state.message = ""
        self.run.disabled = True
        self.cancel.visible = True
        self.progress.visible = True
        self.progress.value, self.progress.max = 0, max(1, request.iterations)
        self.note.object = "queued"
        self._start_polling()

    def _start_polling(self) -> None:
        self._poller = _every(self._tick, POLL_MS)  # without a server the caller polls

    def _stop_polling(self) -> None:
        poller, self._poller = self._poller, None
        self._stop(poller)

    def _tick(self) -> None:
        if not self.tab_open():
            # Bokeh destroys a closed tab's session only once it has gone unused a while (15 s or more by
            # default), too late for the next person waiting for the GPU: the poll frees it instead
            self.close()
            return
        try:
            self.poll()
        except Exception as e:  # a bug must not leave the callback failing every half second
            self._end_run()
            self.state.fail(f"unexpected error while following the GPU run ({type(e).__name__}): {e}")

    def _on_cancel(self, *_: Any) -> None:
        if self.job is None:
            return
        try:
            self._run_queue().cancel(self.job)
        except KeyError:
            pass
        self.note.object = "cancelling"
        self.poll()

    def poll(self) -> worker.JobStatus | None:
        """Show the run's progress; when it has ended, open its session or say why not."""
        if self.job is None:
            self._stop_polling()
            return None
        try:
            st = self._run_queue().status(self.job)
        except Exception as e:  # the job was forgotten, the queue closed
            self._end_run()
            self.state.fail(f"the GPU run was lost ({type(e).__name__}): {e}")
            return None
        if st.state == "queued":
            self.note.object = f"queued: number {st.queue_position} in line for the GPU"
            return st
        if st.state == "running":
            self.progress.max = max(1, st.iterations)
            self.progress.value = min(st.iteration, self.progress.max)
            loss = "" if st.loss is None else f", loss {st.loss:.4f}"
            self.note.object = f"running: iteration {st.iteration} of {st.iterations}{loss}"
            return st
        self._end_run()
        if st.state == "done" and st.result is not None:
            name = f"GPU run {st.job_id}"
            self.act(self.state.show_measured, st.result, name)
            if not self.state.message:
                self.state.status = f"the GPU run finished ({st.message}); showing its measured session"
                self.note.object = f"done: {st.message}"
        elif st.state == "cancelled":
            self.note.object = f"cancelled: {st.message}"
            self.state.status = "the GPU run was cancelled; the page is as it was"
        else:
            self.note.object = "failed"
            self.state.fail(f"the GPU run failed: {st.message}")
        try:
            self._run_queue().forget(st.job_id)
        except Exception:
            pass
        return st

    def _run_queue(self) -> worker.RunQueue:
        """The queue this page's run went to."""
        return self._queue if self._queue is not None else run_queue()

    def _end_run(self) -> None:
        self._stop_polling()
        self.job = None
        self.run.disabled = False
        self.cancel.visible = False
        self.progress.visible = False

    def __panel__(self) -> Any:
        return pn.Column(self.iterations, self.run, self.reason, self.progress, self.note, self.cancel,
                         sizing_mode="stretch_width")
