"""The story panels' figures: where the time goes (stacked bars) and the paging cliff (iteration time
against capacity), each updated in place through its data sources."""

from __future__ import annotations

from typing import Any

from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    DataRange1d,
    FactorRange,
    HoverTool,
)
from bokeh.models.annotations import Label, Legend, Span
from bokeh.plotting import figure

from ..records.breakdown import PARTS as BREAKDOWN_PARTS
from .axis import PHASE_COLORS, PHASE_HATCH, plain_title

# compute, recomputing (as the timeline draws a re-run, hatched), faults, transfers, idle: `BREAKDOWN_PARTS`' order
BREAKDOWN_COLORS = ("#4c78a8", PHASE_COLORS["recompute"], "#e45756", "#f58518", "#bab0ac")
_HATCHES = tuple(PHASE_HATCH["recompute"] if key == "recompute_ns" else {} for key, _ in BREAKDOWN_PARTS)


def breakdown_figure(rows: list[dict[str, Any]], bound_ms: float | None = None, height: int | None = None) -> Any:
    """Where the time goes, one stacked bar per row of `ui.numbers.breakdown_rows` (this session first,
    at the top), in ms, with the bound as a vertical line (`bound_ms`: the least any schedule could take
    here). Later rows go in through `update_breakdown`, so the figure is built once."""
    keys = [key.replace("_ns", "_ms") for key, _ in BREAKDOWN_PARTS]
    fig = figure(height=height or 60 + 34 * max(len(rows), 3), sizing_mode="stretch_width", toolbar_location=None,
                 y_range=FactorRange(factors=[r["label"] for r in reversed(rows)]), x_range=DataRange1d(start=0),
                 x_axis_label="ms per iteration", title=plain_title("Where the time goes"), tools="",
                 name="breakdown_figure")
    source = ColumnDataSource(_breakdown_columns(rows, keys), name="breakdown")
    bars: list[Any] = fig.hbar_stack(keys, y="label", height=0.7, source=source, color=list(BREAKDOWN_COLORS))
    for bar, hatch in zip(bars, _HATCHES):
        bar.glyph.update(**hatch)
    fig.add_tools(HoverTool(renderers=bars, tooltips=[("", "@label"), ("iteration", "@iteration_ms{0.0} ms"),
                                                      *((label, f"@{key}{{0.0}} ms") for key, (_, label) in
                                                        zip(keys, BREAKDOWN_PARTS))]))
    # the legend above the plot, clear of every bar; a click hides a part
    items = [(label, [r]) for r, (_, label) in zip(bars, BREAKDOWN_PARTS)]
    legend: Any = Legend(items=items, orientation="horizontal", click_policy="hide", border_line_alpha=0, margin=2,
                         label_text_font_size="11px", glyph_height=12, label_height=12, ncols=1,
                         name="breakdown_legend")
    legend.padding = 2  # a compact legend leaves the bars their height
    fig.add_layout(legend, "above")
    fig.add_layout(Span(location=0, dimension="height", line_color="#222222", line_dash="dashed", line_width=2,
                        name="bound", visible=False))
    fig.add_layout(Label(x=0, y=0, y_units="screen", y_offset=2, x_offset=4, text="", text_font_size="11px",
                         text_color="#222222", name="bound_label", visible=False, background_fill_color="white",
                         background_fill_alpha=0.8))
    fig.xaxis.ticker = BasicTicker(desired_num_ticks=4)  # a narrow figure beside the timeline: ticks apart
    _set_bound(fig, bound_ms)
    return fig


def update_breakdown(fig: Any, rows: list[dict[str, Any]], bound_ms: float | None = None) -> None:
    """Put new rows into a figure from `breakdown_figure`: its data, its categories and its bound, not a new
    figure."""
    keys = [key.replace("_ns", "_ms") for key, _ in BREAKDOWN_PARTS]
    fig.y_range.factors = [r["label"] for r in reversed(rows)]
    _source(fig, "breakdown").data = _breakdown_columns(rows, keys)
    _set_bound(fig, bound_ms)


def _set_bound(fig: Any, bound_ms: float | None) -> None:
    span, label = (next(a for a in fig.center if a.name == name) for name in ("bound", "bound_label"))
    span.visible = label.visible = bound_ms is not None
    if bound_ms is not None:
        span.location = label.x = bound_ms
        label.text = f"bound {bound_ms:.1f} ms"


