"""What the collectors recorded, drawn under the modelled lanes: CUPTI's migrations per op and NVML's
PCIe throughput, and a note in place of any collector that did not run."""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np
from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    HoverTool,
    Quad,
)
from bokeh.models.widgets import Div
from bokeh.plotting import figure

from ..records.collected import migration_shares, per_op
from ..session import Session
from ..units import format_bytes, format_ns
from .axis import MEMOP_COLORS, Axis, add_renderer, byte_unit, op_columns, plain_title, refill, texts


def measured_figures(lanes: Any) -> list[Any]:
    """The parts under the modelled lanes that show what the collectors recorded, empty and hidden
    until `update_measured` fills them: a note naming any collector that did not run (an empty lane
    would read as "nothing happened"), CUPTI's migrations per op, NVML's PCIe throughput. Built once,
    so another session goes into the same figures."""
    notes = Div(text="", name="collector_notes", disable_math=True, visible=False, sizing_mode="stretch_width")
    return [notes, _migrations_figure(lanes), _pcie_figure(lanes)]


def update_measured(parts: list[Any], session: Session, axis: Axis) -> None:
    """Show what the collectors recorded of `session` in `measured_figures`' parts; a simulated session
    (an edit's) recorded nothing: they are hidden."""
    notes, migrations, pcie = parts
    c = session.collected
    measured = session.timeline.source == "measured"
    # a status's name and reason come from the file: escaped, and no TeX (a Div renders both)
    missing = [] if c is None else [f"<b>{escape(COLLECTOR_LABELS.get(st.name, st.name))}</b>: {escape(st.reason)}"
                                    for st in c.status if not st.available]
    notes.text = ("<i>Recorded without collectors: no CUPTI or NVML lanes.</i>" if c is None else
                  "<i>Not recorded here</i> " + "; ".join(missing))
    notes.visible = measured and (c is None or bool(missing))
    migrations.visible = measured and c is not None and c.available("um")
    if migrations.visible:
        _fill_migrations(migrations, session, axis)
    pcie.visible = measured and c is not None and c.available("nvml") and bool(len(c.nvml_t_ns))
    if pcie.visible:
        _fill_pcie(pcie, session, axis)


# what a collector status names, in words for the page (the names are the session file's)
COLLECTOR_LABELS = {"cupti": "CUPTI", "cupti_um": "CUPTI's migration counters",
                    "cupti_faults": "CUPTI's page-fault records", "cupti_kernels": "CUPTI's kernel records",
                    "cupti_memcpy": "CUPTI's memory-copy records", "nvml": "NVML", "nvtx": "NVTX"}


def _coverage(session: Session) -> str:
    """How much of what the run moved CUPTI's records account for, so a lane short of records never
    reads as fewer bytes moved."""
    assert session.collected is not None
    shares = migration_shares(session.plan, session.timeline, session.collected)
    if not shares:
        return ""
    if all(v >= 0.99 for v in shares.values()):
        return ": every byte the run moved"
    parts = [f"{100 * shares[k]:.0f}% {way}" for k, way in (("htod_share", "in"), ("dtoh_share", "out"))
             if k in shares]
    return (f": only {' and '.join(parts)} of the bytes moved (CUPTI silently loses records of pages coming back "
            "to the GPU, and of the faults that brought them: its fault counts are a lower bound)")


_MIGRATION_COLUMNS = ("left", "right", "top", "bottom", "name", "htod", "dtoh", "groups", "pages", "kernels")
_MIGRATION_TIPS = [("op", "@name"), ("to device", "@htod"), ("to host", "@dtoh"), ("fault groups", "@groups"),
                   ("faulted pages", "@pages"), ("kernel time", "@kernels")]


