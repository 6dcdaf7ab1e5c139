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
from ..session.files import MAX_FILE_BYTES
from ..session.samples import DEFAULT_SAMPLE, sample_groups
from ..session.trace import chrome_trace_chunks
from . import numbers
from .state import AppState, store_param
from .story import headline
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


# Panel's file input sends the whole file in one websocket message, base64 in JSON: the server must take
# a message that large, or the largest file the loader accepts drops the page's connection instead
UPLOAD_MESSAGE_BYTES = -(-MAX_FILE_BYTES * 4 // 3) + 2**20


class Files(pn.viewable.Viewer):
    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        # the samples' names in words are long: a smaller type, so they show whole in the sidebar
        self.sample = widget(pn.widgets.Select, "Sample session (measured on the GPU named)", groups=sample_groups(),
                             value=DEFAULT_SAMPLE, sizing_mode="stretch_width",
                             stylesheets=["select { font-size: 12.5px; }"])
        self.open = widget(pn.widgets.Button, "Open sample", button_type="primary")
        self.upload = pn.widgets.FileInput(accept=".vms,.gz", multiple=False)
        self.save = pn.widgets.FileDownload(callback=self._session_bytes, filename="session.vms",
                                            label="Save session (.vms)")
        self.html = pn.widgets.FileDownload(callback=self._html_bytes, filename="session.html", label="Export HTML")
        self.trace = pn.widgets.FileDownload(callback=self._trace_bytes, filename="session.trace.json",
                                             label="Export Chrome trace")
        self.open.on_click(lambda _: self.act(self.state.open_sample, self.sample.value))
        pn.bind(self._on_upload, self.upload, watch=True)

    def _on_upload(self, value: bytes | None) -> None:
        if value:
            self.act(self.state.load, bytes(value), self.upload.filename or "the uploaded file")

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
        return self._made("the session", session_to_bytes)

    def _trace_bytes(self) -> io.BytesIO | None:
        return self._made("the Chrome trace", lambda s: b"".join(chrome_trace_chunks(s)))

    def _html_bytes(self) -> io.BytesIO | None:
        return self._made("the page", lambda s: standalone_html(s, story=story_models(self.state)))

    def _made(self, what: str, make: Callable[[Session], bytes]) -> io.BytesIO | None:
        """The bytes of a download, or None (nothing downloads) and the reason said on the page."""
        s: Session | None = self.state.session
        if s is None:
            self.state.fail("nothing to save: load or simulate a session first")
            return None
        try:
            return io.BytesIO(make(s))
        except Exception as e:  # a bug must not make a click do nothing: say it
            self.state.fail(f"{what} could not be made ({type(e).__name__}): {e}")
            return None

    def __panel__(self) -> Any:
        return pn.Column(pn.pane.Markdown("#### Session"), self.sample, self.open,
                         pn.pane.Markdown("or open a session file (.vms):"), self.upload,
                         pn.Row(self.save), pn.Row(self.html, self.trace), sizing_mode="stretch_width")
