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
from ..plan import Direction, Mode, Origin
from ..plan.mechanisms import mechanism_of
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
    doc: dict[str, Any] = json.loads(b"".join(chrome_trace_chunks(session)))
    return doc


def chrome_trace_chunks(session: Session) -> Iterator[bytes]:
    """`chrome_trace` as JSON with sorted keys, in pieces: a long session has a million events or more,
    and a dict for each at once would take gigabytes where the text takes a few hundred MB."""
    yield f'{{"displayTimeUnit":"ms","metadata":{_dumps(_metadata(session))},"traceEvents":['.encode()
    first = True
    for chunk in _event_texts(session):
        yield (b"" if first else b",") + chunk.encode()
        first = False
    yield b"]}"


def export_chrome_trace(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    atomic_write(path, chrome_trace_chunks(session), force=force)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class _Family:
    """Events of one kind: the i-th is at `ts[i]` on thread `tid[i]`, and `texts(rows)` is the JSON of the
    events at `rows` (an array of i), keys sorted. What is the same for many events (an op's or a memory
    operation's name and figures) is encoded once and each event's own numbers written into it: a dict
    per event, encoded one at a time, took 25 s for the largest session a file may hold."""

    meta: bool  # metadata ("M") events, which come first
    ts: np.ndarray
    tid: np.ndarray
    texts: Callable[[np.ndarray], list[str]]


_CHUNK = 20_000  # events encoded and written at a time: the text of each chunk is a few MB


def _event_texts(session: Session) -> Iterator[str]:
    """Every event's JSON, metadata first, then by time and thread (ties in the order the families are
    made), in comma-joined chunks: the order is found on numpy keys, and each event is made only as its
    chunk is written."""
    families = _families(session)
    keys = [np.concatenate([f.ts for f in families]), np.concatenate([f.tid for f in families]),
            np.concatenate([np.full(len(f.ts), not f.meta) for f in families])]
    starts = np.cumsum([0] + [len(f.ts) for f in families])
    order = np.lexsort((keys[1], keys[0], keys[2]))
    family = np.searchsorted(starts, order, "right") - 1
    for a in range(0, len(order), _CHUNK):
        rows, which = order[a:a + _CHUNK], family[a:a + _CHUNK]
        out = np.empty(len(rows), dtype=object)
        for k in np.flatnonzero(np.bincount(which, minlength=len(families))).tolist():
            at = np.flatnonzero(which == k)
            out[at] = families[k].texts(rows[at] - starts[k])
        yield ",".join(out.tolist())


def _meta(events: list[dict[str, Any]]) -> _Family:
    texts = [_dumps(e) for e in events]
    return _Family(True, np.zeros(len(events)), np.array([e["tid"] for e in events], dtype=np.int64),
                   lambda rows: [texts[i] for i in rows.tolist()])


# Events are written as text, keys in the order json.dumps(sort_keys=True) writes them: a complete span is
# {"args":{...},"cat":C,"dur":D,"name":N,"ph":"X","pid":P,"tid":T,"ts":TS} and a counter
# {"args":{...},"name":N,"ph":"C","pid":P,"tid":0,"ts":TS}, times in µs. Each family writes its rows in that
# layout, a row's own numbers into pieces encoded once (a call per event was a fifth of the time).


def _us(start: np.ndarray, end: np.ndarray) -> tuple[list[float], list[float]]:
    """Spans' starts and durations in µs, worked out by numpy (each as Python works it out from the ns:
    the times are whole numbers below 2**53, or floats, so both round alike)."""
    return (start / 1000).tolist(), ((end - start) / 1000).tolist()


def _counter(args: str, name: str, pid: int, ts: float) -> str:
    """A counter ("C") event at `ts` (µs); `args` and `name` already JSON."""
    return f'{{"args":{args},"name":{name},"ph":"C","pid":{pid},"tid":0,"ts":{ts!r}}}'


def _families(session: Session) -> list[_Family]:
    g, p, tl = session.graph, session.plan, session.timeline
    pid = PIDS.get(tl.source, 1)
    meta = [{"ph": "M", "pid": pid, "tid": 0, "name": "process_name",
             "args": {"name": f"{tl.source}: {g.model} batch {g.batch}, {p.policy}"}}]
    meta += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}}
             for tid, name in THREADS.items()]
    meta += [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}
             for tid in THREADS]
    threads = np.array([_thread(m.direction, m.mode) for m in p.memops], dtype=np.int64)

    def resident(rows: np.ndarray) -> list[str]:  # a counter's layout (above), written out
        return [f'{{"args":{{"resident":{b!r}}},"name":"resident bytes","ph":"C","pid":{pid},"tid":0,"ts":{t!r}}}'
                for t, b in zip((tl.resident_t_ns[rows] / 1000).tolist(), tl.resident_bytes[rows].tolist())]

    out = [_meta(meta),
           _Family(False, tl.op_start_ns / 1000, np.full(len(tl.op_index), COMPUTE), _op_spans(g, tl, pid)),
           _Family(False, tl.memop_start_ns / 1000, threads[tl.memop_index], _memop_spans(session, pid)),
           _Family(False, tl.resident_t_ns / 1000, np.zeros(len(tl.resident_t_ns), dtype=np.int64), resident)]
    if session.collected is not None:
        out += _collected_families(session, pid)
    return out


