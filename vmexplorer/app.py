"""The web app: `vmexplorer serve`, or `panel serve vmexplorer/app.py` (no GPU needed).

It opens the sample session of VGG-19 batch 64 under AutoVM at 50% of its footprint, measured on an
H100, and lets a person configure and simulate other plans, drag the plan's offload and prefetch
markers (each edit re-plans as a `manual` plan and re-simulates at once), add or drop a tensor's
round trip, compare two sessions, follow a lesson, save or export what is shown, and (where
`worker.gpu_check()` says a GPU is there) run the shown plan on the GPU through the server's one
queue. All the logic lives in `vmexplorer.appstate.AppState`; the panels are `vmexplorer.views`'
Viewers over it; this module lays the page out and draws the session's timeline.
"""

from __future__ import annotations

import functools
import importlib
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import panel as pn
import param

# Panel links Bokeh's MathJax bundle (the largest file of the page) into every page holding a Markdown
# or HTML pane, math or not (`panel.io.resources.bundle_resources`); no pane here typesets math (what users
# type is escaped, the Markdown has none), so only a Bokeh model asking for math (Bokeh's own check, still
# made) would bring it in. No public setting says so; this is the function Panel asks.
pn.io.resources._panel_use_mathjax = lambda roots: False

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    # `panel serve vmexplorer/app.py` runs this file as a script from a checkout that may not be
    # installed: make the package importable from the repository it sits in
    sys.path.insert(0, str(ROOT))

from vmexplorer.appstate import AppState, Shown  # noqa: E402
from vmexplorer.session import Session, session_to_bytes  # noqa: E402
from vmexplorer.session.trace import chrome_trace_chunks  # noqa: E402
from vmexplorer.timeline import (  # noqa: E402
    standalone_html,
)
from vmexplorer.views import (  # noqa: E402
    Comparison,
    Configure,
    Editor,
    Finder,
    GpuRun,
    Lesson,
    PagingCliff,
    Text,
    TimelinePanel,
    WhereTimeGoes,
    relabel,
    sample_groups,
    story_models,
)
from vmexplorer.views import widget as _w  # noqa: E402
from vmexplorer.worker import Spare  # noqa: E402

pd: Any = importlib.import_module("pandas")  # Panel's own dependency (its tables take DataFrames); no stubs


class TextAlert(Text):
    """Panel's danger Alert to look at (its stylesheet and classes), a `Text` inside: Alert renders Markdown."""

    _stylesheets = pn.pane.Alert._stylesheets

    def __init__(self, **params: Any) -> None:
        super().__init__(css_classes=["alert", "alert-danger"], **params)


class ViewLink(param.Parameterized):
    """What a link to the page holds beside the lesson step: `AppView` keeps it in step with what it
    shows, and shows what a link sets. Every value is untrusted (anyone can type a URL): a sample is
    one of the samples, edits are parsed and checked, the rest is picked from what the page offers."""

    FIELDS = ("sample", "edits", "iteration", "axis")
    sample = param.String(default="", doc="a sample session's file name")
    edits = param.String(default="", doc="the plan's edits, as `AppState.edits_text` writes them")
    iteration = param.String(default="", doc="the iteration shown, from 1, or 'all'")
    axis = param.String(default="", doc="'time' or 'op'")


class DrawError(Exception):
    """The page could not draw what the state holds now; `AppView._act` puts back what it showed."""


