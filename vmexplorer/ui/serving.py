"""The page as a server serves it: in a template, with a spare page made ahead for the next visitor, the
link kept in the browser's address, and a closed tab's GPU run cancelled.

`vmexplorer/app.py` (what `panel serve` runs, once per browser session) calls `served_template()`. This
module is imported once per server process, so what it keeps (the spare page) outlives a served script's
module, which Bokeh clears when its session ends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import panel as pn

from ..worker import Spare
from .link import parse
from .page import Page
from .routes import warn_if_unguarded
from .state import AppState


class Template(pn.template.VanillaTemplate):
    """Panel's plainest template (a header, a sidebar and the main area, no design system) without its
    web font.

    FastListTemplate, the usual choice, brings Microsoft's FAST web components, the page's largest
    script after Bokeh's, which the browser evaluates before drawing anything, for a layout this one gives
    as well. The font (Lato, from Google) would be a failed request and a console error offline (a
    classroom, a lent machine): the page uses the system's sans-serif."""

    _resources = {"css": {}}


def served_template(state: AppState | None = None) -> Template:
    """The page of one browser tab in its template; served, wired to the tab's document."""
    doc = pn.state.curdoc
    served = doc is not None and doc.session_context is not None
    # served, the default page was made while the server waited for this visitor (`spare_pages`): the
    # session the browser waits for is built in the time the template and its models take
    page = (spare_pages().take() if served and state is None else None) or Page(state)
    page.gpu.follow_gpu_check()  # in this session: a spare was made with no session to poll in
    # the sidebar is one root, not one per widget (a template makes a root of each item): a document of a
    # few roots instead of dozens, each of which the browser would lay out on its own
    sidebar = pn.Column(sizing_mode="stretch_width")
    template = Template(title="vmexplorer", sidebar=[sidebar], main=page.main(), header=page.header(),
                        sidebar_width=330)
    if doc is not None:  # the page follows its document's session; built outside a server, there is none
        # a bound method: it holds the page, and the page all it needs to cancel its run
        doc.on_session_destroyed(page.session_destroyed)
        page.gpu.tab_open = _tab_open(doc)
        page.gpu.visitor = _visitor(doc)
        # one job in the work pool at a time per visitor; a page of no known address is one of its own
        page.working.owner = page.gpu.visitor or f"page {id(page)}"
    if doc is None or not served:
        page.complete(sidebar)
        return template
    page.changes.attach(doc)
    page.files.make_in = page.working.download
    warn_if_unguarded()
    pn.state.onload(lambda: page.complete(sidebar))  # the story first, the rest once drawn
    ClosedTabWrites.install()
    if pn.state.location is not None:
        follow_address(page, pn.state.location)
    return template


@functools.lru_cache(maxsize=1)
def spare_pages() -> Spare[Page]:
    """The server's spare page of the default sample, made in a background thread once no page has opened
    for two seconds; one per server process."""
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
