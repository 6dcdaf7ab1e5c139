"""The app's panels, as Panel Viewers over one `AppState`: the headline and where the time goes beside
the baselines, the paging cliff, the guided lesson, the Finder, the comparison of two sessions and the
GPU run. Each builds its Bokeh figure once and, when the state shows another session, puts the new
numbers into the figure's data sources, so a browser keeps one set of models and a person's zoom.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from html import escape
from typing import Any

import panel as pn
import param
from bokeh.events import Tap
from panel.custom import JSComponent

from . import details, worker
from .appstate import MARKER_KINDS, SAMPLES, AppState, read_sample, samples_by_gpu, times_than
from .config import Mechanism, capacity_text, share_of_footprint
from .graph import MODELS, Graph, GraphError, build_graph
from .plan import PlanError
from .plots import breakdown_figure, sweep_figure, update_breakdown, update_sweep
from .policies import POLICIES, OptionSpec, compile_plan
from .records.breakdown import PARTS as BREAKDOWN_PARTS
from .session import Session
from .simulator import simulate
from .simulator.bound import lower_bound
from .timeline import (
    can_update,
    comparison_figure,
    highlight_tensor,
    issue_after_at,
    iteration_view,
    row_at,
    timeline_figure,
    timeline_source,
    typical_iteration,
    update_timeline,
)
from .units import format_bytes, format_ns


class Text(pn.pane.HTML):
    """A pane whose `object` is text, shown as it is. What the page says holds names from session files,
    file names and what people type, and Markdown or HTML panes would render them: `<img onerror=...>`
    in an op name would run, `**x**` turn bold, `$x$` become math. Here every character stays one (the
    HTML pane's math is off by default)."""

    def _transform_object(self, obj: Any) -> dict[str, Any]:
        result: dict[str, Any] = super()._transform_object(escape("" if obj is None else str(obj)))
        return result


# newer Panels call a widget's `name` `label` and a button's `button_type` `color`: say it either way
_LABEL = "label" if "label" in pn.widgets.Button.param else "name"
_COLOR = "color" if "color" in pn.widgets.Button.param else "button_type"


def relabel(w: Any, label: str) -> None:
    """Set a widget's label, whichever parameter this Panel names it by (see `widget`)."""
    setattr(w, _LABEL, label)


def widget(cls: Any, label: str, **params: Any) -> Any:
    """A Panel widget with its label (and a button's colour) as this Panel names them."""
    if "button_type" in params:
        params[_COLOR] = params.pop("button_type")
    return cls(**{_LABEL: label}, **params)


def headline(state: AppState) -> str:
    """One sentence a class reads first: the iteration time, against device, and where it went."""
    s = state.session
    if s is None:
        return ""
    split = s.time_split()
    device_ns = state.baseline_ns("device")  # only device's: the other baselines come after the first screen
    against = "" if device_ns is None else f", {times_than(split.iteration_ns, device_ns, 'device')}"
    parts = sorted(((getattr(split, key), label) for key, label in BREAKDOWN_PARTS[1:]), reverse=True)
    most = f"; {format_ns(parts[0][0])} of it {parts[0][1]}" if parts and parts[0][0] > 0 else ""
    p = s.plan
    return (f"{p.model} batch {p.batch}, {p.policy}: {format_ns(split.iteration_ns)} per iteration "
            f"({s.timeline.source}){against}{most}")


def story_models(state: AppState) -> list[Any]:
    """The story as plain Bokeh models, for a page that opens offline (the app's Export HTML): the
    headline, where the time goes beside the baselines, and the paging cliff."""
    from bokeh.models.widgets import Div

    text = escape(headline(state))  # names from session files: text, never markup
    return [Div(text=f"<h3>{text}</h3>", disable_math=True, sizing_mode="stretch_width"),
            breakdown_figure(state.breakdown_rows()), sweep_figure(state.capacity_sweep())]


class _OverState(pn.viewable.Viewer):
    """A panel of the page over its one AppState (`app`): what it shows comes from the state, and what
    a person does there goes to it."""

    state = param.ClassSelector(class_=AppState)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not isinstance(self.state, AppState):
            raise TypeError(f"{type(self).__name__} needs the page's AppState")
        self.app: AppState = self.state


class WhereTimeGoes(_OverState):
    """The headline and the stacked bars of this session and its baselines."""


    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.headline = Text(headline(self.app), styles={"font-size": "1.3em", "font-weight": "bold"},
                             sizing_mode="stretch_width")
        self.figure: Any = None
        self._bars: pn.pane.Bokeh | None = None
        self.app.param.watch(self._update, "session")

    @property
    def bars(self) -> pn.pane.Bokeh:
        """Drawn when first asked for: the page's first screen holds the headline, the bars come after
        (`AppView.complete`), and their baselines are simulated only then."""
        if self._bars is None:
            self.figure = breakdown_figure(self.app.breakdown_rows())
            self._bars = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")
        return self._bars

    def _update(self, *_: Any) -> None:
        self.headline.object = headline(self.app)
        if self._bars is not None:
            update_breakdown(self.figure, self.app.breakdown_rows())

    def __panel__(self) -> Any:
        return pn.Column(self.headline, self.bars, sizing_mode="stretch_width")


class PagingCliff(_OverState):
    """Iteration time against capacity for every policy; tapping a point opens that configuration.
    A sweep simulates dozens of plans, so it is drawn only once the page shows it (`live`)."""

    live = param.Boolean(default=False, doc="whether the page shows the cliff, so it follows the session")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.figure = sweep_figure(self.app.capacity_sweep() if self.live else {"lines": [], "measured": []})
        self.points = self.figure.select_one({"name": "sweep_points"})
        self.points.selected.on_change("indices", self._on_tap)
        self._pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")
        self.app.param.watch(self._update, "session")
        self.param.watch(self._update, "live")

    def _update(self, *_: Any) -> None:
        if self.live:
            update_sweep(self.figure, self.app.capacity_sweep())

    def _on_tap(self, _attr: str, _old: Any, new: list[int]) -> None:
        if not new:
            return
        data = self.points.data
        self.points.selected.indices = []
        self.app.open_sweep_point(data["policy"][new[0]], float(data["capacity_pct"][new[0]]))

    def __panel__(self) -> Any:
        return self._pane


@dataclass(frozen=True)
class Step:
    """One step of the lesson: the view it opens and its words, written from the numbers it shows."""

    title: str
    sample: str  # the sample session it opens
    words: Callable[[AppState], str]
    late_prefetch: bool = False  # drag the prefetch whose lateness costs most as late as it may go
    tab: str = "Session"  # the tab it is seen in: the timeline's, or the paging cliff's
    lit: Callable[[AppState], int | None] | None = None  # the tensor it lights up in the timeline


def _most_faulted(state: AppState) -> int | None:
    """The tensor whose demand faults bring the most bytes in, over the session's plan."""
    s = state.session
    assert s is not None
    faulted: dict[int, int] = {}
    for m in s.plan.memops:
        if details.memop_what(m) == "demand fault":
            faulted[m.tensor] = faulted.get(m.tensor, 0) + m.nbytes
    return max(faulted, key=lambda t: (faulted[t], -t)) if faulted else None


def _largest_moved(state: AppState) -> int | None:
    """The largest tensor the plan offloads and prefetches: the one a drag moves in step 4."""
    s = state.session
    assert s is not None
    moved = {mv.tensor for mv in state.moves if mv.prefetch_after is not None}
    return max(moved, key=lambda t: (s.graph.tensors[t].nbytes, -t)) if moved else None


def _dragged(state: AppState) -> int | None:
    """The tensor whose round trip the edits moved (the first one, in the plan's order)."""
    loaded = state.loaded
    before = {} if loaded is None else {mv.tensor: mv for mv in loaded.plan.moves}
    return next((mv.tensor for mv in state.moves if before.get(mv.tensor) != mv), None)


def _lit_words(state: AppState, lit: int | None, what: str) -> str:
    s = state.session
    if s is None or lit is None:
        return ""
    t = s.graph.tensors[lit]
    return f" Lit up in the timeline: {t.name} ({format_bytes(t.nbytes)}), {what}."


def _split_words(state: AppState) -> tuple[Any, Any]:
    s = state.session
    assert s is not None
    return s, s.time_split()


def _fits(state: AppState) -> str:
    s, split = _split_words(state)
    return (f"Everything fits: VGG-19 at batch 64 holds its {format_bytes(s.graph.footprint)} on the GPU. "
            f"An iteration takes {format_ns(split.iteration_ns)}, {100 * split.compute_ns / split.iteration_ns:.0f}% "
            "of it compute: the GPU never waits for memory.")


def _uvm(state: AppState) -> str:
    s, split = _split_words(state)
    return (f"Half the memory, NVIDIA's demand paging (uvm): {format_ns(split.iteration_ns)} per iteration. "
            f"{format_ns(split.fault_wait_ns)} of it the kernels wait on demand faults and "
            f"{format_ns(split.transfer_wait_ns)} on the driver's evictions; compute is still "
            f"{format_ns(split.compute_ns)}." + _lit_words(state, _most_faulted(state), "the tensor faulted in most"))


def _autovm(state: AppState) -> str:
    s, split = _split_words(state)
    moved = s.summary["bytes_to_host"]
    return (f"Same capacity, AutoVM: it reads the training graph and offloads {format_bytes(int(moved))} of "
            f"feature maps during forward, prefetching them before backward needs them. "
            f"{format_ns(split.iteration_ns)} per iteration, {format_ns(split.fault_wait_ns)} waiting on faults."
            + _lit_words(state, _largest_moved(state), "its offload and its prefetch"))


def _late(state: AppState) -> str:
    s, split = _split_words(state)
    was = state.unedited()  # the loaded plan on the same cost model, simulated once per loaded session
    assert was is not None
    unedited = int(was.timeline.iteration_ns().max())
    waited = f" (from {format_ns(was.time_split().transfer_wait_ns)})"
    return (f"Drag a prefetch later, here the one that costs most, as late as it may go: {state.status}. "
            f"The iteration takes {format_ns(split.iteration_ns)} instead of {format_ns(unedited)}, both "
            f"simulated with this session's cost model; {format_ns(split.transfer_wait_ns)} of it waiting on "
            f"transfers{waited}."
            + _lit_words(state, _dragged(state), "the prefetch dragged; its ghost marks where it was"))


def _cliff(state: AppState) -> str:
    lines = {line["policy"]: line for line in state.capacity_sweep()["lines"]}
    uvm, device = lines.get("uvm"), lines.get("device")
    if uvm is None or device is None or not uvm["iteration_ms"] or not device["iteration_ms"]:
        return "The paging cliff: iteration time against capacity, one line per policy."
    worst = uvm["iteration_ms"][0] / device["iteration_ms"][0]
    return (f"The paging cliff: at the least memory VGG-19 runs in ({uvm['capacity_pct'][0]:.0f}% of its "
            f"footprint), uvm is {worst:.1f}x slower than device. The diamonds are runs measured on the GPU; "
            "tap one to open it.")


def _bound(state: AppState) -> str:
    s, split = _split_words(state)
    bound, uvm = state.bound(), state.baseline_ns("uvm")
    cost = state.cost_model
    if bound is None or cost is None or uvm is None:
        return "Why this GPU cannot go faster: no bound could be worked out for this session."
    gpu = s.environment.get("gpu", "this GPU")
    return (f"Why {gpu} cannot go faster: at this capacity any schedule must move at least "
            f"{format_bytes(bound.min_bytes_to_host)} out and back each iteration, and the driver migrates one "
            f"way at a time ({cost.evict_bytes_per_ns:.1f} GB/s out, {cost.prefetch_bytes_per_ns:.1f} GB/s in, "
            f"fitted to these runs): no schedule beats {format_ns(bound.lower_bound_ns)}, set by "
            f"{bound.set_by}. The searched schedule ({s.plan.policy}) takes {format_ns(split.iteration_ns)}: "
            f"{bound.versus(split.iteration_ns).split(',')[0]} and {times_than(split.iteration_ns, uvm, 'uvm')} "
            f"({format_ns(uvm)}); {format_ns(split.transfer_wait_ns)} of it still waits on transfers that "
            f"{format_ns(split.compute_ns)} of compute cannot hide.")


def _driver(state: AppState) -> str:
    s, split = _split_words(state)
    name = state.twin(s.plan.policy, Mechanism.UVM)
    bound, swap_cost = state.bound(), s.cost_model
    uvm = read_sample(name) if name is not None else None
    cost = uvm.cost_model if uvm is not None else None
    if uvm is None or cost is None or bound is None or swap_cost is None:
        return "What the driver costs: no calibrated run of this schedule through unified memory to set beside it."
    through = uvm.time_split()
    by_driver = lower_bound(s.graph, s.plan.capacity, cost, Mechanism.UVM)
    gpu = s.environment.get("gpu", "this GPU")
    same = ("the same schedule (the same tensors moved after the same ops)" if uvm.plan.moves == s.plan.moves
            else f"{s.plan.policy}'s schedule for each")
    return (f"What the driver costs: {same}, measured on {gpu}. Through unified memory an iteration takes "
            f"{format_ns(through.iteration_ns)}, the driver evicting at {cost.evict_bytes_per_ns:.1f} GB/s and "
            f"prefetching at {cost.prefetch_bytes_per_ns:.1f} GB/s, one way at a time. As pinned copies into "
            f"{_pool_words(s)} it takes {format_ns(split.iteration_ns)}, "
            f"{times_than(split.iteration_ns, through.iteration_ns, 'through the driver')}: copies move "
            f"{swap_cost.swap_to_host_bytes_per_ns:.1f} GB/s out and {swap_cost.swap_to_device_bytes_per_ns:.1f} "
            f"GB/s in, both ways at once. No schedule beats {format_ns(by_driver.lower_bound_ns)} through the "
            f"driver, or {format_ns(bound.lower_bound_ns)} with copies.")


def _pool_words(s: Session) -> str:
    """The device pool a swap run held, as the run recorded it (its first figure, in bytes)."""
    capacity = format_bytes(s.plan.capacity)
    try:
        pool = int(str(s.environment.get("swap_pool", "")).split()[0])
    except (IndexError, ValueError):
        return f"a pool of the capacity ({capacity})"
    if pool <= s.plan.capacity:
        return f"a pool of the capacity ({capacity})"
    beyond = format_bytes(pool - s.plan.capacity)
    return f"a pool of {format_bytes(pool)} (the capacity {capacity}, and {beyond} its placement needed beyond it)"


LESSON = (
    Step("1. Everything fits", "vgg19-b64-device.measured.vms", _fits),
    Step("2. Demand paging at 50%", "vgg19-b64-uvm-50pct.measured.vms", _uvm, lit=_most_faulted),
    Step("3. The same bytes, moved ahead of time", "vgg19-b64-autovm-50pct.measured.vms", _autovm,
         lit=_largest_moved),
    Step("4. A prefetch too late", "vgg19-b64-autovm-50pct.measured.vms", _late, late_prefetch=True,
         lit=_dragged),
    Step("5. The paging cliff", "vgg19-b64-uvm-50pct.measured.vms", _cliff, tab="Paging cliff"),
    Step("6. Why the GPU cannot go faster", "h200-vgg19-b64-tuned-50pct.measured.vms", _bound),
    Step("7. What the driver costs", "h200-vgg19-b64-belady-swap-50pct.measured.vms", _driver),
)


class ArrowKeys(JSComponent):
    """Left and right arrow keys, while this component is on screen and no text field has the focus:
    a lesson on a projector is stepped through from the keyboard (or a presenter's clicker, which
    sends the same keys). `pressed` counts the presses, -1 for left and +1 for right, as `last`."""

    last = param.Integer(default=0, doc="-1: left, +1: right (the last key pressed)")
    pressed = param.Integer(default=0, doc="how many arrow keys were pressed (each press changes it)")

    _esm = """
    export function render({ model, el }) {
      const box = document.createElement("span");
      const onkey = (e) => {
        const t = e.target;
        if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.isContentEditable)) { return; }
        if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") { return; }
        if (!box.isConnected || el.offsetParent === null) { return; }  // on a hidden tab: not for us
        model.last = e.key === "ArrowRight" ? 1 : -1;
        model.pressed = model.pressed + 1;
        e.preventDefault();
      };
      document.addEventListener("keydown", onkey);
      model.on("remove", () => document.removeEventListener("keydown", onkey));
      return box;
    }
    """


class Lesson(_OverState):
    """The guided lesson: each step opens a session, sets the view a class should look at (the tab, the
    time axis, the typical iteration, a tensor lit up) and says what it shows, in words large enough
    for a projector. It is a banner above the page's tabs while a step is on; `contents` is the tab
    that lists the steps. `step` is 1-based, so it reads well in a URL (`?step=3`); 0 is no lesson."""

    step = param.Integer(default=0, bounds=(0, len(LESSON)), doc="the step shown; 0: none")
    lit = param.Integer(default=None, allow_None=True, doc="the tensor the step lights up")
    tab = param.String(default="Session", doc="the tab the step is seen in")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.title = Text(styles={"font-size": "1.6em", "font-weight": "bold"})
        self.words = Text(styles={"font-size": "1.4em"}, sizing_mode="stretch_width")
        self.previous = widget(pn.widgets.Button, "Previous", width=110)
        self.next = widget(pn.widgets.Button, "Next", button_type="primary", width=110)
        self.close = widget(pn.widgets.Button, "End the lesson", width=140)
        self.previous.on_click(lambda *_: self._go(self.step - 1))
        self.next.on_click(lambda *_: self._go(self.step + 1))
        self.close.on_click(lambda *_: setattr(self, "step", 0))
        self.keys = ArrowKeys(height=0, width=0, margin=0)
        self.keys.param.watch(lambda *_: self._go(self.step + self.keys.last), "pressed")
        self.starts = [widget(pn.widgets.Button, f"▶ {s.title}", width=360, align="start") for s in LESSON]
        for i, button in enumerate(self.starts, start=1):
            button.on_click(lambda *_, i=i: setattr(self, "step", i))
        self._banner = pn.Column(pn.Row(self.previous, self.next, self.title, pn.layout.HSpacer(), self.close),
                                 self.words, self.keys, visible=False, sizing_mode="stretch_width",
                                 styles={"border-left": "6px solid #4c78a8", "padding-left": "12px"})
        self.param.watch(lambda *_: self.open_step(), "step")

    def _go(self, step: int) -> None:
        self.step = min(max(step, 1), len(LESSON))

    def open_step(self) -> bool:
        """Open this step's session (and edit), pick what it lights up, and say what it shows; step 0
        ends the lesson."""
        self._banner.visible = self.step > 0
        if not self.step:
            return True
        step = LESSON[self.step - 1]
        ok = self.app.load_sample(step.sample)
        if ok and step.late_prefetch:
            ok = _drag_costliest_prefetch_late(self.app)
        # the view first: whoever draws the page reads `lit` and `tab` when `step` has changed
        self.lit = step.lit(self.app) if ok and step.lit is not None else None
        self.tab = step.tab
        self.title.object = step.title
        self.words.object = step.words(self.app) if ok else self.app.message
        self.previous.disabled, self.next.disabled = self.step == 1, self.step == len(LESSON)
        return ok

    def contents(self) -> Any:
        """The lesson's tab: what it is, and a button per step (each step also has its link, `?step=N`)."""
        return pn.Column(
            pn.pane.Markdown(f"A guided lesson on GPU paging for a class, in {len(LESSON)} steps, each on a "
                             "session measured on a GPU. A step opens its view and says what it shows; the **Next** "
                             "and **Previous** buttons, or the ← and → keys, step through it."),
            *self.starts, sizing_mode="stretch_width")

    def __panel__(self) -> Any:
        return self._banner


def _drag_costliest_prefetch_late(state: AppState) -> bool:
    """Drag, as late as it may go, the prefetch whose lateness costs the iteration the most (each
    candidate re-planned and simulated with the session's cost model): the step shows the stall
    clearly, not the one prefetch that happens to be largest."""
    s = state.session
    assert s is not None and state.cost_model is not None
    worst: tuple[int, Any, int] | None = None
    for i, mv in enumerate(state.moves):
        if mv.prefetch_after is None:
            continue
        latest = state.marker_range("prefetch", mv.tensor, mv.prefetch_after)[1]
        if latest <= mv.prefetch_after:
            continue
        moves = [*state.moves[:i], replace(mv, prefetch_after=latest), *state.moves[i + 1:]]
        try:
            plan = compile_plan(s.graph, s.plan.capacity, "manual", moves=moves, mechanism=s.plan.mechanism)
        except PlanError:
            continue
        took = int(simulate(s.graph, plan, state.cost_model).iteration_ns().max())
        if worst is None or took > worst[0]:
            worst = (took, mv, latest)
    if worst is None:
        return state.fail("this session plans no prefetch that could be issued later")
    _, move, latest = worst
    return state.drag("prefetch", move.tensor, latest, move.prefetch_after)


pd: Any = importlib.import_module("pandas")  # Panel's own dependency (its tables take DataFrames); no stubs
_SELECTIONS = ("selected_op", "selected_tensor", "selected_memop")
_OP_COLUMNS = {"op": "#", "name": "op", "kind": "kind", "phase": "phase", "layer": "layer", "time_ms": "ms",
               "stall_ms": "waited ms", "fault_bytes": "faulted MiB"}
_TENSOR_COLUMNS = {"tensor": "#", "name": "tensor", "kind": "kind", "layer": "layer", "bytes": "MiB",
                   "producer": "made by", "uses": "uses", "offloaded": "offloaded", "evicted": "evicted",
                   "faulted": "faulted"}
_MIB_COLUMNS = ("fault_bytes", "bytes")
ALL_KINDS = "every kind"


def details_text(lines: details.Details) -> str:
    """(label, value) lines as a two-column text table, for a `Text` pane in a fixed-width font."""
    width = max((len(label) for label, _ in lines), default=0)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in lines)