def _op_spans(g: Graph, tl: Timeline, pid: int) -> Callable[[np.ndarray], list[str]]:
    """Each op row's span; what is the op's (its name, kind, phase, layer) encoded once per op."""
    # an op row's event is these pieces with its own numbers between them (a span's layout, above)
    parts = [("," + _dumps({"kind": o.kind, "layer": o.layer, "op": o.name, "phase": o.phase.value})[1:-1]
              + ',"stall_ns":', f'}},"cat":{_dumps(o.phase.value)},"dur":',
              f',"name":{_dumps(o.name)},"ph":"X","pid":{pid},"tid":{COMPUTE},"ts":') for o in g.ops]

    def texts(rows: np.ndarray) -> list[str]:
        cols = (tl.op_index[rows], tl.op_iteration[rows].astype(np.int64), tl.op_fault_bytes[rows].astype(np.int64),
                tl.op_stall_ns[rows])
        out = []
        for i, it, fault, stall, ts, dur in zip(*(c.tolist() for c in cols), *_us(tl.op_start_ns[rows],
                                                                                  tl.op_end_ns[rows])):
            a, b, c = parts[i]
            out.append(f'{{"args":{{"fault_bytes":{fault},"iteration":{it}{a}{stall!r}{b}{dur!r}{c}{ts!r}}}')
        return out
    return texts


def _memop_spans(session: Session, pid: int) -> Callable[[np.ndarray], list[str]]:
    """Each memory operation row's span; what is the plan's (tensor, bytes, direction, ...) encoded once
    per memory operation of the plan."""
    g, p, tl = session.graph, session.plan, session.timeline
    mechanism, parts = mechanism_of(p), []
    for i, m in enumerate(p.memops):
        tensor = g.tensors[m.tensor]
        to_device = m.direction is Direction.TO_DEVICE
        verb = "prefetch" if to_device else "offload"
        if m.origin is Origin.DRIVER:  # what the replay forced, in the mechanism's words
            verb = mechanism.forced_verbs[0] if to_device else mechanism.forced_verbs[1]
        # a row's event is these pieces with its own numbers between them (a span's layout, above): its
        # iteration goes among the args, in the order of sorted keys
        before = _dumps({"bytes": m.nbytes, "complete_before_op": m.complete_before, "direction": m.direction.value,
                         "issue_after_op": m.issue_after})
        after = _dumps({"memop": i, "mode": m.mode.value, "origin": m.origin.value, "tensor": tensor.name})
        cat, name = _dumps(f"memop.{m.origin.value}"), _dumps(f"{verb} {tensor.name}")
        parts.append((f'{{"args":{before[:-1]},"iteration":', f',{after[1:]},"cat":{cat},"dur":',
                      f',"name":{name},"ph":"X","pid":{pid},"tid":{_thread(m.direction, m.mode)},"ts":'))

    def texts(rows: np.ndarray) -> list[str]:
        out = []
        for i, it, ts, dur in zip(tl.memop_index[rows].tolist(), tl.memop_iteration[rows].astype(np.int64).tolist(),
                                  *_us(tl.memop_start_ns[rows], tl.memop_end_ns[rows])):
            a, b, c = parts[i]
            out.append(f"{a}{it}{b}{dur!r}{c}{ts!r}}}")
        return out
    return texts


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
    names, kernel = [_dumps(n) for n in c.kernel_names], _dumps("kernel")

    def texts(rows: np.ndarray) -> list[str]:
        cols = (c.kernel_name[rows], c.kernel_iteration[rows], c.kernel_stream[rows])
        return [f'{{"args":{{"iteration":{it},"stream":{s}}},"cat":{kernel},"dur":{dur!r},"name":{names[n]},'
                f'"ph":"X","pid":{pid},"tid":{tids[s]},"ts":{ts!r}}}'  # a span's layout (above), written out
                for n, it, s, ts, dur in zip(*(col.astype(np.int64).tolist() for col in cols),
                                             *_us(c.kernel_start_ns[rows], c.kernel_end_ns[rows]))]

    kernel_tids = np.array([tids[s] for s in c.kernel_stream.tolist()], dtype=np.int64)
    return [_meta(meta), _Family(False, c.kernel_start_ns / 1000, kernel_tids, texts)], tids


