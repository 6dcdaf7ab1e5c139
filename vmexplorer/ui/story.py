"""The story of the shown session in one sentence and one figure: the headline (its iteration time, against
`device`, where most of it went; after an edit, against the same schedule unedited) and where the time
goes, beside every other policy's baseline, with the bound drawn as a line."""

from __future__ import annotations

from typing import Any

import panel as pn

from ..plots import breakdown_figure, update_breakdown
from ..plots.axis import set_type_size
from ..records.breakdown import PARTS as BREAKDOWN_PARTS
from ..session.samples import config_words, short_gpu
from ..units import format_ns
from . import numbers
from .state import AppState, store_param
from .widgets import Text, tip, type_sizes

BARS_HEIGHT = 330  # beside the timeline on a 1280x720 screen: the story's first screen


def headline(state: AppState) -> str:
    """One sentence a class reads first: the configuration, its iteration time against device and where
    most of it went; after an edit, the edit's effect against the same schedule unedited, both simulated
    with one cost model."""
    s = state.session
    if s is None:
        return ""
    p, split = s.plan, s.time_split()
    what = config_words(p.model, p.batch, p.policy, p.mechanism, p.capacity, s.graph.footprint)
    gpu = s.environment.get("gpu")
    where = f"measured on the {short_gpu(str(gpu))}" if s.timeline.source == "measured" and gpu else s.timeline.source
    was = state.unedited()
    if was is not None:
        before = was.time_split().iteration_ns
        delta = split.iteration_ns - before
        return (f"{what}: {format_ns(split.iteration_ns)} per iteration ({where}), {'+' if delta >= 0 else '-'}"
                f"{format_ns(abs(delta))} against the same schedule unedited ({format_ns(before)}, simulated with "
                "the same cost model)")
    device = None if p.policy == "device" else numbers.baseline(state, "device")
    against = "" if device is None else f", {numbers.times_than(split.iteration_ns, device.iteration_ns, 'device')}"
    parts = sorted(((getattr(split, key), label) for key, label in BREAKDOWN_PARTS if key != "compute_ns"),
                   reverse=True)
    most = f"; {format_ns(parts[0][0])} of it {parts[0][1]}" if parts and parts[0][0] > 0 else ""
    return f"{what}: {format_ns(split.iteration_ns)} per iteration ({where}){against}{most}"


class Headline(pn.viewable.Viewer):
    """The headline, in large type."""

    state: AppState = store_param()

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.text = Text(headline(self.state), sizing_mode="stretch_width", margin=(4, 10),
                         styles={"font-weight": "bold", "font-size": type_sizes(False)["headline"]})
        self._layout = pn.Row(self.text, tip("bound", "demand fault", "eviction", "prefetch", "recompute"),
                              sizing_mode="stretch_width")

    def draw(self) -> None:
        self.text.object = headline(self.state)

    def set_large(self, large: bool) -> None:
        self.text.styles = {**self.text.styles, "font-size": type_sizes(large)["headline"]}

    def __panel__(self) -> Any:
        return self._layout


class WhereTimeGoes(pn.viewable.Viewer):
    """The stacked bars of this session and its baselines, with the bound as a line: built once, fed new
    rows through the figure's data sources."""

    state: AppState = store_param()

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.figure = breakdown_figure(numbers.breakdown_rows(self.state), _bound_ms(self.state), BARS_HEIGHT)
        self.pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")

    def draw(self) -> None:
        update_breakdown(self.figure, numbers.breakdown_rows(self.state), _bound_ms(self.state))

    def set_large(self, large: bool) -> None:
        set_type_size(self.figure, large)
        self.figure.height = 460 if large else BARS_HEIGHT

    def __panel__(self) -> Any:
        return self.pane


def _bound_ms(state: AppState) -> float | None:
    b = numbers.bound(state)
    return None if b is None else b.lower_bound_ns / 1e6
