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
from .axis import MEMOP_COLORS, Axis, add_renderer, byte_unit, op_columns, plain_title, texts


def measured_lanes(session: Session, axis: Axis, lanes: Any) -> list[Any]:
    """What the collectors recorded, below the modelled lanes; a note in place of a lane whose
    collector did not run (an empty lane would read as "nothing happened")."""
    c = session.collected
    if session.timeline.source != "measured":
        return []
    if c is None:
        return [Div(text="<i>Recorded without collectors: no CUPTI or NVML lanes.</i>", name="collector_notes",
                    disable_math=True)]
    out: list[Any] = []
    # a status's name and reason come from the file: escaped, and no TeX (a Div renders both)
    missing = [f"<b>{escape(COLLECTOR_LABELS.get(st.name, st.name))}</b>: {escape(st.reason)}"
               for st in c.status if not st.available]
    if missing:
        out.append(Div(text="<i>Not recorded here</i> " + "; ".join(missing), name="collector_notes",
                       disable_math=True))
    if c.available("um"):
        out.append(_migrations(session, axis, lanes))
    if c.available("nvml") and len(c.nvml_t_ns):
        out.append(_pcie(session, axis, lanes))
    return out


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


def _migrations(session: Session, axis: Axis, lanes: Any) -> Any:
    """CUPTI's bytes each way per op, each transfer shared among the ops it ran under: to the device
    up, to the host down."""
    tl, c = session.timeline, session.collected
    assert c is not None
    f = per_op(session.graph, tl, c)
    cols = op_columns(session, axis)
    htod, dtoh = f["window_bytes_htod"], f["window_bytes_dtoh"]
    scale, unit = byte_unit(int(max(htod.max(initial=0), dtoh.max(initial=0))))
    title = "CUPTI's migrations per op, to device up, to host down" + _coverage(session)
    fig = figure(height=140, x_range=lanes.x_range, sizing_mode="stretch_width", tools="", toolbar_location=None,
                 y_axis_label=f"CUPTI ({unit})", title=plain_title(title))
    def shown(table: str, texts: Any) -> Any:  # a column, or "not recorded" where its collector was off
        return texts() if c.available(table) else np.full(len(htod), "not recorded", dtype=object)

    base = {"left": cols["left"], "right": cols["right"], "name": cols["name"],
            "htod": texts(format_bytes, np.rint(htod).astype(np.int64)),
            "dtoh": texts(format_bytes, np.rint(dtoh).astype(np.int64)),
            "groups": shown("faults", lambda: f["fault_groups"].astype(str)),
            "pages": shown("faults", lambda: f["faulted_pages"].astype(str)),
            "kernels": shown("kernel", lambda: texts(format_ns, f["kernel_ns"]))}
    tips = [("op", "@name"), ("to device", "@htod"), ("to host", "@dtoh"), ("fault groups", "@groups"),
            ("faulted pages", "@pages"), ("kernel time", "@kernels")]
    renderers: list[Any] = []
    for name, top, bottom, color in (("measured_htod", htod / scale, 0 * htod, MEMOP_COLORS["prefetch"]),
                                     ("measured_dtoh", 0 * dtoh, -dtoh / scale, MEMOP_COLORS["offload"])):
        keep = top > bottom
        source = ColumnDataSource({**{k: v[keep] for k, v in base.items()}, "top": top[keep], "bottom": bottom[keep]})
        renderers.append(add_renderer(fig, Quad(left="left", right="right", bottom="bottom", top="top",
                                                fill_color=color, line_color=color), source, name=name))
    fig.add_tools(HoverTool(renderers=renderers, tooltips=tips))
    fig.xaxis.visible = False
    fig.yaxis.ticker = BasicTicker(desired_num_ticks=3)
    return fig


def _pcie(session: Session, axis: Axis, lanes: Any) -> Any:
    c = session.collected
    assert c is not None
    x = axis.x(c.nvml_t_ns)
    fig = figure(height=120, x_range=lanes.x_range, sizing_mode="stretch_width", tools="", toolbar_location=None,
                 y_axis_label="PCIe (GB/s)", title=plain_title("PCIe throughput (NVML samples)"))
    for name, values, color, label in (("nvml_rx", c.nvml_pcie_rx_bytes_per_s, MEMOP_COLORS["prefetch"], "to device"),
                                       ("nvml_tx", c.nvml_pcie_tx_bytes_per_s, MEMOP_COLORS["offload"], "to host")):
        fig.step(x=x, y=np.asarray(values, dtype=np.float64) / 1e9, mode="after", color=color, name=name,
                 legend_label=label)
    fig.legend.location = "top_left"
    fig.legend.label_text_font_size = "8pt"
    fig.xaxis.visible = False
    fig.yaxis.ticker = BasicTicker(desired_num_ticks=3)
    return fig
