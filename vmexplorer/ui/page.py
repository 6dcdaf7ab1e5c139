"""The page: every panel laid out over one store, and wired to it.

A person's action goes to the store (`act`), which changes its parameters; the page follows them
(`param.depends`) and asks its panels to draw, each change in the document's lock and a tick's changes
together (`ui.document.Changes`): the headline and the timeline of a new session arrive in one update. If
drawing fails, the page puts back what it showed last and says why (`_failed`); no action fails in
silence. The link in the browser's address follows what is shown, and a link opens what it names
(`ui.link`).

The first screen holds the story: the headline, the timeline and where the time goes beside the bound.
The rest (the sidebar, the tables, the other tabs) is added once the browser has drawn it (`complete`),
and each other tab is built when first opened.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import panel as pn
import param

from ..policies import POLICIES
from ..session.samples import DEFAULT_SAMPLE
from . import numbers
from .banner import LessonBanner
from .cliff import PagingCliff
from .compare import Comparison
from .configure import Configure
from .document import Changes
from .editor import Editor
from .files import Files
from .finder import Finder
from .gpu import GpuRun
from .link import apply as apply_link
from .link import fields_of, query
from .state import TABS, AppState, store_param
from .story import Headline, WhereTimeGoes
from .timeline import TimelinePanel
from .widgets import Text, colored, glossary, relabel, tip, type_sizes, widget
from .work import Job, Outcome, Working, job_of
from .work import apply as apply_outcome

pd: Any = importlib.import_module("pandas")  # Panel's own dependency (its tables take DataFrames); no stubs


# where the story's bars go: beside the timeline, or (large type) under it
BESIDE = {"flex": "0 1 400px", "min-width": "300px"}
UNDER = {"flex": "1 1 100%", "min-width": "300px"}


class TextAlert(Text):
    """Panel's danger Alert to look at (its stylesheet and classes), a `Text` inside: Alert renders Markdown."""

    _stylesheets = pn.pane.Alert._stylesheets

    def __init__(self, **params: Any) -> None:
        super().__init__(css_classes=["alert", "alert-danger"], **params)


def compare_and_show(state: AppState, method: str) -> None:
    """A comparison's button: compare (a store method, by name), then show the Compare tab."""
    if getattr(state, method)() and state.comparison is not None:
        state.tab = "Compare"


