"""Resident bytes over the iteration against the emulated capacity."""

from __future__ import annotations

from typing import Any

from bokeh.models import (
    ColumnDataSource,
    Range1d,
)
from bokeh.models.annotations import Label, Span
from bokeh.plotting import figure

from ..session import Session
from .axis import _Axis, _byte_unit


def _resident(session: Session, axis: _Axis, lanes: Any) -> Any:
    tl, capacity = session.timeline, session.plan.capacity
    top = max(capacity, int(tl.resident_bytes.max(initial=0)))
    scale, unit = _byte_unit(top)
    # a fixed range: the capacity line must show even when the resident bytes stay far below it
    f = figure(height=200, x_range=lanes.x_range, y_range=Range1d(start=0, end=1.08 * top / scale),
               x_axis_label=axis.label, sizing_mode="stretch_width", y_axis_label=f"resident ({unit})",
               tools="xpan,xwheel_zoom,box_zoom,reset")
    src = ColumnDataSource({"x": axis.x(tl.resident_t_ns), "y": tl.resident_bytes / scale})
    f.varea_step(x="x", y1=0, y2="y", step_mode="after", source=src, fill_color="#9ecae1",
                 fill_alpha=0.6, name="resident")
    f.step(x="x", y="y", mode="after", source=src, color="#3182bd")
    f.add_layout(Span(location=capacity / scale, dimension="width", line_color="#d62728",
                      line_dash="dashed", line_width=2, name="capacity"))
    f.add_layout(Label(x=6, x_units="screen", y=capacity / scale, text="capacity", text_color="#d62728",
                       text_font_size="9pt", y_offset=3))
    return f
