"""The timeline panel: the shown session's timeline, its x axis and iteration pickers. The figures are
built once and every session goes into them through their data sources (`plots.timeline`), so the
browser keeps its models; an edit keeps a person's zoom, another session is shown whole.

A marker dragged along x becomes `AppState.drag` (snapped, clamped and re-simulated there); a tap on an
op or a transfer sets `selected` (what the Finder shows) and lights a transfer's tensor up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import panel as pn
import param
from bokeh.events import Tap

from .. import details
from ..plots import timeline as plot
from ..plots.axis import set_type_size
from ..plots.timeline import highlight_tensor, issue_after_at, row_at, timeline_figure, timeline_source, update_timeline
from ..session import Session
from ..session.iterations import iteration_view
from .edits import MARKER_KINDS
from .state import ALL_ITERATIONS, AppState, store_param
from .widgets import widget


def _now(method: Callable[..., Any], *args: Any) -> None:
    method(*args)


class TimelinePanel(pn.viewable.Viewer):
    """The timeline of the shown session (or of its iteration picked) on the axis picked.

    `act` runs an action of the page (which puts back what it showed if drawing the result fails),
    `act_held` one from a Bokeh callback (a drag); `later` makes a change in the browser's next message
    (`ui.document`). All default to at once, as outside a server."""

    state: AppState = store_param()
    act = param.Callable(default=_now, doc="runs a store method as the page's actions run")
    act_held = param.Callable(default=_now, doc="runs a store method from a Bokeh callback, which holds the "
                              "document's lock: the first of what it draws is made in that lock")
    later = param.Callable(default=_now, doc="makes a change of the figures in a later message to the browser")
    selected = param.Tuple(default=None, allow_None=True, length=2,
                           doc="what a tap picked: ('op', graph op) or ('memop', a row of details.memop_rows)")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        # time first: on the op axis every op is as wide as any other, and the stalls paging causes vanish
        self.x_axis = pn.widgets.RadioButtonGroup.from_param(self.state.param.axis, name="x axis")
        # a measured session holds several iterations; one at a time keeps pan and zoom light
        self.iteration = widget(pn.widgets.Select, "Iteration shown", options=[ALL_ITERATIONS], width=150)
        self.pane = pn.pane.Bokeh(sizing_mode="stretch_width", min_height=420)
        self.drawn: Session | None = None  # the session (or iteration of it) the figures show
        self._drawn_as: tuple[Any, ...] = ()  # what it was drawn from: an edit of it keeps the zoom
        # each marker source's data as the server last set it: a drag is told apart from it
        self._marker_data: dict[str, dict[str, list[Any]]] = {}
        self._filling = False  # the server is refilling the sources: not a drag, not a tap
        self._large = False
        pn.bind(self._pick_iteration, self.iteration, watch=True)

    def __panel__(self) -> Any:
        return self.pane

    def _pick_iteration(self, value: str) -> None:
        if value != self.state.iteration and not self._filling:
            self.state.iteration = value

    def draw(self) -> None:
        """Put the shown session (or its picked iteration) into the figures, and the pickers to it."""
        s = self.state.session
        if s is None:
            return
        self._filling = True
        try:
            self._draw_pickers(s)
            self._draw_figures(s)
        finally:
            self._filling = False

    def _draw_pickers(self, s: Session) -> None:
        n, timed = s.timeline.iterations, s.timeline.timed_iterations
        # the iterations run with CUPTI's unified-memory counters on are named: they are slower
        options = {ALL_ITERATIONS: ALL_ITERATIONS, **{f"{i + 1}{' (UM counted)' if i >= timed else ''}": str(i + 1)
                                                      for i in range(n)}} if n > 1 else [ALL_ITERATIONS]
        it = self.state.shown_iteration()
        self.iteration.param.update(options=options, value=ALL_ITERATIONS if it is None else str(it + 1),
                                    visible=n > 1)

    def _draw_figures(self, s: Session) -> None:
        it, axis = self.state.shown_iteration(), self.state.axis
        shown, which = (s, "") if it is None else (iteration_view(s, it), f", iteration {it + 1} of "
                                                                        f"{s.timeline.iterations}")
        if it is not None and it >= s.timeline.timed_iterations:
            which += " (unified memory counted: slower than the timed ones)"
        title = f"{s.plan.policy} on {s.graph.model}, {s.timeline.source}{which}"
        loaded = self.state.loaded
        before = loaded.plan if loaded is not None and loaded.graph.key == s.graph.key else None
        # an edit of the session shown, on the same axis, keeps the zoom: one iteration is drawn from its own
        # start whichever it is, all of several are not
        drawn_as = (loaded, axis, it is None and s.timeline.iterations > 1)
        fig = self.pane.object
        if fig is None:
            fig = timeline_figure(shown, axis, editable=True, title=title, before=before)
            for kind in MARKER_KINDS:
                timeline_source(fig, f"{kind}_markers").on_change("data", self._on_marker_drag(kind))
            # a plot event, not a TapTool: the marker drag tool takes the tap gesture of the toolbar
            fig.children[0].on_event(Tap, self._on_tap)
            self.pane.object = fig
            self.set_large(self._large)
        else:
            update_timeline(fig, shown, axis, title, before, keep_zoom=drawn_as == self._drawn_as, legend=False)
            self.later(self._label_legend)
        self.drawn, self._drawn_as = shown, drawn_as
        self._marker_data = {kind: {k: list(v) for k, v in timeline_source(fig, f"{kind}_markers").data.items()}
                             for kind in MARKER_KINDS}
        highlight_tensor(fig, shown, axis, self.state.picked)

    def _label_legend(self) -> None:
        if self.pane.object is not None and self.drawn is not None:
            plot.label_legend(self.pane.object, self.drawn)

    def highlight(self) -> None:
        """Light up the picked tensor's transfers, markers and resident bytes (None: none)."""
        fig, s = self.pane.object, self.drawn
        if fig is not None and s is not None:
            self._filling = True  # the selections set here are not taps
            try:
                highlight_tensor(fig, s, self.state.axis, self.state.picked)
            finally:
                self._filling = False

    def zoom_to(self, span_ms: tuple[float, float] | None) -> None:
        """Zoom the time axis to a span of the iteration shown (ms from its start)."""
        s, fig = self.drawn, self.pane.object
        if span_ms is None or s is None or fig is None or self.state.axis != "time":
            return
        start, end = span_ms
        if self.state.shown_iteration() is None and s.timeline.iterations > 1:
            origin = details.iteration_spans(s).origin_ns / 1e6  # the typical iteration's
            start, end = start + origin, end + origin
        fig.children[0].x_range.update(start=start, end=end)

    def set_large(self, large: bool) -> None:
        """Large type for a projector: the lanes taller, their legend in more rows, so the words fit."""
        self._large = large
        fig = self.pane.object
        if fig is None:
            return
        set_type_size(fig, large)
        lanes, faults, resident = fig.children[:3]
        lanes.height, faults.height, resident.height = (260, 120, 220) if large else (190, 90, 165)
        for legend in (*lanes.above, *resident.above):
            if type(legend).__name__ == "Legend":
                legend.nrows = 3 if large else 2

    def _on_marker_drag(self, kind: str) -> Any:
        """A PointDrawTool drag in the browser: find the marker whose x changed, turn its x into the op
        it is issued after, and drag it there in the store (which snaps, clamps and re-simulates)."""
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
            to = {i: issue_after_at(s, xs[i], self.state.axis, int(before["iteration"][i])) for i in shifted}
            moved = [i for i in shifted if to[i] != int(before["issue_after"][i])]
            if not moved:
                return
            i = moved[0]
            # the browser sends a release twice (where the tool left the marker, then snapped to a boundary)
            # and the figures are refilled a tick later: the second must not drag it again
            tensor, was = int(before["tensor_id"][i]), int(before["issue_after"][i])
            before["x"], before["issue_after"][i] = xs, to[i]
            self.act_held(self.state.drag, kind, tensor, to[i], was)
            if self.state.message:
                self.draw()  # refused: draw the markers back where the plan has them
        return changed

    def _on_tap(self, event: Any) -> None:
        """A tap on an op or a transfer: which one goes to `selected`, and a transfer's tensor lights up."""
        s, drawn, fig = self.state.session, self.drawn, self.pane.object
        hit = None if s is None or drawn is None or fig is None else row_at(fig, event.x, event.y)
        if hit is None or s is None or drawn is None:
            return
        what, row = hit
        if what == "op":
            self._tapped(("op", int(drawn.timeline.op_index[row])))
            return
        it = self.state.shown_iteration()
        memop = int(drawn.timeline.memop_index[row])
        self._tapped(("memop", row if it is None else details.memop_row(s, memop, it)))
        self.state.picked = int(s.plan.memops[memop].tensor)

    def _tapped(self, value: tuple[str, int]) -> None:
        """Say what a tap picked, once, even if it picked the same as the last tap (a person tapping it
        again after looking elsewhere wants it shown again)."""
        with param.parameterized.discard_events(self):
            self.selected = value
        self.param.trigger("selected")
