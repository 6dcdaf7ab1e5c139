"""The one way the page changes its Bokeh document: inside the document's lock, all at once.

A served Bokeh document may only be changed while its session's lock is held: Bokeh sends a change to
the browser from within the lock, and a change made without it fails (`_pending_writes should be
non-None`). Panel runs a widget's callback (a click, a picked value) without the lock when other changes
of the page are still being processed, so a figure changed there fails now and then: a click that does
nothing. `Changes.run` queues a change and makes every change queued in the same tick in one callback
on the document's next tick, which Bokeh runs holding the lock: their messages leave for the browser
together, after the callback, so the headline and the timeline of a new session arrive in one update.
(Panel's `hold`, which would combine them into fewer messages, loses a table's new columns there.) Outside
a server (tests, a notebook) a change is made at once.

A change that raises is reported to `on_error` (the page puts back what it showed and says why) and
the rest of its batch, which drew the same failed state, is dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ROUNDS = 4  # batches one tick makes: a failure's put-back queues its own redraw, which is drawn in the same tick


def _reraise(error: BaseException) -> None:
    raise error


class Changes:
    """Changes to one page's document, made in its lock (served) or at once (not served)."""

    def __init__(self, on_error: Callable[[BaseException], None] = _reraise) -> None:
        self.on_error = on_error
        self.doc: Any = None  # the served document, once the page is shown in one
        self._queued: list[Callable[[], None]] = []
        self._flushing = False

    def attach(self, doc: Any) -> None:
        """Make later changes in `doc` (a served page's document)."""
        self.doc = doc

    @property
    def served(self) -> bool:
        return self.doc is not None and self.doc.session_context is not None

    def run(self, change: Callable[[], None]) -> None:
        """Make `change` in the document's lock: at once outside a server, else with every change queued
        before the document's next tick (each once, in the order first asked)."""
        if not self.served:
            self._make([change])
            return
        if change in self._queued:
            return
        self._queued.append(change)
        if len(self._queued) == 1 and not self._flushing:
            self._schedule()

    def _schedule(self) -> None:
        try:
            self.doc.add_next_tick_callback(self._flush)
        except Exception:  # the session has ended (its tab closed): nothing is left to change
            self._queued.clear()

    def _flush(self) -> None:
        """Bokeh calls this holding the document's lock; Panel's widgets find their document as the current one."""
        from panel.io.state import set_curdoc

        self._flushing = True
        try:
            with set_curdoc(self.doc):
                for _ in range(ROUNDS):
                    batch, self._queued = self._queued, []
                    if not batch:
                        break
                    self._make(batch)
        finally:
            self._flushing = False
        if self._queued:  # asked for more than a tick makes: the rest on the next one
            self._schedule()

    def _make(self, batch: list[Callable[[], None]]) -> None:
        for change in batch:
            try:
                change()
            except Exception as e:
                self.on_error(e)
                return
