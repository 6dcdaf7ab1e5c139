"""`ui.document.Changes`, the one way the page changes its document: at once outside a server; served, on the
document's next tick (where Bokeh holds its lock), a tick's changes together, each once, in order; a
failure said once and the rest of its batch dropped; a closed tab's changes let go."""

from __future__ import annotations

from typing import Any

import pytest
from bokeh.document import Document

from vmexplorer.ui.document import Changes


class ServedDocument(Document):
    """A document as a server holds it: it has a session, and its next-tick callbacks wait to be run."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks: list[Any] = []
        self.closed = False

    @property
    def session_context(self) -> Any:  # what Bokeh sets for a served document
        return object()

    def add_next_tick_callback(self, callback: Any) -> Any:
        if self.closed:
            raise AttributeError("'DocumentCallbackManager' object has no attribute '_session_callbacks'")
        self.ticks.append(callback)
        return callback

    def tick(self) -> None:
        ticks, self.ticks = self.ticks, []
        for callback in ticks:
            callback()


def test_outside_a_server_a_change_is_made_at_once() -> None:
    made: list[str] = []
    Changes().run(lambda: made.append("now"))
    assert made == ["now"]


def test_served_changes_wait_for_the_next_tick_and_are_made_together_each_once_in_order() -> None:
    doc, made = ServedDocument(), []
    changes = Changes()
    changes.attach(doc)

    def headline() -> None:
        made.append("headline")

    def timeline() -> None:
        made.append("timeline")

    for change in (headline, timeline, headline):
        changes.run(change)
    assert made == [] and len(doc.ticks) == 1, "one callback for the tick's changes"
    doc.tick()
    assert made == ["headline", "timeline"]
    changes.run(timeline)
    doc.tick()
    assert made == ["headline", "timeline", "timeline"]


def test_served_changes_are_made_as_the_current_document_of_panel_so_its_widgets_find_it() -> None:
    from panel.io.state import state

    doc, seen = ServedDocument(), []
    changes = Changes()
    changes.attach(doc)
    changes.run(lambda: seen.append(state.curdoc))
    doc.tick()
    assert seen == [doc]


def test_a_failed_change_is_said_once_the_rest_of_its_batch_dropped_and_what_it_asks_then_made() -> None:
    doc, made, said = ServedDocument(), [], []
    changes = Changes()

    def failed(error: BaseException) -> None:
        said.append(str(error))
        changes.run(lambda: made.append("put back"))

    changes.on_error = failed
    changes.attach(doc)

    def broken() -> None:
        raise ValueError("no glyph for this")

    changes.run(broken)
    changes.run(lambda: made.append("after the failure"))
    doc.tick()
    assert said == ["no glyph for this"] and made == ["put back"]
    assert doc.ticks == [], "what the failure asked was made in the same tick"


def test_outside_a_server_a_failure_reaches_the_caller_unless_someone_is_told() -> None:
    with pytest.raises(ValueError):
        Changes().run(lambda: int("x"))
    said: list[str] = []
    Changes(on_error=lambda e: said.append(type(e).__name__)).run(lambda: int("x"))
    assert said == ["ValueError"]


def test_the_changes_of_a_tab_that_has_closed_are_let_go() -> None:
    doc, made = ServedDocument(), []
    changes = Changes()
    changes.attach(doc)
    doc.closed = True
    changes.run(lambda: made.append("never"))
    doc.closed = False
    changes.run(lambda: made.append("a later change still goes"))
    doc.tick()
    assert made == ["a later change still goes"]