class AppView:
    """The widgets of one browser session over one AppState."""

    TABS = ("Session", "Paging cliff", "Lesson", "Compare")

    def __init__(self, state: AppState | None = None) -> None:
        self.state = state or AppState()
        if self.state.session is None and not self.state.load_sample():
            self.state.simulate_config("vgg19", 64, "50%", "autovm")
        self._message_widgets()
        self._session_widgets()
        self._config_widgets()
        self._run_widgets()
        self._timeline_widgets()
        self._compare_widgets()
        self._story_widgets()
        self.link = ViewLink()
        self._linking = False  # the link is being written from the view, or the view from the link
        self._wire()

    def _message_widgets(self) -> None:
        """The status line and the alert every problem goes to."""
        self.alert = TextAlert(visible=False, sizing_mode="stretch_width")
        self.info = Text(sizing_mode="stretch_width", styles={"font-style": "italic"})

    def _session_widgets(self) -> None:
        """Open, save and export."""
        self.sample = _w(pn.widgets.Select, "Sample session", groups=sample_groups())
        self.open_sample = _w(pn.widgets.Button, "Open sample", button_type="primary")
        self.upload = pn.widgets.FileInput(accept=".vms,.gz", multiple=False)
        self.save = pn.widgets.FileDownload(callback=self._session_bytes, filename="session.vms",
                                            label="Save session (.vms)")
        self.html = pn.widgets.FileDownload(callback=self._html_bytes, filename="session.html",
                                            label="Export HTML")
        self.trace = pn.widgets.FileDownload(callback=self._trace_bytes, filename="session.trace.json",
                                             label="Export Chrome trace")

    def _config_widgets(self) -> None:
        """Model, batch, capacity, policy and its knobs."""
        self.config = Configure(state=self.state, act=self._act)

    def _run_widgets(self) -> None:
        """Simulate, and the GPU run with its progress and cancel (views.GpuRun)."""
        self.gpu = GpuRun(state=self.state, act=self._act)

    def _timeline_widgets(self) -> None:
        """The timeline with its pickers (views.TimelinePanel), its summary and the marker editor."""
        self.document: Any = None  # the served document (set by `page`); None: built outside a server
        self.lanes = TimelinePanel(state=self.state, act=self._act, in_document=self._in_document)
        self.x_axis, self.iteration, self.timeline = self.lanes.x_axis, self.lanes.iteration, self.lanes.pane
        self.summary = pn.widgets.Tabulator(disabled=True, show_index=False, sizing_mode="stretch_width",
                                            layout="fit_data_stretch")
        self.editor = Editor(state=self.state, act=self._act)

    def _compare_widgets(self) -> None:
        """A second session beside the shown one (views.Comparison, built with its tab), and the tabs."""
        self._comparison: Comparison | None = None
        self.tabs = pn.Tabs(dynamic=False, sizing_mode="stretch_width")
        self._below = pn.Column(sizing_mode="stretch_width")  # the Session tab under the timeline: `complete`
        self.compare_twin = _w(pn.widgets.Button, "Compare with the measured uvm run", button_type="primary")
        # the same schedule through the other mechanism: what the UVM driver costs against pinned copies
        self.compare_mechanism = _w(pn.widgets.Button, "The same schedule through swap", button_type="default")

    def _story_widgets(self) -> None:
        """The headline and where the time goes, the paging cliff and the lesson (views.py)."""
        self.story = WhereTimeGoes(state=self.state)
        # the cliff, the finder and the comparison are built when first shown: a page that never opens
        # them (most) never pays for them, and the first screen comes sooner
        self._cliff: PagingCliff | None = None
        self._finder: Finder | None = None
        # closed, and empty until first opened: its two tables of every op and tensor are the heaviest
        # thing a browser would build for the first screen, below it
        self.finder_card = pn.Card(title="Find ops and tensors", collapsed=True, sizing_mode="stretch_width")
        self.finder_card.param.watch(lambda e: self._fill_finder() if not e.new else None, "collapsed")
        self.lesson = Lesson(state=self.state)
        self.lesson.param.watch(lambda *_: self._show_lesson_step(), "step")

    @property
    def cliff(self) -> PagingCliff:
        """Drawn (`live`) once its tab is first opened; it follows the session from then on."""
        if self._cliff is None:
            self._cliff = PagingCliff(state=self.state)
        return self._cliff

    @property
    def finder(self) -> Finder:
        if self._finder is None:
            self._finder = finder = Finder(state=self.state, iteration=self.lanes.iteration_index())
            finder.param.watch(lambda e: self.lanes.zoom_to(e.new), "focus")
            finder.param.watch(lambda e: setattr(self.lanes, "picked", e.new), "selected_tensor")
            # what a tap picks is shown in the finder's card: it opens
            finder.param.watch(lambda *_: setattr(self.finder_card, "collapsed", False),
                               ["selected_op", "selected_memop"])
        return self._finder

    @property
    def comparison(self) -> Comparison:
        if self._comparison is None:
            self._comparison = Comparison(state=self.state, act=self._act, in_document=self._in_document)
            self._comparison.draw()
        return self._comparison

    def _wire(self) -> None:
        """What each widget does, and what the page redraws when the state changes."""
        s = self.state
        self.open_sample.on_click(lambda *_: self._act(s.load_sample, self.sample.value))
        self.upload.param.watch(self._on_upload, "value")
        self.lanes.param.watch(lambda *_: self._on_iteration(), "shown_iteration")
        # what a tap in the timeline picks is shown in the finder (built then)
        for picked in ("selected_op", "selected_memop"):
            self.lanes.param.watch(lambda e: setattr(self.finder, e.name, e.new), picked)
        self.editor.param.watch(lambda e: setattr(self.lanes, "picked", e.new), "picked")
        self.compare_twin.on_click(self._on_compare_twin)
        self.compare_mechanism.on_click(lambda *_: self._compare(self.state.compare_mechanisms))
        # param calls a watcher of several parameters with one event per parameter a batch changed, so
        # every watcher here takes any number (`lambda _:` fails once two change together)
        s.param.watch(lambda *_: self._drawing(self._draw_session), "session")
        s.param.watch(lambda *_: self._drawing(self._comparison.draw) if self._comparison else None,
                      ["comparison", "session"])
        s.param.watch(lambda *_: self._draw_messages(), ["message", "status"])
        self.link.param.watch(lambda *_: self._show_link(), list(ViewLink.FIELDS))
        self.x_axis.param.watch(lambda *_: self._write_link(), "value")
        self._draw_session()
        self._draw_messages()

    # --- actions: each goes through the state, which turns problems into `message`
    def _act(self, method: Any, *args: Any) -> None:
        """Run a state method; if it, or drawing what it opened, raises, the page goes back to what it
        showed before and says why: never half of one session and half of another."""
        before = self.state.shown()
        try:
            method(*args)
        except DrawError as e:
            self._put_back(before, str(e))
        except Exception as e:  # a bug must not blank the page: say it, keep the state
            self._put_back(before, f"unexpected error ({type(e).__name__}): {e}")

    def _put_back(self, before: Shown, why: str) -> None:
        try:
            self.state.restore(before, why)
        except DrawError as e:  # what drew a moment ago cannot be drawn again: keep what is there
            self.state.fail(f"{why}; and the page could not draw what it showed before: {e}")

    def _drawing(self, draw: Any) -> None:
        """Draw after the state changed; a failure becomes a DrawError naming what could not be shown."""
        try:
            draw()
        except Exception as e:
            what = self.state.origin or "the session"
            raise DrawError(f"{what} cannot be shown ({type(e).__name__}: {e}); the page shows what it "
                            "showed before") from e

    def _on_upload(self, event: Any) -> None:
        if event.new:
            self._act(self.state.load, bytes(event.new), self.upload.filename or "the uploaded file")

    def close(self) -> None:
        """The browser tab is gone: cancel its GPU run (queued or running) and stop polling, so a closed
        tab does not hold the GPU for the next person."""
        self.gpu.close()

    def session_destroyed(self, session_context: Any) -> None:
        """Bokeh's hook for the end of the page's server session: its tab is gone too."""
        self.close()

    def _on_compare_twin(self, _: Any) -> None:
        self._compare(self.state.compare_with_twin, "uvm")

    def _compare(self, method: Any, *args: Any) -> None:
        self._act(method, *args)
        if self.state.comparison is not None and not self.state.message and len(self.tabs) > 1:
            self.tabs.active = self.TABS.index("Compare")  # show it

    # --- drawing
    def _draw_messages(self) -> None:
        self.alert.object = self.state.message
        self.alert.visible = bool(self.state.message)
        self.info.object = self.state.status

    def _in_document(self, change: Callable[[], None]) -> None:
        """Make `change` to the page's Bokeh figures now or, served, on the document's next tick: a
        widget's callback runs without the document's lock, and Bokeh sends a figure's changes only
        under it (a drag's callback has it; a tick callback always does)."""
        doc = self.document
        if doc is None or doc.session_context is None:
            change()
            return

        doc.add_next_tick_callback(change)

    def _write_link(self) -> None:
        """Put what is shown into the link (and so into the page's URL)."""
        if self._linking:
            return
        self._linking = True
        try:
            st = self.state
            with param.parameterized.discard_events(self.link):
                self.link.param.update(sample=st.sample, edits=st.edits_text() if st.sample else "",
                                       iteration=str(self.iteration.value) if self.iteration.visible else "",
                                       axis=self.x_axis.value)
            self.link.param.trigger(*ViewLink.FIELDS)  # every field into the URL, not only those that changed
        finally:
            self._linking = False

    def _show_link(self) -> None:
        """Show what the link says: its sample, then its edits, iteration and axis. Called once per field
        a link sets, in any order, so each call brings the whole view to the link."""
        if self._linking:
            return
        self._linking = True
        try:
            st, link = self.state, self.link
            if link.sample and link.sample != st.sample:
                self._act(st.load_sample, link.sample)
            if st.sample and link.sample == st.sample and link.edits != st.edits_text():
                self._act(st.apply_edits, link.edits)
            if link.axis in ("time", "op"):
                self.x_axis.value = link.axis
            if link.iteration in (self.iteration.options.values() if isinstance(self.iteration.options, dict)
                                  else self.iteration.options):
                self.iteration.value = link.iteration
        finally:
            self._linking = False
        self._write_link()  # what the link asked that could not be shown is not kept in it

    def _draw_session(self) -> None:
        s = self.state.session
        if s is None:
            return
        p = s.plan
        self.config.set_to(s)
        stem = f"{p.model}-b{p.batch}-{p.policy}-{s.timeline.source}"
        self.save.filename, self.html.filename, self.trace.filename = (
            f"{stem}.vms", f"{stem}.html", f"{stem}.trace.json")
        self.summary.value = pd.DataFrame(self.state.summary_rows())
        self.compare_twin.visible = p.policy != "uvm" and self.state.twin("uvm") is not None
        relabel(self.compare_mechanism, f"The same schedule through {self.state.other_mechanism()}")
        self.lanes.show_session(s)
        # served, the marker editor's tables follow on a later tick: the summary a person watches after a
        # drag, and the timeline, reach the browser first
        self._in_document(self.editor.draw)
        if self._finder is not None:
            self._finder.iteration = self.lanes.iteration_index()
        self._write_link()

    def _fill_tab(self) -> None:
        name = self.TABS[self.tabs.active]
        holder = self._tab_holders.get(name)
        if holder is not None and not holder.objects:
            holder.objects = [self._tab_contents[name]()]
        if name == "Paging cliff":
            self.cliff.live = True

    def _fill_finder(self) -> None:
        if not self.finder_card.objects:
            self.finder_card.objects = [self.finder]

    def _show_lesson_step(self) -> None:
        """A lesson step's view: its tab, the time axis, the typical iteration (opening its session chose
        that) and the tensor it lights up."""
        if not self.lesson.step:
            return
        self.x_axis.value = "time"
        self.tabs.active = self.TABS.index(self.lesson.tab)
        self.lanes.picked = self.lesson.lit

    def _on_iteration(self) -> None:
        """Another iteration drawn: the Finder and the link follow."""
        if self._finder is not None:
            self._finder.iteration = self.lanes.iteration_index()
        self._write_link()

    # --- downloads
    def _session_bytes(self) -> io.BytesIO | None:
        s = self._shown()
        return None if s is None else io.BytesIO(session_to_bytes(s))

    def _trace_bytes(self) -> io.BytesIO | None:
        s = self._shown()
        if s is None:
            return None
        return io.BytesIO(b"".join(chrome_trace_chunks(s)))

    def _html_bytes(self) -> io.BytesIO | None:
        s = self._shown()
        return None if s is None else io.BytesIO(standalone_html(s, story=story_models(self.state)))

    def _shown(self) -> Session | None:
        s: Session | None = self.state.session
        if s is None:
            self.state.fail("nothing to save: load or simulate a session first")
        return s

    # --- layout
    def complete(self, sidebar: pn.Column) -> None:
        """Put in what the first screen's story can do without: the sidebar's panels, and under the
        timeline where the time goes, the finder, the table and the editor.

        Served, the page's first document holds only the headline and the timeline, and this runs once
        the browser has drawn them (`pn.state.onload`): the server builds, encodes and the browser lays
        out the rest, two thirds of the page's models (the tables the slowest of them), while the
        timeline is already on the screen."""
        if not sidebar.objects:
            sidebar.objects = self.sidebar()
        if not self._below.objects:
            self._below.objects = [self.story.bars, self.finder_card, self.summary, self.editor]

    def sidebar(self) -> list[Any]:
        return [
            pn.pane.Markdown("**vmexplorer**: how CNN training pages GPU unified memory. The GPU's capacity "
                             "is *emulated*: a run keeps its resident bytes under the capacity you pick."),
            pn.pane.Markdown("#### Session"), self.sample, self.open_sample,
            pn.pane.Markdown("or open a session file (.vms):"), self.upload,
            pn.Row(self.save), pn.Row(self.html, self.trace),
            pn.pane.Markdown("#### Configure"), self.config,
            self.gpu,
        ]

    def main(self) -> list[Any]:
        # the story first: at 1280x720 the headline and the timeline fill the first screen, where the
        # time goes beside the baselines right under it, the full table after
        session = pn.Column(self.story.headline,
                            pn.Row(pn.pane.Markdown("x axis:"), self.x_axis, self.iteration, self.compare_twin,
                                   self.compare_mechanism),
                            self.timeline, self._below, sizing_mode="stretch_width")
        def cliff() -> Any:
            return pn.Column(pn.pane.Markdown("Iteration time against capacity, simulated with the shown "
                                              "session's cost model; the diamonds were measured. Tap a point "
                                              "to open it."), self.cliff, name="Paging cliff")

        # each tab but the first is built, and put into the page, when it is first opened: the first
        # screen's document, what the server encodes and the browser builds, holds only what it shows
        self._tab_contents: dict[str, Callable[[], Any]] = dict(zip(
            self.TABS, (lambda: session, cliff, self.lesson.contents, lambda: self.comparison), strict=True))
        self._tab_holders = {name: pn.Column(sizing_mode="stretch_width") for name in self.TABS[1:]}
        self.tabs[:] = [(name, self._tab_holders.get(name, session)) for name in self.TABS]
        self.tabs.param.watch(lambda *_: self._fill_tab(), "active")
        # the lesson's banner sits above the tabs: a step may show the timeline or the cliff
        return [pn.Column(self.alert, self.info, self.lesson, self.tabs, sizing_mode="stretch_width")]


