"""The page as a server serves it: in a template, with a spare page made ahead for the next visitor, the
link kept in the browser's address, and a closed tab's GPU run cancelled.

`vmexplorer/app.py` (what `panel serve` runs, once per browser session) calls `serve_document()`.
`vmexplorer serve` adds `PagesAhead` to the application, which builds each visitor's document off the
event loop before that. This module is imported once per server process, so what it keeps (the page
maker) outlives a served script's module, which Bokeh clears when its session ends.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

import panel as pn
from bokeh.application.handlers.handler import Handler
from panel.io.state import set_curdoc

from .link import parse
from .page import Page
from .routes import warn_if_unguarded
from .state import AppState

_log = logging.getLogger(__name__)


class Template(pn.template.VanillaTemplate):
    """Panel's plainest template (a header, a sidebar and the main area, no design system) without its
    web font.

    FastListTemplate, the usual choice, brings Microsoft's FAST web components, the page's largest
    script after Bokeh's, which the browser evaluates before drawing anything, for a layout this one gives
    as well. The font (Lato, from Google) would be a failed request and a console error offline (a
    classroom, a lent machine): the page uses the system's sans-serif."""

    _resources = {"css": {}}


def serve_document(doc: Any) -> None:
    """Fill the served document of one browser tab (what `vmexplorer/app.py` does for each session): with
    the page `PagesAhead` built around it in the spare thread, or else built now."""
    page = documents_made_ahead().pop(doc, None)
    if page is not None:  # Panel has claimed the document for the event loop's thread before this script
        _in_session(page, doc, None)
        return
    _set_dist_url(doc)
    # the template adds its parts to the document one root at a time, and Bokeh walks every model at each:
    # frozen, it walks them once
    with doc.models.freeze():
        served_template().servable()


def served_template(state: AppState | None = None) -> Template:
    """The page of one browser tab in its template; served, wired to the tab's document."""
    doc = pn.state.curdoc
    served = doc is not None and doc.session_context is not None
    # served, the default page may have been made while the server waited for this visitor
    page = (spare_pages().take() if served and state is None else None) or Page(state)
    template, sidebar = _template(page, doc)
    if doc is None or not served:
        page.complete(sidebar)
        return template
    _in_session(page, doc, sidebar)
    return template


def _template(page: Page, doc: Any) -> tuple[Template, pn.Column]:
    """`page` in its template, and the template's sidebar (empty until the page is complete)."""
    page.gpu.follow_gpu_check()  # in this session: a spare was made with no session to poll in
    # the sidebar is one root, not one per widget (a template makes a root of each item): a document of a
    # few roots instead of dozens, each of which the browser would lay out on its own
    sidebar = pn.Column(sizing_mode="stretch_width")
    # no busy spinner: Panel's spins in every tab while any visitor's callback runs (its busy state is the
    # server's), and each of its turns sets every open tab's spinner, a patch to each: a fifth of the event
    # loop's time with a class's pages open. The page says what it is doing itself (`Working`)
    template = Template(title="vmexplorer", sidebar=[sidebar], main=page.main(), header=page.header(),
                        sidebar_width=330, busy_indicator=None)
    if doc is not None:  # the page follows its document's session; built outside a server, there is none
        # a bound method: it holds the page, and the page all it needs to cancel its run
        doc.on_session_destroyed(page.session_destroyed)
        page.gpu.tab_open = _tab_open(doc)
        page.gpu.visitor = _visitor(doc)
        # one job in the work pool at a time per visitor; a page of no known address is one of its own
        page.working.owner = page.gpu.visitor or f"page {id(page)}"
    return template, sidebar


def _in_session(page: Page, doc: Any, sidebar: pn.Column | None) -> None:
    """On the event loop, the served page joined to its session; `sidebar`, if given, filled once the
    browser has drawn the rest."""
    page.changes.attach(doc)
    page.files.make_in = page.working.download
    warn_if_unguarded()
    if sidebar is not None:
        pn.state.onload(lambda: page.complete(sidebar))  # the story first, the rest once drawn
    ClosedTabWrites.install()
    location = pn.state.location
    if location is not None:
        # once the browser has the document: what a link opens changes the page, and changes made while
        # the browser connects, to a document built ahead, did not reach it (a lesson step's link showed
        # the default page)
        pn.state.onload(lambda: follow_address(page, location))


