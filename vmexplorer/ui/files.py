"""Open a session (a sample, picked by its name in words, or a file), save what is shown, export it as a page
that opens offline or as a Chrome trace. An export is made of new models from the session and the
store's figures, never of the live page's."""

from __future__ import annotations

import io
from collections.abc import Callable
from html import escape
from typing import Any

import panel as pn
import param

from ..plots import breakdown_figure, sweep_figure
from ..plots.export import standalone_html
from ..session import Session, session_to_bytes
from ..session.samples import DEFAULT_SAMPLE, sample_groups
from ..session.trace import chrome_trace_chunks
from . import numbers
from .state import AppState, store_param
from .story import headline
from .upload import FileUpload
from .widgets import widget


def _now(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


def story_models(state: AppState) -> list[Any]:
    """The story as new Bokeh models, for a page that opens offline: the headline, where the time goes
    beside the baselines with the bound, and the paging cliff."""
    from bokeh.models.widgets import Div

    text = escape(headline(state))  # names from session files: text, never markup
    b = numbers.bound(state)
    return [Div(text=f"<h3>{text}</h3>", disable_math=True, sizing_mode="stretch_width"),
            breakdown_figure(numbers.breakdown_rows(state), None if b is None else b.lower_bound_ns / 1e6),
            sweep_figure(numbers.sweep(state))]


def _shown(state: AppState) -> Session:
    if state.session is None:
        raise ValueError("nothing is shown")
    return state.session


def session_file(state: AppState) -> bytes:
    """The shown session as a file (.vms)."""
    return session_to_bytes(_shown(state))


def trace_file(state: AppState) -> bytes:
    """The shown session as a Chrome trace."""
    return b"".join(chrome_trace_chunks(_shown(state)))


def html_file(state: AppState) -> bytes:
    """The shown session and its story as a page that opens offline."""
    return standalone_html(_shown(state), story=story_models(state))


Make = Callable[[AppState], bytes]

class Files(pn.viewable.Viewer):
    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")
    make_in = param.Callable(default=None, doc="makes a download's bytes away from the event loop (served)")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        # the samples' names in words are long: a smaller type, so they show whole in the sidebar
        self.sample = widget(pn.widgets.Select, "Sample session (measured on the GPU named)", groups=sample_groups(),
                             value=DEFAULT_SAMPLE, sizing_mode="stretch_width",
                             stylesheets=["select { font-size: 12.5px; }"])
        self.open = widget(pn.widgets.Button, "Open sample", button_type="primary")
        self.upload = FileUpload(on_file=lambda data, name: self.act(self.state.load, data, name),
                                 on_refused=self.state.fail)
        self.save = pn.widgets.FileDownload(callback=self._save_clicked, filename="session.vms",
                                            label="Save session (.vms)")
        self.html = pn.widgets.FileDownload(callback=self._html_clicked, filename="session.html", label="Export HTML")
        self.trace = pn.widgets.FileDownload(callback=self._trace_clicked, filename="session.trace.json",
                                             label="Export Chrome trace")
        self.open.on_click(lambda _: self.act(self.state.open_sample, self.sample.value))

    def draw(self) -> None:
        """The picker shows the sample shown (if one is), and the files are named after the session."""
        s, source = self.state.session, self.state.source
        if source is not None and source.kind == "sample" and source.name != self.sample.value:
            self.sample.value = source.name
        if s is None:
            return
        p = s.plan
        stem = f"{p.model}-b{p.batch}-{p.policy}-{s.timeline.source}"
        self.save.filename, self.html.filename, self.trace.filename = (
            f"{stem}.vms", f"{stem}.html", f"{stem}.trace.json")

    def _session_bytes(self) -> io.BytesIO | None:
        return self._made("the session", session_file)

    def _trace_bytes(self) -> io.BytesIO | None:
        return self._made("the Chrome trace", trace_file)

    def _html_bytes(self) -> io.BytesIO | None:
        return self._made("the page", html_file)

    async def _save_clicked(self) -> io.BytesIO | None:
        return await self._made_away("the session", session_file)

    async def _trace_clicked(self) -> io.BytesIO | None:
        return await self._made_away("the Chrome trace", trace_file)

    async def _html_clicked(self) -> io.BytesIO | None:
        return await self._made_away("the page", html_file)

    def _made(self, what: str, make: Make) -> io.BytesIO | None:
        """The bytes of a download, or None (nothing downloads) and the reason said on the page."""
        if self.state.session is None:
            self.state.fail("nothing to save: load or simulate a session first")
            return None
        try:
            return io.BytesIO(make(self.state))
        except Exception as e:  # a bug must not make a click do nothing: say it
            self.state.fail(f"{what} could not be made ({type(e).__name__}): {e}")
            return None

    async def _made_away(self, what: str, make: Make) -> io.BytesIO | None:
        """`_made` in the server's work pool where there is one (served): a large export takes seconds."""
        if self.make_in is None or self.state.session is None:
            return self._made(what, make)
        try:
            return io.BytesIO(await self.make_in(make))
        except Exception as e:
            self.state.fail(f"{what} could not be made: {e}")
            return None

    def __panel__(self) -> Any:
        return pn.Column(pn.pane.Markdown("#### Session"), self.sample, self.open,
                         pn.pane.Markdown("or open a session file (.vms):"), self.upload,
                         pn.Row(self.save), pn.Row(self.html, self.trace), sizing_mode="stretch_width")