class Template(pn.template.VanillaTemplate):
    """Panel's plainest template (a header, a sidebar and the main area, no design system) without its
    web font.

    FastListTemplate, the usual choice, brings Microsoft's FAST web components, the page's largest
    script after Bokeh's, which the browser evaluates before drawing anything, for a layout this one gives
    as well. The font (Lato, from Google) would be a failed request and a console error offline (a
    classroom, a lent machine): the page uses the system's sans-serif."""

    _resources = {"css": {}}


def page(state: AppState | None = None) -> Template:
    doc = pn.state.curdoc
    served = doc is not None and doc.session_context is not None
    # served, the default view was made while the server waited for this visitor (`spare_views`): the
    # session the browser waits for is built in the time the template and its models take
    view = (spare_views().take() if served and state is None else None) or AppView(state)
    view.gpu.follow_gpu_check()  # in this session: a spare was made with no session to poll in
    # laid out before a link is read: a lesson step opens in its tab, which must be there. The sidebar is
    # one root, not one per widget (a template makes a root of each item): a document of 6 roots instead
    # of 28, each of which the browser would lay out on its own
    sidebar = pn.Column(sizing_mode="stretch_width")
    template = Template(title="vmexplorer", sidebar=[sidebar], main=view.main())
    if served:  # the story first, the rest once drawn
        pn.state.onload(lambda: view.complete(sidebar))
    else:
        view.complete(sidebar)
    if doc is not None:  # served: the view follows its browser tab (built outside a server, there is none)
        view.document = doc
        view.gpu.tab_open = _tab_open(doc)
        # a bound method: it holds the view, and the view all it needs to cancel its run
        doc.on_session_destroyed(view.session_destroyed)
        _ClosedTabWrites.install()
        if pn.state.location is not None:
            # `?step=3` opens the lesson at its third step: a link per step; the rest of the view (the
            # sample, its edits, the iteration and the axis) follows, so a link reproduces what it shows
            pn.state.location.sync(view.lesson, {"step": "step"})
            pn.state.location.sync(view.link, {name: name for name in ViewLink.FIELDS})
            # the browser sends its own address once it connects: the page's is written after that
            pn.state.onload(view._write_link)
    return template


