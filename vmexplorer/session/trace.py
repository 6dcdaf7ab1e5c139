"""A session as Chrome trace events, the file Perfetto and chrome://tracing open (the standalone HTML
page is the timeline's: `vmexplorer.plots.export.export_html`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import __version__
from ..fileio import atomic_write
from ..graph import Graph
from ..plan import Direction, Mechanism, Mode, Origin
from ..records.collected import MEMCPY_KINDS, Collected, busiest_stream, per_op
from ..records.spans import Timeline
from ..units import format_bytes
from .session import SCHEMA_VERSION, Session

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
    return {"traceEvents": list(_events(session)), "displayTimeUnit": "ms", "metadata": _metadata(session)}


def chrome_trace_chunks(session: Session) -> Iterator[bytes]:
    """`chrome_trace` as JSON with sorted keys, in pieces: a long measured session has millions of
    events, and a dict for each at once would take gigabytes where the text takes a few hundred MB."""
    meta = json.dumps(_metadata(session), sort_keys=True, separators=(",", ":"), allow_nan=False)
    yield f'{{"displayTimeUnit":"ms","metadata":{meta},"traceEvents":['.encode()
    batch: list[dict[str, Any]] = []
    first = True
    for event in _events(session):
        batch.append(event)
        if len(batch) == 10_000:
            yield (b"" if first else b",") + _json_items(batch)
            batch, first = [], False
    if batch:
        yield (b"" if first else b",") + _json_items(batch)
    yield b"]}"


def _json_items(events: list[dict[str, Any]]) -> bytes:
    return json.dumps(events, sort_keys=True, separators=(",", ":"), allow_nan=False)[1:-1].encode()


def export_chrome_trace(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    atomic_write(path, chrome_trace_chunks(session), force=force)


@dataclass(frozen=True)
class _Family:
    """Events of one kind, made one at a time: `make(i)` is the i-th, at `ts[i]` on thread `tid[i]`."""

    meta: bool  # metadata ("M") events, which come first
    ts: np.ndarray
    tid: np.ndarray
    make: Callable[[int], dict[str, Any]]


def _events(session: Session) -> Iterator[dict[str, Any]]:
    """Every event, metadata first, then by time and thread (ties in the order the families are made):
    the order is found on numpy keys, and each event is made only as it is written."""
    families = _families(session)
    if not families:
        return
    keys = [np.concatenate([f.ts for f in families]), np.concatenate([f.tid for f in families]),
            np.concatenate([np.full(len(f.ts), not f.meta) for f in families])]
    starts = np.cumsum([0] + [len(f.ts) for f in families])
    for i in np.lexsort((keys[1], keys[0], keys[2])).tolist():
        k = int(np.searchsorted(starts, i, "right")) - 1
        yield families[k].make(i - int(starts[k]))


def _meta(events: list[dict[str, Any]]) -> _Family:
    return _Family(True, np.zeros(len(events)), np.array([e["tid"] for e in events], dtype=np.int64),
                   events.__getitem__)


def _families(session: Session) -> list[_Family]:
    g, p, tl = session.graph, session.plan, session.timeline
    pid = PIDS.get(tl.source, 1)
    meta = [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
             "args": {"name": f"{tl.source}: {g.model} batch {g.batch}, {p.policy}"}}]
    meta += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
             for tid, name in THREADS.items()]
    meta += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}
             for tid in THREADS]

    def op_span(row: int) -> dict[str, Any]:
        op = g.ops[int(tl.op_index[row])]
        start, end = tl.op_start_ns[row].item(), tl.op_end_ns[row].item()
        return _span(pid, COMPUTE, op.name, op.phase.value, start, end,
                     {"op": op.name, "kind": op.kind, "phase": op.phase.value, "layer": op.layer,
                      "iteration": int(tl.op_iteration[row]), "stall_ns": tl.op_stall_ns[row].item(),
                      "fault_bytes": int(tl.op_fault_bytes[row])})

    def memop_span(row: int) -> dict[str, Any]:
        i = int(tl.memop_index[row])
        m = p.memops[i]
        tensor = g.tensors[m.tensor]
        verb = "prefetch" if m.direction is Direction.TO_DEVICE else "offload"
        if m.origin is Origin.DRIVER and p.mechanism is Mechanism.SWAP:  # no driver: forced copies
            verb = "copy in on demand" if m.direction is Direction.TO_DEVICE else "copy out"
        elif m.origin is Origin.DRIVER:
            verb = "fault" if m.mode is Mode.FAULT else "evict"
        return _span(pid, _thread(m.direction, m.mode), f"{verb} {tensor.name}", f"memop.{m.origin.value}",
                     tl.memop_start_ns[row].item(), tl.memop_end_ns[row].item(),
                     {"tensor": tensor.name, "bytes": m.nbytes, "direction": m.direction.value,
                      "mode": m.mode.value, "origin": m.origin.value, "iteration": int(tl.memop_iteration[row]),
                      "memop": i, "issue_after_op": m.issue_after, "complete_before_op": m.complete_before})

    def resident(row: int) -> dict[str, Any]:
        return {"ph": "C", "pid": pid, "tid": 0, "name": "resident bytes", "ts": tl.resident_t_ns[row].item() / 1000,
                "args": {"resident": tl.resident_bytes[row].item()}}

    threads = np.array([_thread(m.direction, m.mode) for m in p.memops], dtype=np.int64)
    out = [_meta(meta),
           _Family(False, tl.op_start_ns / 1000, np.full(len(tl.op_index), COMPUTE), op_span),
           _Family(False, tl.memop_start_ns / 1000, threads[tl.memop_index], memop_span),
           _Family(False, tl.resident_t_ns / 1000, np.zeros(len(tl.resident_t_ns), dtype=np.int64), resident)]
    if session.collected is not None:
        out += _collected_families(session, pid)
    return out


def _collected_families(session: Session, pid: int) -> list[_Family]:
    """Kernel spans (CUPTI) on threads of their own, one per stream: kernels of different streams
    overlap, and Perfetto drops slices of one thread that are not nested; memory copies on one more
    thread, named by direction and size. The unified-memory counters
    become counter tracks stepping at each op's start to what that op saw (faults and fault groups by
    the record's start, bytes each way by window: see `vmexplorer.records.collected.per_op`), and back to 0
    at the end of the last op."""
    g, tl, c = session.graph, session.timeline, session.collected
    assert c is not None
    compute = busiest_stream(c)
    out, tids = _kernel_families(c, pid, compute)
    if len(c.memcpy_bytes):
        out += _copy_families(c, pid, KERNELS + len(tids))
    if not len(c.um_value) or not len(tl.op_index):
        return out
    out.append(_counter_family(g, tl, c, pid, compute))
    return out


def _kernel_families(c: Collected, pid: int, compute: int | None) -> tuple[list[_Family], dict[int, int]]:
    """The kernels' threads, the compute stream's first, and their spans; with each stream's thread."""
    streams = sorted(set(c.kernel_stream.tolist()), key=lambda s: (s != compute, s))
    tids = {s: KERNELS + i for i, s in enumerate(streams)}
    meta: list[dict[str, Any]] = []
    for s, tid in tids.items():
        name = "kernels (CUPTI)" if s == compute else f"kernels (CUPTI), stream {s}"
        meta += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}},
                 {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}]

    def kernel(row: int) -> dict[str, Any]:
        stream = int(c.kernel_stream[row])
        return _span(pid, tids[stream], c.kernel_names[int(c.kernel_name[row])], "kernel",
                     c.kernel_start_ns[row].item(), c.kernel_end_ns[row].item(),
                     {"iteration": int(c.kernel_iteration[row]), "stream": stream})

    kernel_tids = np.array([tids[s] for s in c.kernel_stream.tolist()], dtype=np.int64)
    return [_meta(meta), _Family(False, c.kernel_start_ns / 1000, kernel_tids, kernel)], tids