def _source(fig: Any, name: str) -> ColumnDataSource:
    """The data source named `name`, through the figure's renderers: Bokeh's `select` walks every model
    the figure references (ticks, tools, styles), a cost paid on every edit."""
    return next(r.data_source for r in fig.renderers if r.data_source.name == name)


def _breakdown_columns(rows: list[dict[str, Any]], keys: list[str]) -> dict[str, list[Any]]:
    return {"label": [r["label"] for r in rows], "iteration_ms": [r["iteration_ms"] for r in rows],
            **{k: [r[k] for r in rows] for k in keys}}


POLICY_COLORS = ("#e45756", "#4c78a8", "#54a24b", "#b279a2", "#9d755d", "#72b7b2")  # by registry order


def sweep_figure(sweep: dict[str, Any]) -> Any:
    """The paging cliff from `ui.numbers.sweep`: a line per policy (simulated), the measured samples as
    points on it, and the bound as a dashed line. Every point is tappable (`sweep_points` selected rows
    say which), and a new sweep goes in through `update_sweep`."""
    fig = figure(height=300, sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset,tap",
                 active_scroll=None, x_axis_label="capacity, % of the footprint",
                 y_axis_label="ms per iteration", title=plain_title("The paging cliff"), name="sweep_figure")
    lines, points, bound = _sweep_columns(sweep)
    fig.multi_line("xs", "ys", color="color", line_width=2, legend_field="policy",
                   source=ColumnDataSource(lines, name="sweep_lines"))
    fig.line("capacity_pct", "iteration_ms", color="#222222", line_dash="dashed", line_width=2,
             legend_label="bound: no schedule runs below it", source=ColumnDataSource(bound, name="sweep_bound"))
    dots = fig.scatter("capacity_pct", "iteration_ms", color="color", size="size", marker="marker",
                       source=ColumnDataSource(points, name="sweep_points"))
    fig.add_tools(HoverTool(renderers=[dots], tooltips=[("", "@label"), ("capacity", "@capacity_pct{0}%"),
                                                        ("iteration", "@iteration_ms{0.0} ms")]))
    fig.legend.location = "top_right"
    return fig


def update_sweep(fig: Any, sweep: dict[str, Any]) -> None:
    lines, points, bound = _sweep_columns(sweep)
    _source(fig, "sweep_lines").data = lines
    _source(fig, "sweep_points").data = points
    _source(fig, "sweep_bound").data = bound


def _sweep_columns(sweep: dict[str, Any]) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, list[Any]]]:
    color = {line["policy"]: POLICY_COLORS[i % len(POLICY_COLORS)] for i, line in enumerate(sweep["lines"])}
    lines = {"xs": [line["capacity_pct"] for line in sweep["lines"]],
             "ys": [line["iteration_ms"] for line in sweep["lines"]],
             "policy": [f"{line['policy']} (simulated)" for line in sweep["lines"]],
             "color": [color[line["policy"]] for line in sweep["lines"]]}
    points: dict[str, list[Any]] = {k: [] for k in ("policy", "capacity_pct", "iteration_ms", "label", "color",
                                                   "size", "marker", "name")}
    for line in sweep["lines"]:
        for x, y in zip(line["capacity_pct"], line["iteration_ms"]):
            _point(points, line["policy"], x, y, f"{line['policy']}, simulated", color[line["policy"]], 5, "circle", "")
    for m in sweep["measured"]:
        _point(points, m["policy"], m["capacity_pct"], m["iteration_ms"], f"{m['policy']}, measured sample",
               color.get(m["policy"], "#333333"), 11, "diamond", m["name"])
    bound = sweep.get("bound", {"capacity_pct": [], "iteration_ms": []})
    return lines, points, {"capacity_pct": list(bound["capacity_pct"]), "iteration_ms": list(bound["iteration_ms"])}


def _point(points: dict[str, list[Any]], policy: str, x: float, y: float, label: str, color: str, size: int,
           marker: str, name: str) -> None:
    for key, value in (("policy", policy), ("capacity_pct", x), ("iteration_ms", y), ("label", label),
                       ("color", color), ("size", size), ("marker", marker), ("name", name)):
        points[key].append(value)
