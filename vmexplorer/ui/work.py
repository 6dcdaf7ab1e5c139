"""A page's slow actions, done in the server's work pool (`vmexplorer.pool`) on a copy of its store.

Opening a sample, a file or a link, simulating a configuration, a point of the paging cliff, a comparison:
each runs a store method that may take seconds, and then the page draws numbers that take seconds more
(the bound, the other policies beside it, the cliff). Served, such an action is a `Job`: the store's
values are sent to a worker process (`snapshot`), which makes a store of them, runs the method there,
works out what drawing the result will ask for (`_warm`), and sends back the values that changed and what
it worked out (`Outcome`); the event loop applies them to the page's store (`apply`), in the document's
lock, and the page draws as after any action. An edit of the shown plan (a drag) stays on the event loop:
its bound is known and its one simulation is what a person waits for.

`Working` shows the job under way, how long it has run or its place in line, and a Cancel button. A
visitor has one job at a time (the pool's owner): a new action replaces the one they had.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import panel as pn
import param

from .. import pool as work_pool
from ..session import planned
from . import numbers
from .state import AppState, store_param
from .widgets import Text, widget

LIGHT = frozenset({"drag", "toggle_offload", "choose", "reset_edits", "fail"})  # edits of what is shown: on the loop
POLL_MS = 500
DOING = {"open_sample": "opening the sample", "load": "reading the file", "simulate_config": "simulating",
         "open_sweep_point": "opening the point of the cliff", "compare_with": "opening the comparison",
         "compare_with_twin": "opening the measured run", "compare_mechanisms": "simulating the other mechanism",
         "apply_edits": "simulating the link's edits", "show_measured": "opening the GPU run",
         "apply": "opening the link", "open_step": "opening the lesson's step"}


@dataclass(frozen=True)
class Job:
    """A store action to do in a worker: a store method by name, or a function of the store and `args`."""

    action: str | Callable[..., Any]
    args: tuple[Any, ...]

    @property
    def doing(self) -> str:
        name = self.action if isinstance(self.action, str) else self.action.__name__
        return DOING.get(name, "working")


@dataclass(frozen=True)
class Outcome:
    """What a job changed in its copy of the store, and what it worked out that drawing will ask for."""

    changes: dict[str, Any]
    unedited: tuple[str, Any] | None  # the loaded plan simulated unedited (`AppState.unedited`), by cost model
    kept: planned.Entries


def job_of(state: AppState, method: Callable[..., Any], args: tuple[Any, ...]) -> Job | None:
    """The job that does `method(*args)` in a worker; None for what stays on the event loop (an edit of
    what is shown) or cannot be sent (a callable that is not the store's method nor a function of it)."""
    if getattr(method, "__self__", None) is state:
        return None if method.__name__ in LIGHT else Job(method.__name__, args)
    if args and args[0] is state and getattr(method, "__qualname__", "").isidentifier():
        return Job(method, args[1:])  # a module's function of the store (a link, a lesson step)
    return None


FIELDS = tuple(name for name in AppState.param if name != "name")


def snapshot(state: AppState) -> dict[str, Any]:
    """The store's values, to send to a worker."""
    values = {name: getattr(state, name) for name in FIELDS}
    values["moves"] = list(values["moves"])
    values["recomputes"] = list(values["recomputes"])
    return values


def run(values: Mapping[str, Any], job: Job, sweep: bool) -> Outcome:
    """In a worker: do `job` on a store of `values`, then work out what the page will draw of it (the
    paging cliff too when `sweep`), and say what changed."""
    state = AppState(**values)
    with planned.recording() as kept:
        if isinstance(job.action, str):
            getattr(state, job.action)(*job.args)
        else:
            job.action(state, *job.args)
        if not state.message:
            _warm(state, sweep)
    changes = {name: getattr(state, name) for name in FIELDS if _changed(values[name], getattr(state, name))}
    return Outcome(changes, state.unedited_kept(), kept)


def _changed(was: Any, now: Any) -> bool:
    if was is now:
        return False
    try:
        return bool(was != now)
    except Exception:  # values that do not compare (arrays): a new one is a change
        return True


def _warm(state: AppState, sweep: bool) -> None:
    """What drawing the store asks for that takes time, worked out here (the memos carry it back)."""
    try:
        numbers.summary_rows(state)
        numbers.breakdown_rows(state)
        if sweep:
            numbers.sweep(state)
    except Exception:  # drawing on the event loop works it out again, and says what fails
        pass


def apply(state: AppState, outcome: Outcome) -> None:
    """Put a job's outcome into the page's store (on the event loop): what it worked out first, so the
    drawing finds it."""
    planned.keep(outcome.kept)
    with param.parameterized.batch_call_watchers(state):
        state.param.update(**outcome.changes)
        if outcome.unedited is not None:
            state.keep_unedited(*outcome.unedited)


def export(values: Mapping[str, Any], make: Callable[[AppState], bytes]) -> bytes:
    """In a worker: the bytes of a download of the store of `values` (`make` a module's function)."""
    return make(AppState(**values))


class Working(pn.viewable.Viewer):
    """The page's job under way: what it does, for how long or its place in line, and a Cancel button.
    `owner` is who the pool keeps to one job (the visitor); `done` applies an outcome (the page's, in the
    document's lock); `sweep` says whether the paging cliff is shown (then the job works it out too)."""

    state: AppState = store_param()
    owner = param.String(default="", doc="the visitor, to whom the pool gives one job at a time")
    done = param.Callable(default=None, doc="applies a finished job's outcome to the page")
    sweep = param.Callable(default=lambda: False, doc="whether the paging cliff is shown")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.note = Text(styles={"font-style": "italic"})
        self.cancel = widget(pn.widgets.Button, "Cancel", button_type="light", width=90)
        self.cancel.on_click(lambda _: self.stop("cancelled"))
        self.row = pn.Row(self.note, self.cancel, visible=False, sizing_mode="stretch_width")
        self.future: Future[Any] | None = None
        self._doing, self._since = "", 0.0
        self._poller: Any = None

    def start(self, job: Job, doc: Any) -> None:
        """Send `job` to the pool; its outcome is applied on `doc`'s next tick once it comes."""
        self.stop("")
        future = work_pool.shared_pool().submit(run, snapshot(self.state), job, self.sweep(), owner=self.owner)
        self.future, self._doing, self._since = future, job.doing, time.monotonic()
        future.add_done_callback(lambda f: _on_loop(doc, lambda: self._finished(f)))
        self._show()
        try:
            self._poller = pn.state.add_periodic_callback(self._show, period=POLL_MS)
        except Exception:  # no event loop to poll on (a test's document): the note says the start
            self._poller = None

    async def download(self, make: Callable[[AppState], bytes]) -> bytes:
        """The bytes of a download made in the pool (a job of its own beside the page's action)."""
        future = work_pool.shared_pool().submit(export, snapshot(self.state), make, owner=f"{self.owner} export")
        return bytes(await asyncio.wrap_future(future))

    def stop(self, why: str) -> None:
        """Cancel the job under way (if any); `why` is said, as what the last action did."""
        future, self.future = self.future, None
        self._stop_polling()
        self.row.visible = False
        if future is not None and not future.done():
            work_pool.shared_pool().cancel(self.owner, why or "cancelled")
            if why:
                self.state.param.update(status=f"{self._doing}: {why}", message="")

    def _show(self) -> None:
        future = self.future
        if future is None:
            return
        place = work_pool.shared_pool().place(future)
        waited = f"{time.monotonic() - self._since:.0f} s"
        self.note.object = (f"{self._doing.capitalize()}: waiting ({place} in line, {waited})" if place
                            else f"{self._doing.capitalize()}... {waited}")
        self.row.visible = True

    def _finished(self, future: Future[Any]) -> None:
        if future is not self.future:
            return  # replaced or cancelled: said when it was
        self.future = None
        self._stop_polling()
        self.row.visible = False
        try:
            outcome = future.result()
        except work_pool.Cancelled as e:
            self.state.fail(f"{self._doing} stopped: {e} (in another of your tabs?)")
            return
        except Exception as e:
            self.state.fail(f"{self._doing} failed: {e}")
            return
        if self.done is not None:
            self.done(outcome)

    def _stop_polling(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None:
            try:
                poller.stop()
            except Exception:  # the session has ended
                pass

    def __panel__(self) -> Any:
        return self.row


def _on_loop(doc: Any, callback: Callable[[], None]) -> None:
    """Run `callback` on `doc`'s next tick, holding its lock (from a pool's thread); a closed tab's is dropped."""
    try:
        doc.add_next_tick_callback(callback)
    except Exception:  # the session has ended: nothing is left to show it in
        pass
