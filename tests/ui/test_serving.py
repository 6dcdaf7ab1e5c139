"""The served page's document, built ahead of the session in the page maker's thread, off the event loop."""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import panel as pn
import pytest
from bokeh.document import Document
from bokeh.server.contexts import BokehSessionContext, _RequestProxy
from panel.io.state import set_curdoc

import vmexplorer.ui.serving as serving
from vmexplorer.ui.page import Page
from vmexplorer.ui.serving import Spare


def _session_document(session_id: str) -> tuple[Document, BokehSessionContext]:
    """A document with a session context, as Bokeh makes them before the session hooks run."""
    doc = Document()
    context = BokehSessionContext(session_id, None, doc)  # type: ignore[arg-type]
    context._request = _RequestProxy(None, arguments={}, cookies={}, headers={})  # type: ignore[arg-type]
    doc._session_context = weakref.ref(context)
    return doc, context


def wait_for(check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got is not None:
            return got
        time.sleep(0.02)
    return None


def _session_created(context: BokehSessionContext) -> None:
    """Bokeh's session hook, run as the server runs it: awaited on an event loop (one of its own here, in a
    thread: the test process may have one running)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, serving.PagesAhead().on_session_created(context)).result(120)


def _script(doc: Document) -> None:
    """The app's script run into `doc` by Panel's application, as `vmexplorer serve` builds it."""
    from panel.io.application import build_single_handler_application

    build_single_handler_application(str(Path(serving.__file__).parents[1] / "app.py")).initialize_document(doc)


def _has_text(doc: Document, text: str) -> bool:
    return any(text in str(getattr(model, "text", "")) for model in doc.models)


@pytest.fixture
def maker(monkeypatch: pytest.MonkeyPatch) -> Any:
    spare: Spare[Page] = Spare(Page, quiet_s=600.0)
    monkeypatch.setattr(serving, "spare_pages", lambda: spare)
    yield spare
    spare.close(30)


def test_a_visitors_document_is_built_whole_in_the_makers_thread_and_the_script_only_joins_it_to_the_session(
        maker: Spare[Page], monkeypatch: pytest.MonkeyPatch) -> None:
    built_in: list[str] = []
    ahead = serving._document_ahead

    def recorded(doc: Document, page: Page) -> None:
        built_in.append(threading.current_thread().name)
        ahead(doc, page)

    monkeypatch.setattr(serving, "_document_ahead", recorded)
    doc, context = _session_document("ahead")
    _session_created(context)
    assert built_in == ["spare"]
    page = serving.documents_made_ahead()[doc]
    roots = list(doc.roots)
    assert roots and _has_text(doc, "how CNN training pages GPU memory")  # the whole page, its sidebar too
    # no busy spinner: Panel's turns with any visitor's callback, in every tab
    assert not [m for m in doc.models if "loader" in getattr(m, "css_classes", [])]
    _script(doc)  # as Panel runs the app's script, on this (the event loop's) thread
    with set_curdoc(doc):
        assert pn.state._thread_id == threading.get_ident()  # Panel sends the document's changes from here on
    assert doc not in serving.documents_made_ahead()
    assert list(doc.roots) == roots, "the script built nothing again"
    assert page.changes.doc is doc
    page.close()


def test_a_document_whose_build_ahead_fails_is_emptied_and_the_script_builds_it(
        maker: Spare[Page], monkeypatch: pytest.MonkeyPatch) -> None:
    def half_built(doc: Document, page: Page) -> None:
        doc.add_root(pn.pane.Markdown("half").get_root(doc))
        raise RuntimeError("a template that fails")

    monkeypatch.setattr(serving, "_document_ahead", half_built)
    doc, context = _session_document("failed")
    _session_created(context)
    assert not doc.roots and doc not in serving.documents_made_ahead()
    with set_curdoc(doc):
        serving.serve_document(doc)
    assert doc.roots


def test_a_spare_is_made_ahead_handed_over_once_and_made_again_only_after_a_quiet_spell():
    made: list[float] = []

    def make() -> int:
        made.append(time.monotonic())
        return len(made)

    spare = Spare(make, quiet_s=0.3)
    try:
        assert wait_for(lambda: made[0] if made else None) is not None  # made at once: nothing was taken yet
        time.sleep(0.1)
        assert spare.take() == 1 and spare.take() is None  # handed over once
        taken_at = time.monotonic()
        assert wait_for(lambda: made[1] if len(made) > 1 else None) - taken_at >= 0.3 - 0.05  # after a quiet spell
        time.sleep(0.1)
        assert spare.take() == 2
    finally:
        spare.close()


def test_a_spare_whose_making_fails_is_never_handed_over_and_says_why():
    def make() -> int:
        raise RuntimeError("no sample sessions")

    spare = Spare(make, quiet_s=0.0)
    assert wait_for(lambda: spare.failed) == "RuntimeError: no sample sessions"
    assert spare.take() is None


def test_orders_are_made_in_turn_in_the_makers_thread_finished_there_and_the_spare_goes_to_the_first() -> None:
    import threading

    made: list[str] = []

    def make() -> str:
        made.append(threading.current_thread().name)
        return f"page {len(made)}"

    finished: list[tuple[str, str]] = []
    spare = Spare(make, quiet_s=60.0)  # after the first spare, none made unless ordered
    try:
        assert wait_for(lambda: made[0] if made else None) == "spare"
        time.sleep(0.1)
        first, second, third = (spare.order(lambda p: finished.append((p, threading.current_thread().name)))
                                for _ in range(3))
        assert [f.result(10) for f in (first, second, third)] == ["page 1", "page 2", "page 3"]
        assert finished == [("page 1", "spare"), ("page 2", "spare"), ("page 3", "spare")]

        def fails(page: str) -> None:
            raise RuntimeError(f"no document for {page}")

        with pytest.raises(RuntimeError, match="no document for page 4"):
            spare.order(fails).result(10)
        assert spare.order().result(10) == "page 5"  # a failed finish is that order's, not the maker's
    finally:
        spare.close(5)
    assert spare.order().result(1) is None  # closed: the caller makes its own
