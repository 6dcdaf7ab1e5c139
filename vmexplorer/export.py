"""Sessions as files other tools open: Chrome trace events (Perfetto, chrome://tracing) and a
standalone HTML page (the timeline and the summary, with Bokeh inline: no server, no network)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from . import __version__
from .collected import MEMCPY_KINDS, busiest_stream, per_op
from .fileio import atomic_write
from .plan import Direction, Mode, Origin
from .session import SCHEMA_VERSION, Session
from .units import format_bytes

# Threads of the trace, one per stream a person reasons about. Synchronous evictions run on the compute
# stream between ops (the next op waits for them), so they share its thread; demand faults happen inside
# an op's kernels and would overlap its span, so they get their own thread.
COMPUTE, TO_DEVICE, TO_HOST, FAULTS = 1, 2, 3, 4
THREADS = {COMPUTE: "compute stream", TO_DEVICE: "copy stream: to device", TO_HOST: "copy stream: to host",
           FAULTS: "demand faults (driver)"}
PIDS = {"simulated": 1, "measured": 2}
# With collector records (measured sessions): one thread per stream that ran kernels, the compute
# stream's first, and counter tracks of the unified-memory counters per op (see _collected_events).
KERNELS = 5


def chrome_trace(session: Session) -> dict[str, Any]:
    """The trace-event document: ts and dur in microseconds, on the timeline's clock."""
    g, p, tl = session.graph, session.plan, session.timeline
    pid = PIDS.get(tl.source, 1)
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
         "args": {"name": f"{tl.source}: {g.model} batch {g.batch}, {p.policy}"}}]
    events += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
               for tid, name in THREADS.items()]
    events += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}
               for tid in THREADS]
    for it, k, start, end, stall, fault in zip(
            tl.op_iteration.tolist(), tl.op_index.tolist(), tl.op_start_ns.tolist(), tl.op_end_ns.tolist(),
            tl.op_stall_ns.tolist(), tl.op_fault_bytes.tolist()):
        op = g.ops[k]
        events.append(_span(pid, COMPUTE, op.name, op.phase.value, start, end,
                            {"op": op.name, "kind": op.kind, "phase": op.phase.value, "layer": op.layer,
                             "iteration": it, "stall_ns": stall, "fault_bytes": fault}))
    for it, i, start, end in zip(tl.memop_iteration.tolist(), tl.memop_index.tolist(),
                                 tl.memop_start_ns.tolist(), tl.memop_end_ns.tolist()):
        m = p.memops[i]
        tensor = g.tensors[m.tensor]
        verb = "prefetch" if m.direction is Direction.TO_DEVICE else "offload"
        if m.origin is Origin.DRIVER:
            verb = "fault" if m.mode is Mode.FAULT else "evict"
        events.append(_span(pid, _thread(m.direction, m.mode), f"{verb} {tensor.name}",
                            f"memop.{m.origin.value}", start, end,
                            {"tensor": tensor.name, "bytes": m.nbytes, "direction": m.direction.value,
                             "mode": m.mode.value, "origin": m.origin.value, "iteration": it, "memop": i,
                             "issue_after_op": m.issue_after, "complete_before_op": m.complete_before}))
    events += [{"ph": "C", "pid": pid, "tid": 0, "name": "resident bytes", "ts": t / 1000,
                "args": {"resident": b}}
               for t, b in zip(tl.resident_t_ns.tolist(), tl.resident_bytes.tolist())]
    if session.collected is not None:
        events += _collected_events(session, pid)
    events.sort(key=lambda e: (e["ph"] != "M", e.get("ts", 0.0), e["tid"]))
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": _metadata(session)}


