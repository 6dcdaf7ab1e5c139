"""The summary figures of a session, in words and units, as a table."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from bokeh.models.widgets import Div

from ..records.breakdown import PARTS as BREAKDOWN_PARTS
from ..session import Session
from ..units import format_bytes, format_ns


def summary_table(session: Session) -> Div:
    """The figures a person compares, labelled simulated or measured."""
    s: dict[str, Any] = figures(session)
    rows = [(label, value) for _, label, value in summary_items(s)]
    body = "".join(f"<tr><td>{k}</td><td style='text-align:right'>{v}</td></tr>" for k, v in rows)
    p = session.plan
    # names come from session files people share: escape them, a Div renders HTML (and TeX, unless told not to)
    title = escape(f"{p.model} batch {p.batch}, {p.policy}: {s['source']}")
    return Div(text=f"<h3>{title}</h3><p>per iteration, {escape(str(s['source']))}</p><table>{body}</table>",
               name="summary", disable_math=True)


SUMMARY_ROWS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("iteration_ns", "iteration time", format_ns),
    # where the typical iteration's time went (`figures`), in the order the parts stack
    *((key, f"  {label}", format_ns) for key, label in BREAKDOWN_PARTS),
    ("fault_bytes", "demand-faulted in", format_bytes),
    ("bytes_to_host", "moved to host", format_bytes),
    ("bytes_to_device", "moved to device (faults included)", format_bytes),
    ("peak_resident_bytes", "peak resident", format_bytes),
    ("capacity_bytes", "capacity (emulated)", format_bytes),
    ("footprint_bytes", "footprint (no paging)", format_bytes),
    ("iterations", "iterations timed", str),
    ("counted_iterations", "iterations counting unified memory (after the timed ones, slower)", str),
)


def figures(session: Session) -> dict[str, Any]:
    """The session's summary with where its typical iteration's time went, part by part. The iteration
    time is the typical iteration's (the one the timeline draws), so that its parts add up to it; the
    median of a measured run's iterations falls between two of them when their number is even."""
    split = session.time_split()
    return {**session.summary, "iteration_ns": split.iteration_ns,
            **{key: getattr(split, key) for key, _ in BREAKDOWN_PARTS}}


# figures most sessions have none of, shown only where there are some: a row of zeros on every session's
# summary would crowd the first screen of a projector
WHERE_SOME = frozenset({"counted_iterations", "recompute_ns"})


def summary_items(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, label, value) of the summary figures a session has; those of `WHERE_SOME` only when there are some."""
    return [(key, label, fmt(summary[key])) for key, label, fmt in SUMMARY_ROWS
            if key in summary and not (key in WHERE_SOME and not summary[key])]