class Page(pn.viewable.Viewer):
    """The widgets and figures of one browser tab over one store."""

    state: AppState = store_param()
    address = param.String(default="", doc="the link to what is shown: the query of the browser's address")

    def __init__(self, state: AppState | None = None) -> None:
        state = state or AppState()
        if state.session is None and not state.open_sample(DEFAULT_SAMPLE):
            state.simulate_config("vgg19", 64, "50%", "autovm")
        super().__init__(state=state)
        self.changes = Changes(on_error=self._failed)
        self._linking = False  # the link is being written from the store, or the store from the link
        self._restoring = ""  # why the page is putting back what it showed, while it does
        self._drawn = state.shown()  # what the page last drew whole: put back if drawing fails
        self._large = False
        self._build()
        self._draw_session()
        self._draw_messages()

    # --- the parts ----------------------------------------------------------------------------------
    def _build(self) -> None:
        s, act = self.state, self.act
        self.alert = TextAlert(visible=False, sizing_mode="stretch_width")
        self.working = Working(state=s, done=self._apply_outcome,
                               sweep=lambda: self._cliff is not None and self._cliff.live)
        self.info = Text(sizing_mode="stretch_width", styles={"font-style": "italic"})
        self.headline = Headline(state=s)
        self.bars = WhereTimeGoes(state=s)
        self.timeline = TimelinePanel(state=s, act=act, act_held=self._act_held,
                                      later=functools.partial(self.changes.run, after=1))
        self.summary = pn.widgets.Tabulator(disabled=True, show_index=False, sizing_mode="stretch_width",
                                            layout="fit_data_stretch")
        self.editor = Editor(state=s, act=act)
        self.configure = Configure(state=s, act=act)
        self.files = Files(state=s, act=act)
        self.gpu = GpuRun(state=s, act=act)
        self.banner = LessonBanner(state=s, act=act)
        self.projector = pn.widgets.Toggle.from_param(s.param.projector, name="Projector: large type", width=170,
                                                      **colored("light"))
        self.compare_twin = widget(pn.widgets.Button, "Compare with uvm (measured)", button_type="primary",
                                   description="the measured run of NVIDIA's demand paging at this capacity, beside")
        # the same schedule through the other mechanism: what the UVM driver costs against pinned copies
        self.compare_mechanism = widget(pn.widgets.Button, "Same schedule through swap")
        self.compare_twin.on_click(lambda _: act(compare_and_show, s, "compare_with_twin"))
        self.compare_mechanism.on_click(lambda _: act(compare_and_show, s, "compare_mechanisms"))
        # built when first shown: a page that never opens them (most) never pays for them
        self._cliff: PagingCliff | None = None
        self._finder: Finder | None = None
        self._comparison: Comparison | None = None
        # closed, and empty until first opened: its two tables of every op and tensor are the heaviest
        # thing a browser would build for the first screen, below it
        self.finder_card = pn.Card(title="Find ops and tensors", collapsed=True, sizing_mode="stretch_width")
        pn.bind(lambda collapsed: None if collapsed else self._fill_finder(), self.finder_card.param.collapsed,
                watch=True)
        pn.bind(self._tapped, self.timeline.param.selected, watch=True)
        self.tabs = pn.Tabs(dynamic=False, sizing_mode="stretch_width")
        pn.bind(self._tab_picked, self.tabs.param.active, watch=True)
        self._below = pn.Column(sizing_mode="stretch_width")  # the Session tab under the story: `complete`
        # each tab but the first is built, and put into the page, when it is first opened: the first
        # screen's document, what the server encodes and the browser builds, holds only what it shows
        self._tab_holders = {name: pn.Column(sizing_mode="stretch_width") for name in TABS[1:]}
        self._tab_contents: dict[str, Callable[[], Any]] = dict(zip(
            TABS[1:], (lambda: self.cliff, self.banner.contents, lambda: self.comparison), strict=True))

    @property
    def cliff(self) -> PagingCliff:
        if self._cliff is None:
            self._cliff = PagingCliff(state=self.state, act=self.act)
            self._cliff.set_large(self._large)
        return self._cliff

    @property
    def finder(self) -> Finder:
        if self._finder is None:
            self._finder = Finder(state=self.state, zoom=lambda span: self.changes.run(
                lambda: self.timeline.zoom_to(span)))
        return self._finder

    @property
    def comparison(self) -> Comparison:
        if self._comparison is None:
            self._comparison = Comparison(state=self.state, act=self.act)
            self._comparison.set_large(self._large)
            self._comparison.draw()
        return self._comparison

    # --- actions ------------------------------------------------------------------------------------
    def act(self, method: Callable[..., Any], *args: Any) -> None:
        """Run a store method (or a function of the store): served, one that may take seconds in the
        server's work pool (`ui.work`), and the page shows its outcome once it comes; else here."""
        job: Job | None = job_of(self.state, method, args) if self.changes.served else None
        if job is not None:
            self.working.start(job, self.changes.doc)
        else:
            self._act_here(method, *args)

    def _act_here(self, method: Callable[..., Any], *args: Any) -> None:
        """A bug in an action must not blank the page: the page stays as it was and says it."""
        try:
            method(*args)
        except Exception as e:
            self.state.restore(self._drawn, f"unexpected error ({type(e).__name__}): {e}")

    def _apply_outcome(self, outcome: Outcome) -> None:
        """A job's outcome, on the document's next tick (in its lock): drawn as a drag's answer is."""
        with self.changes.held():
            self._act_here(apply_outcome, self.state, outcome)

    def _act_held(self, method: Callable[..., Any], *args: Any) -> None:
        """`act` from a callback Bokeh runs in the document's lock: the answer and the story are drawn
        before it ends, and reach the browser before Bokeh's reply to the change that asked."""
        with self.changes.held():
            self.act(method, *args)

    def _tapped(self, selected: tuple[str, int] | None) -> None:
        """What a tap on the timeline picked is shown in the finder, whose card opens."""
        self.finder.show_picked(selected)
        self.finder_card.collapsed = False

    def _tab_picked(self, active: int) -> None:
        if not self._linking and 0 <= active < len(TABS):
            self.state.tab = TABS[active]

    def _failed(self, error: BaseException) -> None:
        """Drawing what the store holds failed: put back what the page showed last, and say why."""
        if self._restoring:
            self.state.fail(f"{self._restoring}; and the page could not draw what it showed before: {error}")
            return
        what = self.state.origin or "the session"
        self._restoring = (f"{what} cannot be shown ({type(error).__name__}: {error}); the page shows what it "
                           "showed before")
        try:
            self.state.restore(self._drawn, self._restoring)
            self._draw_session()
        except Exception as again:
            self.state.fail(f"{self._restoring}; and the page could not draw what it showed before: {again}")
        finally:
            self._restoring = ""

    # --- following the store -----------------------------------------------------------------------
    @param.depends("state.session", "state.comparison", watch=True)
    def _on_session(self) -> None:
        # served, each on a tick of its own: the small answer first (a browser draws it at once), then the
        # story together, then what is below the fold (`ui.document`)
        self.changes.run(self._draw_answer)
        self.changes.run(self._draw_story, after=1)
        self.changes.run(self._draw_rest, after=2)
        self.changes.run(self.write_link, after=2)

    @param.depends("state.axis", "state.iteration", watch=True)
    def _on_view(self) -> None:
        self.changes.run(self._draw_timeline)
        self.changes.run(self.write_link)

    @param.depends("state.picked", watch=True)
    def _on_picked(self) -> None:
        self.changes.run(self.timeline.highlight)

    @param.depends("state.message", "state.status", watch=True)
    def _on_message(self) -> None:
        self.changes.run(self._draw_messages)

    @param.depends("state.step", watch=True)
    def _on_step(self) -> None:
        self.changes.run(self.banner.draw)
        self.changes.run(self.write_link)

    @param.depends("state.tab", watch=True)
    def _on_tab(self) -> None:
        self.changes.run(self._show_tab)
        self.changes.run(self.write_link)

    @param.depends("state.projector", watch=True)
    def _on_projector(self) -> None:
        self.changes.run(self._set_type)
        self.changes.run(self.write_link)

    # --- drawing ------------------------------------------------------------------------------------
    def _draw_session(self) -> None:
        """Everything that shows the session (at once: the page's first drawing, or a put-back)."""
        self._draw_answer()
        self._draw_story()
        self._draw_rest()

    def _draw_answer(self) -> None:
        self.summary.value = pd.DataFrame(numbers.summary_rows(self.state))

    def _draw_story(self) -> None:
        """The headline, the timeline and where the time goes, and what sits beside them."""
        s = self.state
        self.headline.draw()
        self.timeline.draw()
        self.bars.draw()
        self.banner.draw()
        session = s.session
        self.compare_twin.visible = session is not None and session.plan.policy != "uvm" and s.twin("uvm") is not None
        relabel(self.compare_mechanism, f"Same schedule through {s.other_mechanism()}")
        # a policy that plans no moves has no schedule to move through the other mechanism
        self.compare_mechanism.visible = session is not None and not POLICIES[session.plan.policy].uvm_only

    def _draw_rest(self) -> None:
        """The sidebar's fields, the tables below the fold and the other tabs."""
        self.files.draw()
        self.configure.draw()
        self.editor.draw()
        for part in (self._finder, self._comparison, self._cliff):
            if part is not None:
                part.draw()
        self._drawn = self.state.shown()  # drawn whole: what a later failure puts back

    def _draw_timeline(self) -> None:
        self.timeline.draw()
        if self._finder is not None:
            self._finder.draw()

    def _draw_messages(self) -> None:
        self.alert.object = self.state.message
        self.alert.visible = bool(self.state.message)
        self.info.object = self.state.status

    def _show_tab(self) -> None:
        """The store's tab, filled when first shown; the cliff follows the session once it is."""
        name = self.state.tab
        holder = self._tab_holders.get(name)
        if holder is not None and not holder.objects:
            holder.objects = [self._tab_contents[name]()]
        if name == "Paging cliff" and not self.cliff.live:
            self.cliff.live = True
            self.cliff.draw()
        if len(self.tabs) == len(TABS) and self.tabs.active != TABS.index(name):
            self._linking = True
            try:
                self.tabs.active = TABS.index(name)
            finally:
                self._linking = False

    def _set_type(self) -> None:
        large = self._large = self.state.projector
        sizes = type_sizes(large)
        for part in (self.headline, self.bars, self.timeline, self.banner, self._cliff, self._comparison):
            if part is not None:
                part.set_large(large)
        self.info.styles = {**self.info.styles, "font-size": sizes["small"]}
        if hasattr(self, "_bars_box"):  # large type needs the whole width: the bars go under the timeline
            self._bars_box.styles = UNDER if large else BESIDE

    def _fill_finder(self) -> None:
        if not self.finder_card.objects:
            self.finder_card.objects = [self.finder]

    # --- the link -----------------------------------------------------------------------------------
    def write_link(self) -> None:
        """Put what is shown into the link, and so into the browser's address: told even when the link is
        the same, as the browser may have shown another address since (the one it was opened with)."""
        if self._linking:
            return
        address = query(fields_of(self.state))
        if address == self.address:
            self.param.trigger("address")
        self.address = address

    def open_link(self, fields: dict[str, str]) -> None:
        """Show what a link names (the browser opened it), then write back what could be shown. A link to
        what is shown already opens nothing again."""
        if query(fields) == query(fields_of(self.state)):
            self.changes.run(self.write_link)
            return
        self._linking = True
        try:
            self.act(apply_link, self.state, fields)
        finally:
            self._linking = False
        self.changes.run(self.write_link)

    # --- layout -------------------------------------------------------------------------------------
    def main(self) -> list[Any]:
        """The main area: messages, the lesson's banner, the headline with the lesson's start and the
        projector's switch, and the tabs, the Session tab's story on the first screen."""
        # side by side where the page is wide enough (1280 px), the bars under the timeline where it is not
        self._bars_box = pn.Column(self.bars, sizing_mode="stretch_width", styles=BESIDE)
        story = pn.FlexBox(pn.Column(self.timeline, sizing_mode="stretch_width",
                                     styles={"flex": "1 1 0", "min-width": "480px"}),
                           self._bars_box, flex_wrap="wrap", sizing_mode="stretch_width")
        controls = pn.FlexBox(pn.pane.Markdown("x axis:"), self.timeline.x_axis, self.timeline.iteration,
                              self.compare_twin, self.compare_mechanism, align_items="end", sizing_mode="stretch_width")
        session = pn.Column(controls, story, self._below, sizing_mode="stretch_width")
        self.tabs[:] = [(name, self._tab_holders.get(name, session)) for name in TABS]
        self._show_tab()
        return [pn.Column(self.alert, self.info, self.working, self.banner, self.headline, self.tabs,
                          sizing_mode="stretch_width")]

    def header(self) -> list[Any]:
        """In the template's header, on every screen: the lesson's start and the projector's switch."""
        return [pn.Row(self.banner.start, self.projector, align="center")]

    def sidebar(self) -> list[Any]:
        return [pn.pane.Markdown("**vmexplorer**: how CNN training pages GPU memory. The GPU's capacity is "
                                 "*emulated*: a run keeps its resident bytes under the capacity you pick."),
                self.files, pn.Row(pn.pane.Markdown("#### Configure"), tip("capacity")), self.configure,
                self.gpu, glossary()]

    def complete(self, sidebar: pn.Column) -> None:
        """Put in what the first screen's story can do without: the sidebar, and under the story the
        finder, the table and the editor. Served, this runs once the browser has drawn the story."""
        if not sidebar.objects:
            sidebar.objects = self.sidebar()
        if not self._below.objects:
            self._below.objects = [self.finder_card, self.summary, self.editor]

    def close(self) -> None:
        """The browser tab is gone: cancel its GPU run (queued or running) and stop polling, so a closed
        tab does not hold the GPU for the next person; its work in the pool stops too."""
        self.gpu.close()
        self.working.stop("")

    def session_destroyed(self, session_context: Any) -> None:
        """Bokeh's hook for the end of the page's server session: its tab is gone too."""
        self.close()

    def __panel__(self) -> Any:
        return pn.Column(*self.main(), sizing_mode="stretch_width")