def _copy_families(c: Collected, pid: int, tid: int) -> list[_Family]:
    """The memory copies' thread `tid` and their spans."""
    memcpy = _dumps("memcpy")
    # each distinct kind and size named once, a copy's name found by one key (sizes are below 2**50, so
    # the key stays in int64): a file's copies repeat a few
    kinds = len(MEMCPY_KINDS)
    pairs, name_of = np.unique(c.memcpy_bytes * kinds + c.memcpy_kind, return_inverse=True)
    names = [_dumps(f"memcpy {MEMCPY_KINDS[key % kinds]} {format_bytes(key // kinds)}") for key in pairs.tolist()]
    name_of = name_of.reshape(-1)

    def texts(rows: np.ndarray) -> list[str]:  # a span's layout (above), written out
        cols = (name_of[rows], c.memcpy_bytes[rows], c.memcpy_iteration[rows], c.memcpy_stream[rows])
        return [f'{{"args":{{"bytes":{b},"iteration":{it},"stream":{s}}},"cat":{memcpy},"dur":{dur!r},'
                f'"name":{names[n]},"ph":"X","pid":{pid},"tid":{tid},"ts":{ts!r}}}'
                for n, b, it, s, ts, dur in zip(*(col.astype(np.int64).tolist() for col in cols),
                                                *_us(c.memcpy_start_ns[rows], c.memcpy_end_ns[rows]))]

    return [_meta([{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                    "args": {"name": "memory copies (CUPTI)"}},
                   {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}]),
            _Family(False, c.memcpy_start_ns / 1000, np.full(len(c.memcpy_bytes), tid), texts)]


def _counter_family(g: Graph, tl: Timeline, c: Collected, pid: int, compute: int | None) -> _Family:
    """The unified-memory counters' tracks: what each op saw (`per_op`), from its start; two events per
    op row, in order of start (fault groups, then bytes each way), then two at the end back to 0."""
    figures = per_op(g, tl, c, compute)
    order = np.argsort(tl.op_start_ns, kind="stable")
    last = float(tl.op_end_ns.max())
    ts = np.append(np.repeat(tl.op_start_ns[order], 2), [last] * 2) / 1000
    groups, pages = (np.append(figures[k][order].astype(np.int64), 0).tolist()
                     for k in ("fault_groups", "faulted_pages"))
    htod, dtoh = (np.append(figures[k][order], 0.0).tolist() for k in ("window_bytes_htod", "window_bytes_dtoh"))
    names = _dumps("fault_groups"), _dumps("UM bytes htod/dtoh")

    def texts(rows: np.ndarray) -> list[str]:
        out = []
        for i, t in zip(rows.tolist(), ts[rows].tolist()):
            j = i // 2
            args = (f'{{"fault_groups":{groups[j]},"faulted_pages":{pages[j]}}}' if i % 2 == 0 else
                    f'{{"dtoh":{round(dtoh[j])},"htod":{round(htod[j])}}}')
            out.append(_counter(args, names[i % 2], pid, t))
        return out

    return _Family(False, ts, np.zeros(len(ts), dtype=np.int64), texts)


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