def _set_dist_url(doc: Any) -> None:
    from panel.io.resources import LOCAL_DIST

    # where Panel's stylesheets are served from, which Panel writes into a session's document as it renders
    # its page; `vmexplorer serve` renders one page for every visitor and builds each visitor's session when
    # the browser connects (cli/serve.py), so that session's page is never rendered: without this its models
    # would name stylesheets on Panel's CDN, not reachable offline
    doc.template_variables.setdefault("dist_url", f"{pn.state.rel_path}/{LOCAL_DIST}" if pn.state.rel_path
                                      else LOCAL_DIST)


class PagesAhead(Handler):
    """A Bokeh handler, beside the app's script, that has each visitor's document built in the spare
    page's thread before Bokeh runs the script on the event loop (Bokeh lets a session hook make the
    session wait): the page, its template and their models, whole (the sidebar too, which a page built on
    the loop adds once the browser has drawn the rest). A document is most of a second of Python; built
    on the loop, a class opening the page together held every visitor's requests and drags for seconds.
    Built in the thread, one at a time, in turn, the loop goes on answering, sharing the interpreter with
    it, and is left the document's encoding for the browser."""

    def modify_document(self, doc: Any) -> None:
        pass  # the app's script fills the document (`serve_document`): with what was built here, if anything

    async def on_session_created(self, session_context: Any) -> None:
        import asyncio

        doc = session_context._document  # as Panel's own session hook reaches it
        try:
            page = await asyncio.wrap_future(spare_pages().order(functools.partial(_document_ahead, doc)))
        except Exception as e:  # the script builds it on the loop instead, from nothing
            _log.warning("building a page's document ahead failed (%s: %s); built on the event loop instead",
                         type(e).__name__, e)
            doc.clear()
            return
        if page is not None:
            documents_made_ahead()[doc] = page


def _document_ahead(doc: Any, page: Page) -> None:
    """In the spare thread: `doc` filled with `page` in its template, complete, as the app's script would."""
    with set_curdoc(doc):
        _set_dist_url(doc)
        template, sidebar = _template(page, doc)
        page.complete(sidebar)
        with doc.models.freeze():
            template.servable()


@functools.lru_cache(maxsize=1)
def documents_made_ahead() -> weakref.WeakKeyDictionary[Any, Page]:
    """Each document `PagesAhead` built, with its page, until the app's script takes it."""
    return weakref.WeakKeyDictionary()


T = TypeVar("T")


class Spare(Generic[T]):
    """Objects made in a background thread, ahead of need: one spare made while the server is quiet, and
    the ones ordered (`order`) made one at a time, in the order asked.

    `take` hands the spare over at once (None while none is ready). `order` is for a caller that can wait
    (the server's session hook): the spare if one is ready, else one made next for it, so that a class
    opening the page together has its pages made in turn off the event loop. The spare is made again once
    no take or order has come for `quiet_s`: a burst is not slowed by spares it cannot use. A `make` that
    raises is not tried again: its order, and every take and order after it, get None (`failed` says why),
    and callers make their own."""

    def __init__(self, make: Callable[[], T], quiet_s: float = 1.0) -> None:
        self._make, self._quiet_s = make, quiet_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._ready: T | None = None
        self._orders: list[tuple[Future[T | None], Callable[[T], Any] | None]] = []
        self._last_take = time.monotonic() - quiet_s
        self._closed = False
        self.failed: str | None = None  # why `make` raised, if it did
        self._thread = threading.Thread(target=self._run, name="spare", daemon=True)
        self._thread.start()

    def take(self) -> T | None:
        with self._lock:
            got, self._ready = self._ready, None
            self._last_take = time.monotonic()
        self._wake.set()
        return got

    def order(self, then: Callable[[T], Any] | None = None) -> Future[T | None]:
        """The spare, or one made for this order after the ones before it; None once making has failed or
        the maker is closed (the caller makes its own). `then(made)` is done in the thread before it is
        handed over (a page's document built around it); if it raises, the future does."""
        future: Future[T | None] = Future()
        with self._lock:
            self._last_take = time.monotonic()
            if self._closed or self.failed is not None:
                future.set_result(None)
            else:
                self._orders.append((future, then))
        self._wake.set()
        return future

    def close(self, wait_s: float = 0.0) -> None:
        """Make no more (orders waiting get None); with `wait_s`, wait that long for one being made: a
        thread still building models while the interpreter shuts down can abort the process."""
        self._closed = True
        self._wake.set()
        if wait_s > 0:
            self._thread.join(wait_s)

    def _run(self) -> None:
        while not self._closed and self.failed is None:
            with self._lock:
                order = self._orders.pop(0) if self._orders else None
                made, self._ready = (self._ready, None) if order is not None else (None, self._ready)
                wait = None if self._ready is not None else self._last_take + self._quiet_s - time.monotonic()
            if order is None and (wait is None or wait > 0):  # a spare ready, or a take too recent: sleep
                self._wake.wait(wait)
                self._wake.clear()
                continue
            if made is None:
                try:
                    made = self._make()
                except Exception as e:  # a spare is an optimisation: the caller makes its own
                    self.failed = f"{type(e).__name__}: {e}"
            if order is None:
                with self._lock:
                    self._ready = made
                continue
            future, then = order
            try:
                if made is not None and then is not None:
                    then(made)
            except Exception as e:
                future.set_exception(e)
            else:
                future.set_result(made)
        with self._lock:
            orders, self._orders = self._orders, []
        for future, _ in orders:
            future.set_result(None)


