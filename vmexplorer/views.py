"""The app's story panels, as Panel components over one `AppState`: the headline, where the time goes
beside the baselines, the paging cliff and a guided lesson. Each builds its Bokeh figure once and, when the state
shows another session, puts the new numbers into the figure's data sources, so a browser keeps one
set of models and a person's zoom.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any

import panel as pn
import param

from .appstate import AppState, times_than
from .records.breakdown import PARTS as BREAKDOWN_PARTS
from .simulator import simulate
from .timeline import breakdown_figure, sweep_figure, update_breakdown, update_sweep
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
    device = next((r for r in state.breakdown_rows() if r["policy"] == "device"), None)
    against = "" if device is None else f", {times_than(split.iteration_ns, device['iteration_ns'], 'device')}"
    parts = sorted(((getattr(split, key), label) for key, label in BREAKDOWN_PARTS[1:]), reverse=True)
    most = f"; {format_ns(parts[0][0])} of it {parts[0][1]}" if parts and parts[0][0] > 0 else ""
    p = s.plan
    return (f"{p.model} batch {p.batch}, {p.policy}: {format_ns(split.iteration_ns)} per iteration "
            f"({s.timeline.source}){against}{most}")


class WhereTimeGoes(pn.viewable.Viewer):
    """The headline and the stacked bars of this session and its baselines."""

    state = param.ClassSelector(class_=AppState)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not isinstance(self.state, AppState):
            raise TypeError("a story panel needs the page's AppState")
        self.app: AppState = self.state
        self.headline = Text(headline(self.app), styles={"font-size": "1.3em", "font-weight": "bold"},
                             sizing_mode="stretch_width")
        self.figure = breakdown_figure(self.app.breakdown_rows())
        self.bars = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")
        self.app.param.watch(self._update, "session")

    def _update(self, *_: Any) -> None:
        self.headline.object = headline(self.app)
        update_breakdown(self.figure, self.app.breakdown_rows())

    def __panel__(self) -> Any:
        return pn.Column(self.headline, self.bars, sizing_mode="stretch_width")


class PagingCliff(pn.viewable.Viewer):
    """Iteration time against capacity for every policy; tapping a point opens that configuration.
    A sweep simulates dozens of plans, so it is drawn only once the page shows it (`live`)."""

    state = param.ClassSelector(class_=AppState)
    live = param.Boolean(default=False, doc="whether the page shows the cliff, so it follows the session")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not isinstance(self.state, AppState):
            raise TypeError("a story panel needs the page's AppState")
        self.app: AppState = self.state
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
    """One step of the lesson: what it opens, and its words, written from the numbers it shows."""

    title: str
    sample: str  # the sample session it opens
    words: Callable[[AppState], str]
    late_prefetch: bool = False  # drag the largest prefetch as late as it may go


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
            f"{format_ns(split.compute_ns)}.")


def _autovm(state: AppState) -> str:
    s, split = _split_words(state)
    moved = s.summary["bytes_to_host"]
    return (f"Same capacity, AutoVM: it reads the training graph and offloads {format_bytes(int(moved))} of "
            f"feature maps during forward, prefetching them before backward needs them. "
            f"{format_ns(split.iteration_ns)} per iteration, {format_ns(split.fault_wait_ns)} waiting on faults.")


def _late(state: AppState) -> str:
    s, split = _split_words(state)
    before = state.loaded
    assert before is not None and state.cost_model is not None
    unedited = int(simulate(before.graph, before.plan, state.cost_model).iteration_ns().max())
    return (f"Drag a prefetch later, here as late as it may go, and its wait shows: {state.status}. "
            f"The iteration takes {format_ns(split.iteration_ns)} instead of {format_ns(unedited)}, both "
            f"simulated with this session's cost model; {format_ns(split.transfer_wait_ns)} of it waiting on "
            "transfers.")


def _cliff(state: AppState) -> str:
    lines = {line["policy"]: line for line in state.capacity_sweep()["lines"]}
    uvm, device = lines.get("uvm"), lines.get("device")
    if uvm is None or device is None or not uvm["iteration_ms"] or not device["iteration_ms"]:
        return "The paging cliff: iteration time against capacity, one line per policy."
    worst = uvm["iteration_ms"][0] / device["iteration_ms"][0]
    return (f"The paging cliff: at the least memory VGG-19 runs in ({uvm['capacity_pct'][0]:.0f}% of its "
            f"footprint), uvm is {worst:.1f}x slower than device. The diamonds are runs measured on the GPU; "
            "tap one to open it.")


LESSON = (
    Step("1. Everything fits", "vgg19-b64-device.measured.vms", _fits),
    Step("2. Demand paging at 50%", "vgg19-b64-uvm-50pct.measured.vms", _uvm),
    Step("3. The same bytes, moved ahead of time", "vgg19-b64-autovm-50pct.measured.vms", _autovm),
    Step("4. A prefetch too late", "vgg19-b64-autovm-50pct.measured.vms", _late, late_prefetch=True),
    Step("5. The paging cliff", "vgg19-b64-uvm-50pct.measured.vms", _cliff),
)


class Lesson(pn.viewable.Viewer):
    """The guided lesson: each step opens a session and says what it shows, in words large enough for
    a projector. `step` is 1-based, so it reads well in a URL (`?step=3`)."""

    state = param.ClassSelector(class_=AppState)
    step = param.Integer(default=1, bounds=(1, len(LESSON)))

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if not isinstance(self.state, AppState):
            raise TypeError("the lesson needs the page's AppState")
        self.app: AppState = self.state
        self.title = Text(styles={"font-size": "1.6em", "font-weight": "bold"})
        self.words = Text(styles={"font-size": "1.4em"}, sizing_mode="stretch_width")
        self.previous = widget(pn.widgets.Button, "Previous", width=110)
        self.next = widget(pn.widgets.Button, "Next", button_type="primary", width=110)
        self.previous.on_click(lambda *_: self._go(self.step - 1))
        self.next.on_click(lambda *_: self._go(self.step + 1))
        self.param.watch(lambda *_: self.open_step(), "step")

    def _go(self, step: int) -> None:
        self.step = min(max(step, 1), len(LESSON))

    def open_step(self) -> bool:
        """Open this step's session (and edit), and say what it shows."""
        step = LESSON[self.step - 1]
        ok = self.app.load_sample(step.sample)
        if ok and step.late_prefetch:
            ok = _drag_largest_prefetch_late(self.app)
        self.title.object = step.title
        self.words.object = step.words(self.app) if ok else self.app.message
        self.previous.disabled, self.next.disabled = self.step == 1, self.step == len(LESSON)
        return ok

    def __panel__(self) -> Any:
        return pn.Column(pn.Row(self.previous, self.next, self.title), self.words, sizing_mode="stretch_width")


def _drag_largest_prefetch_late(state: AppState) -> bool:
    s = state.session
    assert s is not None
    later = [(mv, state.marker_range("prefetch", mv.tensor, mv.prefetch_after)[1]) for mv in state.moves
             if mv.prefetch_after is not None]
    later = [(mv, latest) for mv, latest in later if latest > (mv.prefetch_after or 0)]
    if not later:
        return state.fail("this session plans no prefetch that could be issued later")
    move, latest = max(later, key=lambda ml: s.graph.tensors[ml[0].tensor].nbytes)
    return state.drag("prefetch", move.tensor, latest, move.prefetch_after)