def _copy_families(c: Collected, pid: int, tid: int) -> list[_Family]:
    """The memory copies' thread `tid` and their spans."""
    def copy(row: int) -> dict[str, Any]:
        nbytes = int(c.memcpy_bytes[row])
        return _span(pid, tid, f"memcpy {MEMCPY_KINDS[int(c.memcpy_kind[row])]} {format_bytes(nbytes)}", "memcpy",
                     c.memcpy_start_ns[row].item(), c.memcpy_end_ns[row].item(),
                     {"iteration": int(c.memcpy_iteration[row]), "stream": int(c.memcpy_stream[row]),
                      "bytes": nbytes})

    return [_meta([{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                    "args": {"name": "memory copies (CUPTI)"}},
                   {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}]),
            _Family(False, c.memcpy_start_ns / 1000, np.full(len(c.memcpy_bytes), tid), copy)]


def _counter_family(g: Graph, tl: Timeline, c: Collected, pid: int, compute: int | None) -> _Family:
    """The unified-memory counters' tracks: what each op saw (`per_op`), from its start."""
    figures = per_op(g, tl, c, compute)
    order = np.argsort(tl.op_start_ns, kind="stable")

    def counter(i: int) -> dict[str, Any]:  # two per op row, in order of start, then two at the end
        row = int(order[i // 2]) if i < 2 * len(order) else None
        ts = (tl.op_start_ns[row] if row is not None else float(tl.op_end_ns.max())) / 1000
        if i % 2 == 0:
            groups = 0 if row is None else int(figures["fault_groups"][row])
            pages = 0 if row is None else int(figures["faulted_pages"][row])
            return {"ph": "C", "pid": pid, "tid": 0, "name": "fault_groups", "ts": ts,
                    "args": {"fault_groups": groups, "faulted_pages": pages}}
        htod = 0 if row is None else round(float(figures["window_bytes_htod"][row]))
        dtoh = 0 if row is None else round(float(figures["window_bytes_dtoh"][row]))
        return {"ph": "C", "pid": pid, "tid": 0, "name": "UM bytes htod/dtoh", "ts": ts,
                "args": {"htod": htod, "dtoh": dtoh}}

    ts = np.append(np.repeat(tl.op_start_ns[order], 2), [tl.op_end_ns.max()] * 2) / 1000
    return _Family(False, ts, np.zeros(len(ts), dtype=np.int64), counter)


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
    tl = session.timeline
    config = {k: v for k, v in session.plan.config.as_json().items() if k != "options"}
    return {"vmexplorer": __version__, "schema_version": SCHEMA_VERSION, **config, "source": tl.source,
            "iterations": tl.iterations, "created": session.created,
            "cost_model": session.cost_model.name if session.cost_model else None,
            "peak_resident_bytes": int(np.max(tl.resident_bytes, initial=0)),
            "collectors": None if session.collected is None else
            {s.name: s.available for s in session.collected.status}}