@functools.lru_cache(maxsize=1)
def spare_views() -> Spare[AppView]:
    """The server's spare view of the default sample, made in a background thread once no page has
    opened for two seconds; one per server process (this module is imported once, the served script is
    not)."""
    return Spare(_spare_view, quiet_s=2.0)


def _spare_view() -> AppView:
    view = AppView()
    view.state.breakdown_rows()  # its baselines, simulated (and searched) ahead too: the page shows them next
    return view


def _tab_open(doc: Any) -> Callable[[], bool]:
    """Whether the browser tab of `doc`'s server session is still connected (True until the session is
    known); names no module global, as it outlives a served script's module."""
    def connected() -> bool:
        context = doc.session_context
        session = getattr(context, "session", None)
        return session is None or (not session.destroyed and session.connection_count > 0)
    return connected


class _ClosedTabWrites:
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


if __name__.startswith("bokeh"):  # served by `panel serve`; importing the module builds nothing
    from panel.io.resources import LOCAL_DIST

    # Bokeh runs this file as a new module for every browser session and clears that module's globals when
    # the session ends, before the session-destroyed hooks run and while runs may still be followed. The
    # page is built by the package's own module instead: imported once per server, it keeps its globals,
    # and the one run queue it holds is the same for every session.
    from vmexplorer.app import page as served_page

    # the template adds its parts to the document one root at a time, and Bokeh walks every model at
    # each: frozen, it walks them once
    served_doc = pn.state.curdoc
    assert served_doc is not None  # Bokeh serves this script into a document
    # where Panel's stylesheets are served from, which Panel writes into a session's document as it
    # renders its page; `vmexplorer serve` renders one page for every visitor and builds each visitor's
    # session when the browser connects (cli.py), so that session's page is never rendered: without
    # this its models would name stylesheets on Panel's CDN, not reachable offline
    served_doc.template_variables.setdefault(
        "dist_url", f"{pn.state.rel_path}/{LOCAL_DIST}" if pn.state.rel_path else LOCAL_DIST)
    # the tables come after the first document (`AppView.complete`): their scripts are asked for by name
    pn.extension("tabulator")
    with served_doc.models.freeze():
        served_page().servable()
