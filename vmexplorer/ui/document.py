"""The one way the page changes its Bokeh document: inside the document's lock, a tick's changes together.

A served Bokeh document may only be changed while its session's lock is held: Bokeh sends a change to
the browser from within the lock, and a change made without it fails (`_pending_writes should be
non-None`). Panel runs a widget's callback (a click, a picked value) without the lock when other changes
of the page are still being processed, so a figure changed there fails now and then: a click that does
nothing. `Changes.run` queues a change and makes every change queued for the same tick in one callback
on the document's next tick, which Bokeh runs holding the lock: their messages leave for the browser
together, after the callback, so the headline and the timeline of a new session arrive in one update.
(Panel's `hold`, which would combine them into fewer messages, loses a table's new columns there.) Outside
a server (tests, a notebook) a change is made at once.

A change may ask to wait `after` ticks: the browser draws a tick's messages before the next tick's
arrive, so a small answer (the status, the summary) goes first and is on the screen at once, the story
(headline, timeline, bars) follows together, and what is below the fold after that.

Code that Bokeh runs holding the lock already (a model's change sent by the browser: a dragged marker)
makes its first ticks as it ends (`held`): their messages leave before Bokeh's reply to the browser's,
whose writing would otherwise keep Panel's back until the ticks after.

A change that raises is reported to `on_error` (the page puts back what it showed and says why) and
the rest of its batch, which drew the same failed state, is dropped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

ROUNDS = 4  # batches one tick makes: a failure's put-back queues its own redraw, which is drawn in the same tick
TICKS = 3  # how many ticks apart changes can be asked for (`after` 0, 1 and 2)


def _reraise(error: BaseException) -> None:
    raise error


class Changes:
    """Changes to one page's document, made in its lock (served) or at once (not served)."""

    def __init__(self, on_error: Callable[[BaseException], None] = _reraise) -> None:
        self.on_error = on_error
        self.doc: Any = None  # the served document, once the page is shown in one
        self._queues: list[list[Callable[[], None]]] = [[] for _ in range(TICKS)]  # by ticks from now
        self._flushing = False
        self._holding = False

    def attach(self, doc: Any) -> None:
        """Make later changes in `doc` (a served page's document)."""
        self.doc = doc

    @property
    def served(self) -> bool:
        return self.doc is not None and self.doc.session_context is not None

    def run(self, change: Callable[[], None], after: int = 0) -> None:
        """Make `change` in the document's lock: at once outside a server, else on the document's next tick
        with every change asked for it (each once, in the order first asked), or `after` ticks later."""
        if not self.served:
            self._make([change])
            return
        queue = self._queues[min(max(after, 0), TICKS - 1)]
        if change in queue:
            return
        idle = not any(self._queues)
        queue.append(change)
        if idle and not (self._flushing or self._holding):
            self._schedule()

    @contextlib.contextmanager
    def held(self, ticks: int = 2) -> Iterator[None]:
        """Around code Bokeh runs holding the document's lock: the changes it asks for the next `ticks`
        ticks are made as it ends, in that lock, each tick's in a message of its own; later ones later."""
        if not self.served or self._flushing or self._holding:
            yield
            return
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
            for _ in range(ticks):
                self._tick()
            if any(self._queues):
                self._schedule()

    def _schedule(self) -> None:
        try:
            self.doc.add_next_tick_callback(self._flush)
        except Exception:  # the session has ended (its tab closed): nothing is left to change
            for queue in self._queues:
                queue.clear()

    def _flush(self) -> None:
        """Bokeh calls this holding the document's lock."""
        self._tick()
        if any(self._queues):
            self._schedule()

    def _tick(self) -> None:
        """The changes of this tick are made (and those they ask for this same tick), their events leaving
        as one message, then the rest move a tick closer. Panel's widgets find their document as the
        current one."""
        from panel.io.document import unlocked
        from panel.io.state import set_curdoc

        self._flushing = True
        try:
            with set_curdoc(self.doc), unlocked(policy="collect"):
                for _ in range(ROUNDS):
                    batch, self._queues[0] = self._queues[0], []
                    if not batch:
                        break
                    self._make(batch)
        finally:
            self._flushing = False
            leftover = self._queues[0]  # asked for this tick beyond its rounds: first on the next one
            self._queues = [[*leftover, *self._queues[1]], *self._queues[2:], []]

    def _make(self, batch: list[Callable[[], None]]) -> None:
        for change in batch:
            try:
                change()
            except Exception as e:
                self.on_error(e)
                return