@functools.lru_cache(maxsize=1)
def spare_pages() -> Spare[Page]:
    """The server's page maker: the pages `PagesAhead` orders for the visitors, and a spare of the default
    sample made once no page has opened for two seconds; one per server process."""
    return Spare(_spare_page, quiet_s=2.0)


def stop_spare_pages(wait_s: float = 10.0) -> None:
    """As the server stops: no more spare pages, and the one being made (if any) finished first."""
    if spare_pages.cache_info().currsize:
        spare_pages().close(wait_s)


def _spare_page() -> Page:
    return Page()  # its baselines are simulated (and searched) as it draws: the page shows them next


def follow_address(page: Page, location: Any) -> None:
    """Keep the browser's address and the page's link in step: the page opens the link the browser was
    given (now, or once the browser says it), and the address follows what the page shows."""
    def opened(search: str) -> None:
        if search and search != page.address:
            page.open_link(parse(search))

    def shown(address: str) -> None:
        if address != location.search:
            location.search = address

    pn.bind(opened, location.param.search, watch=True)
    pn.bind(shown, page.param.address, watch=True)
    opened(location.search)
    # the browser sends its own address once it connects: the page's is written after that
    pn.state.onload(lambda: page.changes.run(page.write_link))


def _visitor(doc: Any) -> str:
    """The address the tab's browser connected from (Bokeh hands the request's attributes through)."""
    request = getattr(doc.session_context, "request", None)
    return str(getattr(request, "remote_ip", "") or "")


def _tab_open(doc: Any) -> Callable[[], bool]:
    """Whether the browser tab of `doc`'s server session is still connected (True until the session is
    known); names no module global, as it outlives a served script's module."""
    def connected() -> bool:
        context = doc.session_context
        session = getattr(context, "session", None)
        return session is None or (not session.destroyed and session.connection_count > 0)
    return connected


class ClosedTabWrites:
    """The server's event loop exception handler, less the tracebacks of writes to a tab that closed
    during an update. Panel (1.9, `panel.io.document.dispatch_tornado`) starts a message's websocket
    writes one by one and, when one fails at once because the socket has closed, drops those it had
    started: asyncio then reports each of them, failed too, as "Task exception was never retrieved" with
    a traceback. The server logs the websocket closing anyway; anything else goes to the handler that
    was there before."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    @classmethod
    def install(cls) -> None:
        """Once per event loop; nothing without a running one."""
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if not isinstance(loop.get_exception_handler(), cls):
            loop.set_exception_handler(cls(loop.get_exception_handler()))

    def __call__(self, loop: Any, context: dict[str, Any]) -> None:
        from tornado.websocket import WebSocketClosedError

        if isinstance(context.get("exception"), WebSocketClosedError):
            return
        if self.previous is None:
            loop.default_exception_handler(context)
        else:
            self.previous(loop, context)