def _frame(rows: list[dict[str, Any]], columns: dict[str, str]) -> Any:
    """Rows as the table shows them: its own column titles, bytes in MiB (numbers, so they sort)."""
    shown = [{title: round(r[key] / 2**20, 2) if key in _MIB_COLUMNS else r[key] for key, title in columns.items()}
             for r in rows]
    return pd.DataFrame(shown, columns=list(columns.values()))


class Finder(_OverState):
    """Find an op or a tensor by name, layer or kind; see what it did; zoom the timeline to it.

    A row clicked in a table sets `focus`, the (start, end) in ms from the iteration's start to zoom the
    time axis to, and shows its details. The page sets `selected_op`, `selected_tensor` or `selected_memop`
    (a row of the shown session's timeline memory operations) from a tap on the timeline, and the Finder
    shows that one's details. Rows are built once per session (and iteration)."""

    iteration = param.Integer(default=None, allow_None=True,
                              doc="the recorded iteration (from 0) the figures come from; None: the typical one")
    focus = param.Tuple(default=None, allow_None=True, length=2, doc="(start_ms, end_ms) to zoom the time axis to")
    selected_op = param.Integer(default=None, allow_None=True, doc="the op whose details are shown")
    selected_tensor = param.Integer(default=None, allow_None=True, doc="the tensor whose details are shown")
    selected_memop = param.Integer(default=None, allow_None=True,
                                   doc="the timeline row of the memory operation whose details are shown")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.search = widget(pn.widgets.TextInput, "Find", placeholder="search ops and tensors by name or layer",
                             max_length=details.MAX_QUERY_CHARS, sizing_mode="stretch_width")
        self.kind = widget(pn.widgets.Select, "Kind", options={ALL_KINDS: ""}, value="", width=200)
        table = {"disabled": True, "show_index": False, "selectable": 1, "height": 300, "pagination": None,
                 "sizing_mode": "stretch_width", "layout": "fit_data_stretch"}
        self.ops = pn.widgets.Tabulator(**table)
        self.tensors = pn.widgets.Tabulator(**table)
        self.tabs = pn.Tabs(("Ops", self.ops), ("Tensors", self.tensors), sizing_mode="stretch_width")
        self.count = Text(styles={"font-size": "0.85em"})
        self.details = Text(styles={"white-space": "pre-wrap", "font-family": "monospace", "font-size": "0.85em"},
                            width=460)
        self._rows: tuple[Any, int | None, list[dict[str, Any]], list[dict[str, Any]]] = (None, None, [], [])
        self._shown: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        self._quiet = False  # set while the Finder itself changes a table's selection
        self.search.param.watch(self._filter, "value_input")
        self.kind.param.watch(self._filter, "value")
        self.ops.param.watch(lambda e: self._on_row(e, "op"), "selection")
        self.tensors.param.watch(lambda e: self._on_row(e, "tensor"), "selection")
        self.param.watch(self._on_selected, list(_SELECTIONS))
        self.param.watch(self._rebuild, "iteration")
        # after the rest of the page: on a server the summary and the timeline of an edit reach the
        # browser first, and the tables (every op's and tensor's row) come in the next tick
        self.app.param.watch(lambda *_: pn.state.execute(self._rebuild, schedule=True), "session")
        self._rebuild()

    def _rebuild(self, *_: Any) -> None:
        """New rows for another session or iteration; another model forgets what was selected."""
        s, (was, was_iteration, _ops, _tensors) = self.app.session, self._rows
        if s is was and self.iteration == was_iteration:
            return
        ops: list[dict[str, Any]] = []
        tensors: list[dict[str, Any]] = []
        if s is not None:
            try:
                ops = details.op_rows(s, self.iteration)
            except ValueError:  # an iteration this session does not have: the typical one's figures
                ops = details.op_rows(s)
            tensors = details.tensor_rows(s)
        self._rows = (s, self.iteration, ops, tensors)
        self._kinds(ops, tensors)
        if s is not was:  # an edit keeps the graph, and the op or tensor picked; a transfer's row is another's
            same_graph = s is not None and was is not None and (s.graph is was.graph or s.graph == was.graph)
            with param.parameterized.discard_events(self):
                self.param.update({name: None for name in _SELECTIONS if not same_graph or name == "selected_memop"})
        self._filter()
        self._show()

    def _kinds(self, ops: list[dict[str, Any]], tensors: list[dict[str, Any]]) -> None:
        """The kinds this session has: passes and op kinds filter the ops, tensor kinds the tensors."""
        options = {ALL_KINDS: ""}
        options.update({f"{p} pass": p for p in dict.fromkeys(r["phase"] for r in ops)})
        options.update({f"op: {k}": k for k in sorted({r["kind"] for r in ops})})
        options.update({f"tensor: {k}": k for k in sorted({r["kind"] for r in tensors})})
        value = self.kind.value if self.kind.value in options.values() else ""
        self.kind.param.update(options=options, value=value)

    def _filter(self, *_: Any) -> None:
        """Show the rows that match the search and the kind (which applies to the table that has it)."""
        ops, tensors = self._rows[2:]
        text, kind = self.search.value_input or "", self.kind.value or ""
        op_kind = kind if any(kind in (r["kind"], r["phase"]) for r in ops) else ""
        tensor_kind = kind if any(kind == r["kind"] for r in tensors) else ""
        self._shown = (details.filter_rows(ops, text, op_kind), details.filter_rows(tensors, text, tensor_kind))
        self._quiet = True
        try:
            self.ops.param.update(value=_frame(self._shown[0], _OP_COLUMNS), selection=[])
            self.tensors.param.update(value=_frame(self._shown[1], _TENSOR_COLUMNS), selection=[])
        finally:
            self._quiet = False
        self.count.object = (f"{len(self._shown[0])} of {len(ops)} ops, "
                             f"{len(self._shown[1])} of {len(tensors)} tensors")

    def _on_row(self, event: Any, what: str) -> None:
        """A row clicked: show its details and zoom to where it ran (a tensor: from its first use to its last)."""
        rows = self._shown[0 if what == "op" else 1]
        if self._quiet or not event.new or event.new[0] >= len(rows) or self.app.session is None:
            return
        key = int(rows[event.new[0]][what])
        span = details.op_span_ms if what == "op" else details.tensor_span_ms
        try:
            window: tuple[float, float] | None = details.zoom_window(span(self.app.session, key, self.iteration))
        except ValueError:  # a tensor no op uses, or an iteration the session lacks: nothing to zoom to
            window = None
        setattr(self, f"selected_{what}", key)
        if window is not None:
            if self.focus == window:
                self.param.trigger("focus")  # the same row again, after a pan: zoom back to it
            self.focus = window

    def _on_selected(self, *events: Any) -> None:
        chosen = next((e for e in events if e.new is not None), None)
        if chosen is None:
            return
        with param.parameterized.discard_events(self):  # one thing is selected at a time
            self.param.update({name: None for name in _SELECTIONS if name != chosen.name})
        self._show()

    def _show(self) -> None:
        """The details of what is selected, and its row highlighted where the table shows it."""
        s = self.app.session
        lines: details.Details = []
        try:
            if s is not None and self.selected_op is not None:
                lines = details.op_details(s, self.selected_op, self.iteration)
            elif s is not None and self.selected_tensor is not None:
                lines = details.tensor_details(s, self.selected_tensor)
            elif s is not None and self.selected_memop is not None:
                lines = details.memop_details(s, self.selected_memop)
        except ValueError as e:  # an index from elsewhere that this session does not have
            lines = [("not found", str(e))]
        self.details.object = details_text(lines)
        self._quiet = True
        try:
            for table, rows, key, value in ((self.ops, self._shown[0], "op", self.selected_op),
                                            (self.tensors, self._shown[1], "tensor", self.selected_tensor)):
                table.selection = [i for i, r in enumerate(rows) if r[key] == value][:1]
        finally:
            self._quiet = False

    def __panel__(self) -> Any:
        finder = pn.Column(pn.Row(self.search, self.kind), self.count, self.tabs, sizing_mode="stretch_width")
        return pn.Row(finder, self.details, sizing_mode="stretch_width")


