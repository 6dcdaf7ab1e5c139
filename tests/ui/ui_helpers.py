"""What the app's tests share: a drag as the browser's marker tool sends it, and a store's shown state."""

from __future__ import annotations

from typing import Any

from vmexplorer.plots.timeline import timeline_source
from vmexplorer.ui.state import AppState

UVM_TWIN = "vgg19-b64-uvm-50pct.measured.vms"


def snapshot(s: AppState) -> tuple[Any, ...]:
    return (s.session, s.loaded, list(s.moves), s.comparison, s.origin)


def iteration_ns(s: AppState) -> int:
    return int(s.session.summary["iteration_ns"])


def drag_first_marker(fig: Any, kind: str, ops_earlier: int) -> tuple[int, int]:
    """What the PointDrawTool sends back after the first `kind` marker is dragged onto the op boundary
    `ops_earlier` ops before the one it is issued after, on the axis drawn: (its tensor, that op)."""
    src = timeline_source(fig, f"{kind}_markers")
    ends = timeline_source(fig, "ops").data["right"]  # one iteration's ops, in order
    data = dict(src.data)
    to = int(data["issue_after"][0]) - ops_earlier
    data["x"] = [ends[to], *list(data["x"])[1:]]
    src.data = data
    return int(data["tensor_id"][0]), to