def _migrations_figure(lanes: Any) -> Any:
    """CUPTI's bytes each way per op: to the device up, to the host down."""
    fig = figure(height=140, x_range=lanes.x_range, sizing_mode="stretch_width", tools="", toolbar_location=None,
                 y_axis_label="CUPTI", title=plain_title(""), name="migrations", visible=False)
    renderers = [add_renderer(fig, Quad(left="left", right="right", bottom="bottom", top="top", fill_color=color,
                                        line_color=color),
                               ColumnDataSource({k: [] for k in _MIGRATION_COLUMNS}, name=name), name=name)
                 for name, color in (("measured_htod", MEMOP_COLORS["prefetch"]),
                                     ("measured_dtoh", MEMOP_COLORS["offload"]))]
    fig.add_tools(HoverTool(renderers=renderers, tooltips=_MIGRATION_TIPS))
    fig.xaxis.visible = False
    fig.yaxis.ticker = BasicTicker(desired_num_ticks=3)
    return fig


def _fill_migrations(fig: Any, session: Session, axis: Axis) -> None:
    """Each transfer CUPTI recorded, shared among the ops it ran under."""
    tl, c = session.timeline, session.collected
    assert c is not None
    f = per_op(session.graph, tl, c)
    cols = op_columns(session, axis)
    htod, dtoh = f["window_bytes_htod"], f["window_bytes_dtoh"]
    scale, unit = byte_unit(int(max(htod.max(initial=0), dtoh.max(initial=0))))
    fig.title.text.text = "CUPTI's migrations per op, to device up, to host down" + _coverage(session)
    fig.yaxis.axis_label = f"CUPTI ({unit})"

    def shown(table: str, texts: Any) -> Any:  # a column, or "not recorded" where its collector was off
        return texts() if c.available(table) else np.full(len(htod), "not recorded", dtype=object)

    base = {"left": cols["left"], "right": cols["right"], "name": cols["name"],
            "htod": texts(format_bytes, np.rint(htod).astype(np.int64)),
            "dtoh": texts(format_bytes, np.rint(dtoh).astype(np.int64)),
            "groups": shown("faults", lambda: f["fault_groups"].astype(str)),
            "pages": shown("faults", lambda: f["faulted_pages"].astype(str)),
            "kernels": shown("kernel", lambda: texts(format_ns, f["kernel_ns"]))}
    for name, top, bottom in (("measured_htod", htod / scale, 0 * htod), ("measured_dtoh", 0 * dtoh, -dtoh / scale)):
        keep = top > bottom
        source = next(r.data_source for r in fig.renderers if r.name == name)
        refill(source, {**{k: v[keep] for k, v in base.items()}, "top": top[keep], "bottom": bottom[keep]})


def _pcie_figure(lanes: Any) -> Any:
    fig = figure(height=120, x_range=lanes.x_range, sizing_mode="stretch_width", tools="", toolbar_location=None,
                 y_axis_label="PCIe (GB/s)", title=plain_title("PCIe throughput (NVML samples)"), name="pcie",
                 visible=False)
    for name, color, label in (("nvml_rx", MEMOP_COLORS["prefetch"], "to device"),
                               ("nvml_tx", MEMOP_COLORS["offload"], "to host")):
        fig.step(x="x", y="y", mode="after", color=color, name=name, legend_label=label,
                 source=ColumnDataSource({"x": [], "y": []}, name=name))
    fig.legend.location = "top_left"
    fig.legend.label_text_font_size = "8pt"
    fig.xaxis.visible = False
    fig.yaxis.ticker = BasicTicker(desired_num_ticks=3)
    return fig


def _fill_pcie(fig: Any, session: Session, axis: Axis) -> None:
    c = session.collected
    assert c is not None
    x = axis.x(c.nvml_t_ns)
    for name, values in (("nvml_rx", c.nvml_pcie_rx_bytes_per_s), ("nvml_tx", c.nvml_pcie_tx_bytes_per_s)):
        source = next(r.data_source for r in fig.renderers if r.name == name)
        refill(source, {"x": x, "y": np.asarray(values, dtype=np.float64) / 1e9})