BEFORE_EDITS = "(the shown session as loaded, before edits)"


def sample_groups() -> dict[str, list[str]]:
    """The samples by the GPU they were measured on: a session from another GPU is another machine."""
    return {gpu if gpu in ("simulated", "unreadable") else f"measured on {gpu}": names
            for gpu, names in samples_by_gpu().items()}


def _run(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


ALL_ITERATIONS = "all"


class TimelinePanel(_OverState):
    """The shown session's timeline with its x axis and iteration pickers. A session is put into the
    drawn figures through their data sources where they can hold it (an edit's re-simulation), so a
    person's zoom survives, and drawn anew otherwise (another axis, a measured session). A marker
    dragged along x becomes `AppState.drag` (snapped, clamped and re-simulated there); a tap on an op
    or a transfer sets `selected_op` or `selected_memop`; `picked` is the tensor lit up, whoever picked it.

    `act` runs an action of the page; `in_document` makes a change to Bokeh models where the document
    allows it. Both default to running at once, as outside a server."""

    act = param.Callable(default=_run, doc="runs a state method as the page's actions run")
    in_document = param.Callable(default=_run, doc="makes a change to the figures where the document allows it")
    picked = param.Integer(default=None, allow_None=True, doc="the tensor lit up in the timeline")
    selected_op = param.Integer(default=None, allow_None=True, doc="the op a tap picked (graph op index)")
    selected_memop = param.Integer(default=None, allow_None=True,
                                   doc="the transfer a tap picked (a row of details.memop_rows)")
    shown_iteration = param.Integer(default=None, allow_None=True,
                                    doc="the recorded iteration drawn, from 0; None: the whole session")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        # time first: on the op axis every op is as wide as any other, and the stalls paging causes vanish
        self.x_axis = widget(pn.widgets.RadioButtonGroup, "x axis", options=["time", "op"], value="time")
        # a measured session holds several iterations; one at a time keeps pan and zoom light
        self.iteration = widget(pn.widgets.Select, "Iteration shown", options=[ALL_ITERATIONS], width=170)
        self.pane = pn.pane.Bokeh(sizing_mode="stretch_width")
        self.drawn: Session | None = None  # the session (or iteration of it) the figures show
        self._picking = False  # this panel is setting the iteration picker itself
        # each marker source's data as the server last set it: a drag is told apart from it
        self._marker_data: dict[str, dict[str, list[Any]]] = {}
        self._filling = False  # the server is refilling the sources: not a drag, not a tap
        self.x_axis.param.watch(lambda *_: self.draw(), "value")
        self.iteration.param.watch(lambda *_: self._on_iteration(), "value")
        self.param.watch(lambda e: self.in_document(lambda: self._highlight_now(e.new)), "picked")

    def __panel__(self) -> Any:
        return self.pane

    def show_session(self, s: Session) -> None:
        """A session newly shown: its iterations in the picker, the typical one chosen, and drawn."""
        if self.drawn is not None and self.drawn.graph.key != s.graph.key:
            self.picked = None  # a tensor of another graph: its number names nothing here
        n, timed = s.timeline.iterations, s.timeline.timed_iterations
        # the picker's own watchers still run (they send it to the browser), this panel's wait for the end
        self._picking = True
        try:
            # the iterations run with CUPTI's unified-memory counters on are named: they are slower
            self.iteration.options = {ALL_ITERATIONS: ALL_ITERATIONS, **{
                f"{i + 1}{' (UM counted)' if i >= timed else ''}": str(i + 1) for i in range(n)}} \
                if n > 1 else [ALL_ITERATIONS]
            self.iteration.value = str(s.timeline.typical_iteration() + 1) if n > 1 else ALL_ITERATIONS
        finally:
            self._picking = False
        self.iteration.visible = n > 1
        self.draw()
        self.shown_iteration = self.iteration_index()

    def iteration_index(self) -> int | None:
        """The recorded iteration shown, from 0; None when the whole session is."""
        v = self.iteration.value
        return None if v == ALL_ITERATIONS else int(v) - 1

    def draw(self) -> None:
        """Put the shown session (or its chosen iteration) into the figures: in place where they can hold
        it, drawn anew otherwise."""
        s = self.app.session
        if s is None:
            return
        shown, which = s, ""
        if self.iteration.value != ALL_ITERATIONS and s.timeline.iterations > 1:
            shown = iteration_view(s, int(self.iteration.value) - 1)
            which = f", iteration {self.iteration.value} of {s.timeline.iterations}"
            if int(self.iteration.value) > s.timeline.timed_iterations:
                which += " (unified memory counted: slower than the timed ones)"
        self.drawn = shown
        title = f"{self.app.origin}: {s.plan.policy} on {s.graph.model}, {s.timeline.source}{which}"
        loaded = self.app.loaded
        before = loaded.plan if loaded is not None and loaded.graph.key == s.graph.key else None
        fig, axis = self.pane.object, self.x_axis.value
        if fig is not None and can_update(fig, shown, axis):
            self.in_document(lambda: self._refill(fig, shown, axis, title, before))
            return
        fig = timeline_figure(shown, axis, editable=True, title=title, before=before)
        for kind in MARKER_KINDS:
            timeline_source(fig, f"{kind}_markers").on_change("data", self._on_marker_drag(kind))
        # a plot event, not a TapTool: the marker drag tool takes the tap gesture of the toolbar
        fig.children[0].on_event(Tap, self._on_tap)
        self._refill(fig, shown, axis, title, before, drawn=True)
        self.pane.object = fig

    def zoom_to(self, span_ms: tuple[float, float] | None) -> None:
        """Zoom the time axis to a span of the iteration shown (ms from its start), on time."""
        if span_ms is not None and self.x_axis.value != "time":
            self.x_axis.value = "time"  # draws anew, on time
        self.in_document(lambda: self._zoom_to_now(span_ms))

    def _refill(self, fig: Any, shown: Session, axis: str, title: str, before: Any, drawn: bool = False) -> None:
        """The figures' part of `draw`: their data (unless just `drawn` with it), what a drag is told apart
        from, and the tensor lit up."""
        self._filling = True
        try:
            if not drawn:
                update_timeline(fig, shown, axis, title, before)
            self._marker_data = {kind: {k: list(v) for k, v in timeline_source(fig, f"{kind}_markers").data.items()}
                                 for kind in MARKER_KINDS}
            highlight_tensor(fig, shown, axis, self.picked)
        finally:
            self._filling = False

    def _highlight_now(self, tensor: int | None) -> None:
        """Light up one tensor's transfers, markers and resident bytes (None: none); it stays lit through
        edits."""
        fig, s = self.pane.object, self.drawn
        if fig is not None and s is not None and not self._filling:
            self._filling = True  # the selections set here are not taps
            try:
                highlight_tensor(fig, s, self.x_axis.value, tensor)
            finally:
                self._filling = False

    def _on_marker_drag(self, kind: str) -> Any:
        """A PointDrawTool drag in the browser: find the marker whose x changed, turn its x into the op
        it is issued after, and drag it there in the state (which snaps, clamps and re-simulates)."""
        def changed(attr: str, old: Any, new: Any) -> None:
            s, before = self.drawn, self._marker_data.get(kind)
            if self._filling or s is None or before is None:
                return
            xs = list(new.get("x", []))
            if len(xs) != len(before["x"]):
                self.draw()  # a marker was deleted (Backspace): put it back
                return
            if [float(x) for x in new.get("x0", [])] != [float(x) for x in before["x0"]]:
                return  # the browser's copy of an earlier drawing, sent before the new one reached it
            # moved: now nearer another op boundary (on the time axis, half a millisecond can be several ops)
            shifted = [i for i, (a, b) in enumerate(zip(before["x"], xs)) if float(a) != float(b)]
            to = {i: issue_after_at(s, xs[i], self.x_axis.value, int(before["iteration"][i])) for i in shifted}
            moved = [i for i in shifted if to[i] != int(before["issue_after"][i])]
            if not moved:
                return
            i = moved[0]
            self.act(self.app.drag, kind, int(before["tensor_id"][i]), to[i], int(before["issue_after"][i]))
            # the browser sends a release twice (where the tool left the marker, then snapped to a boundary)
            # and the figures are refilled a tick later: the second must not drag it again
            before["x"], before["issue_after"][i] = xs, to[i]
            if self.app.message:
                self.draw()  # refused: draw the markers back where the plan has them
        return changed

    def _on_tap(self, event: Any) -> None:
        """A tap on an op or a transfer: which one goes to `selected_op` or `selected_memop`, and a
        transfer's tensor lights up."""
        s, drawn, fig = self.app.session, self.drawn, self.pane.object
        hit = None if s is None or drawn is None or fig is None else row_at(fig, event.x, event.y)
        if hit is None or s is None or drawn is None:
            return
        what, row = hit
        if what == "op":
            self._tapped("selected_op", int(drawn.timeline.op_index[row]))
            return
        it = self.iteration_index()
        memop = int(drawn.timeline.memop_index[row])
        self._tapped("selected_memop", row if it is None else details.memop_row(s, memop, it))
        self.picked = int(s.plan.memops[memop].tensor)

    def _tapped(self, name: str, value: int) -> None:
        """Say what a tap picked, once, even if it picked the same as the last tap (a person tapping it
        again after looking elsewhere wants it shown again)."""
        with param.parameterized.discard_events(self):
            setattr(self, name, value)
        self.param.trigger(name)

    def _on_iteration(self) -> None:
        """Another iteration picked: draw it (unless this panel is setting the picker for a session it
        draws anyway)."""
        if self._picking:
            return
        self.draw()
        self.shown_iteration = self.iteration_index()

    def _zoom_to_now(self, span_ms: tuple[float, float] | None) -> None:
        s, fig = self.drawn, self.pane.object
        if span_ms is None or s is None or fig is None:
            return
        start, end = details.zoom_window(span_ms)
        if self.iteration.value == ALL_ITERATIONS and s.timeline.iterations > 1:
            origin = details.iteration_spans(s).origin_ns / 1e6  # the typical iteration's
            start, end = start + origin, end + origin
        x_range = fig.children[0].x_range
        x_range.start, x_range.end = start, end


class Comparison(_OverState):
    """The shown session (A) beside another (B): where the time goes for each, their summaries side by
    side, the typical iteration of each on one time scale, and the time per op of each.

    `act` runs an action of the page (the page's own, which puts back what it showed if drawing the
    result fails); `in_document` makes a change to Bokeh models where the document allows it. Both
    default to running at once, as outside a server."""

    act = param.Callable(default=_run, doc="runs a state method as the page's actions run")
    in_document = param.Callable(default=lambda change: change(), doc="makes a change to the figures")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.pick = widget(pn.widgets.Select, "Compare the shown session (A) with (B)",
                           groups={"the shown session": [BEFORE_EDITS], **sample_groups()})
        self.upload = pn.widgets.FileInput(accept=".vms,.gz", multiple=False)
        self.go = widget(pn.widgets.Button, "Compare", button_type="primary", align="end")
        self.clear = widget(pn.widgets.Button, "Clear", align="end")
        self.fig = pn.pane.Bokeh(sizing_mode="stretch_width")
        self._compared: Session | None = None  # the B the comparison figure draws
        self.bars_figure = breakdown_figure([])
        # shown and hidden through a Column: Panel copies a Bokeh pane's own `visible` onto the figure and
        # fails on the figure's stylesheets then
        self.bars = pn.Column(pn.pane.Bokeh(self.bars_figure, sizing_mode="stretch_width"), visible=False,
                              sizing_mode="stretch_width")
        self.summary = pn.widgets.Tabulator(disabled=True, show_index=False, sizing_mode="stretch_width",
                                            layout="fit_data_stretch")
        self.deltas = pn.widgets.Tabulator(disabled=True, show_index=False, height=300, sizing_mode="stretch_width",
                                           pagination=None)
        self.note = Text()
        self.go.on_click(lambda *_: self._compare())
        self.clear.on_click(lambda *_: self.act(self.app.compare_with, None))
        self.upload.param.watch(self._on_upload, "value")

    def _compare(self) -> None:
        if self.pick.value == BEFORE_EDITS:
            self.act(self.app.compare_with, self.app.loaded, "as loaded")
        else:
            self.act(self.app.compare_with, SAMPLES / self.pick.value, self.pick.value)

    def _on_upload(self, event: Any) -> None:
        if event.new:
            self.act(self.app.compare_with, bytes(event.new), self.upload.filename or "the uploaded file")

    def draw(self) -> None:
        """Show A beside B, or say what to pick when there is no B."""
        a, b = self.app.session, self.app.comparison
        if a is None or b is None:
            if self._compared is None and self.note.object:
                return  # nothing was compared, nothing is: an edit leaves the Compare tab alone
            self.fig.object = None
            self._compared = None
            self.bars.visible = False
            self.summary.value = pd.DataFrame()
            self.deltas.value = pd.DataFrame()
            self.note.object = "Pick a session to compare with: the shown one is A."
            return
        self._draw_figures(a, b)
        self._compared = b
        self.bars.visible = True
        self.summary.value = pd.DataFrame(self.app.summary_delta_rows())
        rows = self.app.delta_rows()
        frame = pd.DataFrame([{**r, **{k: _ns(r[k]) for k in ("a_ns", "b_ns", "delta_ns")}} for r in rows])
        frame.columns = [c.replace("_ns", "") for c in frame.columns]
        self.deltas.value = frame
        aligned = "op index" if rows and rows[0]["op"] is not None else "layer (the graphs differ)"
        self.note.object = (f"A: {self.app.origin}. B: {self.app.comparison_origin}. "
                            f"Per op time per iteration (stall + run), aligned by {aligned}.")

    def _draw_figures(self, a: Session, b: Session) -> None:
        fig, top = self.fig.object, typical_iteration(a)
        title = f"A: {top.plan.policy} on {top.graph.model}, {top.timeline.source}, its typical iteration"
        rows_ab = self.app.compare_breakdown_rows()

        def refill(fig: Any = fig) -> None:  # the figures' part: their data, under the document's lock
            if fig is not None:
                update_timeline(fig.children[0], top, "time", title)
                x_range = fig.children[0].children[0].x_range
                x_range.end = max(x_range.end, 1.02 * float(top.timeline.op_end_ns.max(initial=0)) / 1e6)
            update_breakdown(self.bars_figure, rows_ab)

        # an edit of A with B unchanged: A's figures take the edit in place, as the Session tab's do
        if fig is None or self._compared is not b or not can_update(fig.children[0], top, "time"):
            self.fig.object = comparison_figure(a, b, ("A", f"B ({self.app.comparison_origin})"))
            update_breakdown(self.bars_figure, rows_ab)
        else:
            self.in_document(refill)

    def __panel__(self) -> Any:
        return pn.Column(self.note, pn.Row(self.pick, self.go, self.clear),
                         pn.Row(pn.pane.Markdown("or upload B:"), self.upload),
                         self.bars, self.summary, self.fig, self.deltas, sizing_mode="stretch_width")


def _ns(value: Any) -> str:
    return "" if value is None else format_ns(value)


FAKE_RUNNER_ENV = "VMEXPLORER_FAKE_RUNNER"  # tests only: module:function, a CPU stand-in for the GPU runner
POLL_MS = 500
CHECKING = "checking for a GPU"


def gpu_reason() -> str | None:
    """None when a GPU run can work here, else why not (the button says it), or CHECKING while the
    worker's GPU check (a subprocess, once per server, in the background) has not answered: CuPy never
    loads in the server and no page waits for the check."""
    if os.environ.get(FAKE_RUNNER_ENV):
        return None
    answer = worker.gpu_check()
    if answer is None:
        return CHECKING
    ok, why = answer
    return None if ok else why


def run_queue() -> worker.RunQueue:
    """The server's one run queue; with VMEXPLORER_FAKE_RUNNER set (tests), one over that runner."""
    spec = os.environ.get(FAKE_RUNNER_ENV)
    return _fake_queue(spec) if spec else worker.shared_queue()


@functools.cache
def _fake_queue(spec: str) -> worker.RunQueue:
    module, _, name = spec.partition(":")
    runner = getattr(importlib.import_module(module), name)
    queue = worker.RunQueue(runner=runner, grace_s=2.0)
    atexit.register(queue.close)
    return queue


def _every(callback: Any, period_ms: int) -> Any:
    """A periodic callback of this browser session, or None with no event loop (a page built outside
    a server)."""
    try:
        return pn.state.add_periodic_callback(callback, period=period_ms)
    except Exception:
        return None




class Configure(_OverState):
    """What to simulate: model, batch, capacity (with the least it can be), policy and the policy's
    options, each drawn from the registry. `set_to` sets them to a session's; Simulate compiles and
    simulates them through `AppState.simulate_config`."""

    act = param.Callable(default=_run, doc="runs a state method as the page's actions run")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.model = widget(pn.widgets.Select, "Model", options=list(MODELS))
        self.batch = widget(pn.widgets.IntInput, "Batch", start=1, value=64)
        self.capacity = widget(pn.widgets.TextInput, "Capacity (bytes, e.g. 3GiB, or % of the footprint)",
                               value="50%")
        self.capacity_help = Text(styles={"font-size": "0.85em"})
        self.policy = widget(pn.widgets.Select, "Policy", options=list(POLICIES), value="autovm")
        self.policy_help = Text(styles={"font-size": "0.85em"})
        self.mechanism = widget(pn.widgets.RadioButtonGroup, "Mechanism", options=[m.value for m in Mechanism],
                                value=Mechanism.UVM.value)
        self.mechanism_help = Text(styles={"font-size": "0.85em"}, object=(
            "uvm: unified memory; the driver faults data in and migrates one direction at a time. swap: a "
            "device pool of the capacity and pinned copies, both directions at once (simulated; the GPU "
            "engine runs uvm plans for now)"))
        self.knobs = pn.Column()
        self.knob_widgets: dict[str, Any] = {}
        self.knobs_for = ""  # the policy whose knobs are drawn
        self.simulate = widget(pn.widgets.Button, "Simulate", button_type="primary")
        self.simulate.on_click(lambda *_: self._simulate())
        self.policy.param.watch(lambda *_: self.draw_knobs(), "value")
        self.model.param.watch(lambda *_: self._draw_capacity_help(), "value")
        self.batch.param.watch(lambda *_: self._draw_capacity_help(), "value")

    def _simulate(self) -> None:
        options = {name: w.value for name, w in self.knob_widgets.items()}
        self.act(self.app.simulate_config, self.model.value, self.batch.value, self.capacity.value,
                 self.policy.value, options, self.mechanism.value)

    def set_to(self, s: Session) -> None:
        """Set every field to the session's configuration."""
        p = s.plan
        self.model.value, self.batch.value, self.policy.value = p.model, p.batch, p.policy
        self.mechanism.value = str(p.mechanism)
        self.capacity.value = capacity_text(p.capacity, s.graph.footprint)
        self.draw_knobs(p.options)
        self._draw_capacity_help(s.graph)  # the shown graph: a drag must not build it again

    def draw_knobs(self, values: Mapping[str, Any] | None = None) -> None:
        spec = POLICIES[self.policy.value]  # the loader holds a session's policy and options to the registry
        wanted = {name: (values or {}).get(name, opt.default) for name, opt in spec.options.items()}
        if self.knobs_for == spec.name and {n: w.value for n, w in self.knob_widgets.items()} == wanted:
            return  # an edit: the same knobs at the same values, and new widgets would be new models
        self.knobs_for = spec.name
        self.policy_help.object = spec.summary
        self.knob_widgets = {name: _knob(name, opt, wanted[name]) for name, opt in spec.options.items()}
        self.knobs.objects = list(self.knob_widgets.values())

    def _draw_capacity_help(self, graph: Graph | None = None) -> None:
        try:
            g = graph or build_graph(self.model.value, int(self.batch.value or 0))
        except (GraphError, ValueError, TypeError) as e:
            self.capacity_help.object = f"({e})"
            return
        need, op = g.min_capacity
        self.capacity_help.object = (f"minimum {format_bytes(need)} ({share_of_footprint(need, g.footprint):.0f}%, "
                                     f"{g.ops[op].name}); footprint {format_bytes(g.footprint)}")

    def __panel__(self) -> Any:
        return pn.Column(self.model, self.batch, self.capacity, self.capacity_help, self.policy, self.policy_help,
                         self.mechanism, self.mechanism_help, self.knobs, self.simulate, sizing_mode="stretch_width")


def _knob(name: str, opt: OptionSpec, value: Any) -> Any:
    label = f"{name.replace('_', ' ')}: {opt.help}"
    if opt.choices:
        return widget(pn.widgets.Select, label, options=list(opt.choices), value=value)
    if opt.type is bool:  # a text box would hand the policy "False", which bool() reads as True
        return widget(pn.widgets.Checkbox, label, value=bool(value))
    if opt.type is int:
        return widget(pn.widgets.IntInput, label, value=int(value), start=opt.minimum)
    if opt.type is float:
        return widget(pn.widgets.FloatInput, label, value=float(value))
    return widget(pn.widgets.TextInput, label, value=str(value))

class Editor(_OverState):
    """Edit the plan without the mouse: move a tensor's offload or prefetch marker to an op, undo every
    edit, add or drop a tensor's round trip from the table of tensors. Every edit goes through
    `AppState.drag` or `toggle_offload`, as a drag on the timeline does. `picked` is the tensor picked
    in the table, which the page lights up."""

    act = param.Callable(default=_run, doc="runs a state method as the page's actions run")
    picked = param.Integer(default=None, allow_None=True, doc="the tensor picked in the table")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.marker_kind = widget(pn.widgets.Select, "Marker", options=["prefetch", "offload"], width=110)
        self.marker_tensor = widget(pn.widgets.Select, "Tensor", options={}, width=220)
        self.marker_op = widget(pn.widgets.IntInput, "Issue after op", start=-1, width=120)
        self.marker_range = Text(styles={"font-size": "0.85em"})
        self.move = widget(pn.widgets.Button, "Move marker", button_type="primary", align="end")
        self.reset = widget(pn.widgets.Button, "Undo all edits", align="end")
        self.tensors = pn.widgets.Tabulator(disabled=True, show_index=False, selectable=1, height=300,
                                            sizing_mode="stretch_width", pagination=None)
        self.toggle = widget(pn.widgets.Button, "Add / remove the selected tensor's offload")
        self._tensor_rows: list[dict[str, Any]] = []  # what the tensor table shows
        self.move.on_click(lambda *_: self._move())
        self.reset.on_click(lambda *_: self.act(self.app.reset_edits))
        self.toggle.on_click(lambda *_: self._toggle())
        self.marker_kind.param.watch(lambda *_: self._draw_range(), "value")
        self.marker_tensor.param.watch(lambda *_: self._draw_range(), "value")
        self.tensors.param.watch(lambda *_: setattr(self, "picked", self._selected()), "selection")

    def _move(self) -> None:
        if self.marker_tensor.value is None:
            self.app.fail("pick a tensor with a planned round trip (the tensor table adds one)")
            return
        self.act(self.app.drag, self.marker_kind.value, self.marker_tensor.value, self.marker_op.value)

    def _toggle(self) -> None:
        tensor = self._selected()
        if tensor is None:
            self.app.fail("select a tensor in the table first")
            return
        self.act(self.app.toggle_offload, tensor)

    def _selected(self) -> int | None:
        """The tensor picked in the tensor table, if a row is picked."""
        rows, frame = self.tensors.selection, self.tensors.value
        if not rows or frame is None or "id" not in frame or rows[0] >= len(frame):
            return None
        return int(frame["id"].iloc[rows[0]])

    def draw(self) -> None:
        """The shown session's tensors and round trips."""
        s = self.app.session
        if s is None:
            return
        rows = self.app.tensor_rows()
        if rows != self._tensor_rows:  # an edit often moves no tensor in or out of the table's columns
            self._tensor_rows = rows
            self.tensors.value = pd.DataFrame(rows)
        g = s.graph
        moving = sorted({mv.tensor for mv in self.app.moves})
        self.marker_tensor.options = {f"{g.tensors[t].name} ({t})": t for t in moving}
        if self.marker_tensor.value not in moving:
            self.marker_tensor.value = moving[0] if moving else None
        self._draw_range()

    def _draw_range(self) -> None:
        t = self.marker_tensor.value
        if t is None or self.app.session is None:
            self.marker_range.object = ""
            return
        kind = self.marker_kind.value
        mv = next(mv for mv in self.app.moves if mv.tensor == t)
        now = mv.offload_after if kind == "offload" else mv.prefetch_after
        if now is None:
            self.marker_range.object = "this tensor is never prefetched"
            return
        lo, hi = self.app.marker_range(kind, t)
        self.marker_op.value = now
        self.marker_range.object = f"now after op {now}; it may go from {lo} to {hi}"

    def __panel__(self) -> Any:
        return pn.Column(
            pn.pane.Markdown("Drag a ▼ offload or ▲ prefetch marker along the x axis (the drag tool is "
                             "active), or move one here; each edit re-plans as a `manual` plan and re-simulates."),
            pn.Row(self.marker_kind, self.marker_tensor, self.marker_op, self.move, self.reset),
            self.marker_range, self.tensors, self.toggle, sizing_mode="stretch_width")

class GpuRun(_OverState):
    """Run the shown plan on the GPU: queued on the server's one queue (`worker.shared_queue`), followed
    with a progress bar while this page lasts, its measured session opened when it ends. `tab_open`
    says whether the page's browser tab is still there (`app.page` asks the server session); `act` runs
    the page's actions. Bokeh may call `close` after it has cleared the served script's module: this
    class lives outside it and names nothing of it."""

    act = param.Callable(default=_run, doc="runs a state method as the page's actions run")
    tab_open = param.Callable(default=lambda: True, doc="whether the page's browser tab is still there")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.iterations = widget(pn.widgets.IntInput, "GPU run: iterations", start=1, end=1000, value=5)
        self.run = widget(pn.widgets.Button, "Run on GPU", button_type="primary")
        self.reason = Text(styles={"font-size": "0.85em", "font-style": "italic"})
        self._gpu_waiter: Any = None
        self.progress = pn.indicators.Progress(value=0, max=1, visible=False, sizing_mode="stretch_width")
        self.note = Text(styles={"font-size": "0.85em"})
        self.cancel = widget(pn.widgets.Button, "Cancel the run", visible=False)
        self.job: int | None = None  # the GPU run this page waits for
        self._queue: worker.RunQueue | None = None  # the queue it waits in
        self._poller: Any = None
        self.run.on_click(self._on_run)
        self.cancel.on_click(self._on_cancel)
        self._draw_gpu_reason()

    def follow_gpu_check(self) -> None:
        """Show what the GPU check says now, and keep looking while it is still checking, in the session
        this view is shown in (a view made ahead of its session could not)."""
        self._stop_gpu_waiter()
        self._draw_gpu_reason()

    def _draw_gpu_reason(self) -> None:
        """Enable Run on GPU when the GPU check says yes; while it is still checking, look again each
        second (a page served before the check answered must not stay disabled)."""
        reason = gpu_reason()
        self.run.disabled = reason is not None or self.job is not None
        self.iterations.disabled = reason is not None
        self.run.description = reason or "run the shown plan on the GPU and open the measured session"
        self.reason.object = f"Run on GPU: {reason}{'…' if reason == CHECKING else '.'}" if reason else ""
        if reason == CHECKING and self._gpu_waiter is None:
            self._gpu_waiter = _every(self._draw_gpu_reason, 1000)
        elif reason != CHECKING:
            self._stop_gpu_waiter()

    def _stop_gpu_waiter(self) -> None:
        waiter, self._gpu_waiter = self._gpu_waiter, None
        self._stop(waiter)

    def close(self) -> None:
        """The browser tab is gone: cancel its GPU run (queued or running) and stop polling, so a closed
        tab does not hold the GPU for the next person. Bokeh may call this after it has cleared a served
        script's module, so this and what it calls name no module global, only what the view holds."""
        job, queue, self.job = self.job, self._queue, None
        self._stop_polling()
        self._stop_gpu_waiter()
        if job is not None and queue is not None:
            try:
                queue.cancel(job)
                queue.forget(job)  # a queued run has ended now; a running one stays known until it stops
            except Exception:  # already ended and forgotten, or the queue closed with the server
                pass

    @staticmethod
    def _stop(callback: Any) -> None:
        if callback is not None:
            try:
                callback.stop()
            except Exception:  # already stopped with its session
                pass

    def request(self) -> worker.RunRequest | None:
        """The shown plan as a GPU run, as edited: the plan itself, compiled once when it was shown."""
        s = self.app.session
        return None if s is None else worker.RunRequest(s.plan, int(self.iterations.value or 5))

    def _on_run(self, *_: Any) -> None:
        if self.job is not None:
            self.app.fail("a GPU run of this page is under way: wait for it or cancel it")
            return
        request = self.request()
        if request is None:
            self.app.fail("nothing to run: load or simulate a session first")
            return
        try:
            self._queue = run_queue()
            self.job = self._queue.submit(request)
        except Exception as e:  # a closed queue, a bad iteration count: say it, keep the state
            self.app.fail(f"the GPU run could not be queued ({type(e).__name__}): {e}")
            return
        self.app.message = ""
        self.run.disabled = True
        self.cancel.visible = True
        self.progress.visible = True
        self.progress.value, self.progress.max = 0, max(1, request.iterations)
        self.note.object = "queued"
        self._start_polling()

    def _start_polling(self) -> None:
        self._poller = _every(self._tick, POLL_MS)  # without a server the caller polls

    def _stop_polling(self) -> None:
        poller, self._poller = self._poller, None
        self._stop(poller)

    def _tick(self) -> None:
        if not self.tab_open():
            # Bokeh destroys a closed tab's session only once it has gone unused a while (15 s or more by
            # default), too late for the next person waiting for the GPU: the poll frees it instead
            self.close()
            return
        try:
            self.poll()
        except Exception as e:  # a bug must not leave the callback failing every half second
            self._end_run()
            self.app.fail(f"unexpected error while following the GPU run ({type(e).__name__}): {e}")

    def _on_cancel(self, *_: Any) -> None:
        if self.job is None:
            return
        try:
            self._run_queue().cancel(self.job)
        except KeyError:
            pass
        self.note.object = "cancelling"
        self.poll()

    def poll(self) -> worker.JobStatus | None:
        """Show the run's progress; when it has ended, open its session or say why not."""
        if self.job is None:
            self._stop_polling()
            return None
        try:
            st = self._run_queue().status(self.job)
        except Exception as e:  # the job was forgotten, the queue closed
            self._end_run()
            self.app.fail(f"the GPU run was lost ({type(e).__name__}): {e}")
            return None
        if st.state == "queued":
            self.note.object = f"queued: number {st.queue_position} in line for the GPU"
            return st
        if st.state == "running":
            self.progress.max = max(1, st.iterations)
            self.progress.value = min(st.iteration, self.progress.max)
            loss = "" if st.loss is None else f", loss {st.loss:.4f}"
            self.note.object = f"running: iteration {st.iteration} of {st.iterations}{loss}"
            return st
        self._end_run()
        if st.state == "done" and st.result is not None:
            name = f"GPU run {st.job_id}"
            self.act(self.app.show_measured, st.result, name)
            if not self.app.message:
                self.app.status = f"the GPU run finished ({st.message}); showing its measured session"
                self.note.object = f"done: {st.message}"
        elif st.state == "cancelled":
            self.note.object = f"cancelled: {st.message}"
            self.app.status = "the GPU run was cancelled; the page is as it was"
        else:
            self.note.object = "failed"
            self.app.fail(f"the GPU run failed: {st.message}")
        try:
            self._run_queue().forget(st.job_id)
        except Exception:
            pass
        return st

    def _run_queue(self) -> worker.RunQueue:
        """The queue this page's run went to."""
        return self._queue if self._queue is not None else run_queue()

    def _end_run(self) -> None:
        self._stop_polling()
        self.job = None
        self.run.disabled = False
        self.cancel.visible = False
        self.progress.visible = False

    def __panel__(self) -> Any:
        return pn.Column(self.iterations, self.run, self.reason, self.progress, self.note, self.cancel,
                         sizing_mode="stretch_width")
