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


def test_a_change_asked_for_later_ticks_comes_after_the_next_ticks_changes_have_gone() -> None:
    doc, made = ServedDocument(), []
    changes = Changes()
    changes.attach(doc)
    changes.run(lambda: made.append("below the fold"), after=2)
    changes.run(lambda: made.append("the story"), after=1)
    changes.run(lambda: made.append("the answer"))
    assert len(doc.ticks) == 1
    for expected in (["the answer"], ["the answer", "the story"], ["the answer", "the story", "below the fold"]):
        doc.tick()
        assert made == expected, "one tick each, the browser drawing each before the next arrives"
    assert doc.ticks == []


def test_changes_asked_inside_a_held_block_are_made_as_it_ends_each_tick_apart_the_later_ones_later() -> None:
    doc, made = ServedDocument(), []
    changes = Changes()
    changes.attach(doc)
    with changes.held():
        for after in (2, 1, 0):
            changes.run(lambda after=after: made.append(after), after=after)
        assert made == [], "nothing before the block ends: the code inside may ask for more"
    assert made == [0, 1], "the first two ticks at once, in order, in the lock the block was run in"
    assert len(doc.ticks) == 1
    doc.tick()
    assert made == [0, 1, 2]


def test_a_held_block_inside_a_tick_leaves_the_changes_to_that_tick() -> None:
    doc, made = ServedDocument(), []
    changes = Changes()
    changes.attach(doc)

    def drag() -> None:
        with changes.held():
            changes.run(lambda: made.append("answer"))
        made.append("drag done")

    changes.run(drag)
    doc.tick()
    assert made == ["drag done", "answer"], "asked in the tick being made: made in its next round"


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