def export_chrome_trace(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    text = json.dumps(chrome_trace(session), sort_keys=True, separators=(",", ":"), allow_nan=False)
    atomic_write(path, text.encode(), force=force)


def export_html(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    """One HTML file with Bokeh's JavaScript inline, so it opens offline and can be mailed around."""
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.resources import INLINE

    from .timeline import summary_table, timeline_figure

    p = session.plan
    title = f"vmexplorer: {p.model} batch {p.batch}, {p.policy} ({session.timeline.source})"
    layout = column(summary_table(session), timeline_figure(session), sizing_mode="stretch_width")
    atomic_write(path, file_html(layout, INLINE, title).encode(), force=force)


def _collected_events(session: Session, pid: int) -> list[dict[str, Any]]:
    """Kernel spans (CUPTI) on threads of their own, one per stream: kernels of different streams
    overlap, and Perfetto drops slices of one thread that are not nested; memory copies on one more
    thread, named by direction and size. The unified-memory counters
    become counter tracks stepping at each op's start to what that op saw (faults and fault groups by
    the record's start, bytes each way by window: see `vmexplorer.collected.per_op`), and back to 0
    at the end of the last op."""
    g, tl, c = session.graph, session.timeline, session.collected
    assert c is not None
    compute = busiest_stream(c)
    streams = sorted(set(c.kernel_stream.tolist()), key=lambda s: (s != compute, s))
    tids = {s: KERNELS + i for i, s in enumerate(streams)}
    events: list[dict[str, Any]] = []
    for s, tid in tids.items():
        name = "kernels (CUPTI)" if s == compute else f"kernels (CUPTI), stream {s}"
        events += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}},
                   {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}]
    for it, start, end, stream, k in zip(c.kernel_iteration.tolist(), c.kernel_start_ns.tolist(),
                                         c.kernel_end_ns.tolist(), c.kernel_stream.tolist(), c.kernel_name.tolist()):
        events.append(_span(pid, tids[stream], c.kernel_names[k], "kernel", start, end,
                            {"iteration": it, "stream": stream}))
    if len(c.memcpy_bytes):
        tid = KERNELS + len(tids)
        events += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                    "args": {"name": "memory copies (CUPTI)"}},
                   {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}]
        for it, start, end, stream, kind, nbytes in zip(
                c.memcpy_iteration.tolist(), c.memcpy_start_ns.tolist(), c.memcpy_end_ns.tolist(),
                c.memcpy_stream.tolist(), c.memcpy_kind.tolist(), c.memcpy_bytes.tolist()):
            events.append(_span(pid, tid, f"memcpy {MEMCPY_KINDS[kind]} {format_bytes(nbytes)}", "memcpy", start,
                                end, {"iteration": it, "stream": stream, "bytes": nbytes}))
    if not len(c.um_value) or not len(tl.op_index):
        return events
    figures = per_op(g, tl, c, compute)
    order = np.argsort(tl.op_start_ns, kind="stable")
    for row in order.tolist():
        ts = tl.op_start_ns[row] / 1000
        events.append({"ph": "C", "pid": pid, "tid": 0, "name": "fault_groups", "ts": ts,
                       "args": {"fault_groups": int(figures["fault_groups"][row]),
                                "faulted_pages": int(figures["faulted_pages"][row])}})
        events.append({"ph": "C", "pid": pid, "tid": 0, "name": "UM bytes htod/dtoh", "ts": ts,
                       "args": {"htod": round(float(figures["window_bytes_htod"][row])),
                                "dtoh": round(float(figures["window_bytes_dtoh"][row]))}})
    end = float(tl.op_end_ns.max()) / 1000
    events.append({"ph": "C", "pid": pid, "tid": 0, "name": "fault_groups", "ts": end,
                   "args": {"fault_groups": 0, "faulted_pages": 0}})
    events.append({"ph": "C", "pid": pid, "tid": 0, "name": "UM bytes htod/dtoh", "ts": end,
                   "args": {"htod": 0, "dtoh": 0}})
    return events


def _span(pid: int, tid: int, name: str, cat: str, start_ns: float, end_ns: float,
          args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": start_ns / 1000,
            "dur": (end_ns - start_ns) / 1000, "args": args}


def _thread(direction: Direction, mode: Mode) -> int:
    if mode is Mode.FAULT:
        return FAULTS
    if mode is Mode.SYNC:
        return COMPUTE
    return TO_DEVICE if direction is Direction.TO_DEVICE else TO_HOST


def _metadata(session: Session) -> dict[str, Any]:
    p, tl = session.plan, session.timeline
    return {"vmexplorer": __version__, "schema_version": SCHEMA_VERSION, "model": p.model, "batch": p.batch,
            "image_size": p.image_size, "policy": p.policy, "capacity_bytes": p.capacity,
            "source": tl.source, "iterations": tl.iterations, "created": session.created,
            "cost_model": session.cost_model.name if session.cost_model else None,
            "peak_resident_bytes": int(np.max(tl.resident_bytes, initial=0)),
            "collectors": None if session.collected is None else
            {s.name: s.available for s in session.collected.status}}
