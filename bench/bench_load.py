"""A bounded load test: K simulated users dragging prefetch markers on one `panel serve` process.

    python -m bench.bench_load [--users 20] [--seconds 60] [--interval 3.5] [--stagger 0.5]
                               [--root DIR] [--profile-server FILE.prof]
                               [--hostile [--tuned-seconds S] [--upload-file FILE]]

Serves `vmexplorer/app.py` of `--root` (default: this checkout) with `panel serve` (one process) on a
free loopback port, as bench_page.py does, and measures the server, not the clients: all users are
light clients in one asyncio process of this script, each speaking Bokeh's websocket protocol itself
(tornado's `websocket_connect`), holding the page's document as parsed JSON (no Bokeh model objects:
deserialising the whole page into Python models per user, as `bokeh.client` does, cost more CPU than
the server and was what an earlier version of this script measured). Its CPU seconds are printed
beside the server's so a reader can see the rig is not client-bound.

A user, as a browser tab does: GETs the page (the server builds the session's document then) and
takes the session token from it; opens the websocket `/app/ws` (subprotocols "bokeh" and the token);
waits for ACK; sends PULL-DOC-REQ and keeps the PULL-DOC-REPLY's document as JSON, reading the columns
of every ColumnDataSource (numbers come as binary buffers referenced by id from the column's
"ndarray"); sends the `document_ready` event (the server's onload callbacks run then). From then on it
applies every PATCH-DOC the server sends (ModelChanged and ColumnDataChanged) to its copy, so it knows
where the markers and op boundaries are now. Messages are multi-part: header, metadata and content
text frames, then a text frame naming each buffer's id and a binary frame with its bytes.

Every `--interval` s (+-40%, at random) after its last drag was answered, a user drags a prefetch
marker as Bokeh's PointDrawTool and the page's snapping do in the browser: it sends a PATCH-DOC
setting the `data` of the source of the renderer named "prefetch_marker_glyphs" (found by name each
time; its numeric columns sent back as binary buffers) with one marker's x moved to an op boundary
(from the source named "boundaries") three boundaries earlier, then on the next drag three later,
so each drag is a real edit (the app's `TimelinePanel._on_marker_drag` turns the x into the op it is issued
after and re-simulates). Each user drags the marker of one tensor (user k: the tensor of marker k
modulo their number, found by `tensor_id` each time: an edit may reorder the rows). Times from sending
the patch to the arrival of the server's PATCH-DOC that changes:

- markers: the data of the source the drag set (the server draws the marker where the plan now has it;
  always sent, as it differs from what the client set);
- status: a text (the status line "prefetch of T now issued after ...", or the alert when the server
  refuses the drag) that names the dragged tensor;
- summary: the data of a source named "breakdown" (the "where the time goes" bar of the summary);
- timeline: the data of the source named "ops" (the timeline's op lanes, refilled in place);
- answered: the latest of these, once the status and the markers came (the summary and timeline are
  awaited until no sign came for `SETTLE_S`: the app need not refill a figure that a drag leaves as it
  was). The app's order of these updates changes as it is worked on, so no single one marks the end;
  the next drag waits for this (at most `LATE_S`), as a user waits to see the result, and the client's
  copy of the markers is then the server's (a drag sent from a stale copy moves other markers too);
- last patch: the last message the server sent before the user's next drag (all of the drag's patches).

Reports p50/p95/worst of each over all drags and over each page's later drags (its first drag is its
session's first edit, and a class's first drags come together: see the answer times printed by 10 s
window), drags answered, timed out (not answered within `REPLY_TIMEOUT_S`) and refused, errors (ERROR
replies, lost connections, exceptions), the time each user took to open the page (GET to document
pulled), the server's resident memory (VmRSS, sampled every 0.5 s: at start, peak, at end) and the CPU
seconds of the server and of this client process, with the server's CPU per answered drag while every
page was open. Appends a dated line to bench/results/bench_load.txt.

`--hostile` adds, beside the ordinary users, the hostile visitors of issue 32 (bench/load_hostile.py says
what each does): one pressing Simulate on ResNet-152 and `tuned` at its bounds, one uploading the largest
file the loader accepts, one GETting Panel's module route, and a prober GETting a static file every 0.5 s
and the page every 5 s (the issue's goals: the drags' p95 under 0.5 s, no GET waiting over 1 s). Each comes
from a loopback address of its own (the app keeps each visitor, by address, to one job at a time), and the
ordinary users from one each (127.0.1.<k+1>); the server is `vmexplorer serve` (the guarded routes and
the websocket's message limit are set there). Reports what each did and when it was answered, the GETs'
waits, the server's RSS (its process, and with its worker processes) and whether it still served at the
end. `--tuned-seconds S` lowers tuned's search seconds (a smoke run); `--upload-file FILE` uploads FILE.

`--profile-server FILE` runs the server under cProfile (`python -m cProfile -o FILE -m panel serve
...`, stopped with SIGINT so the profile is written) and prints its top functions: where the server's
time per drag goes. cProfile slows the server, so such a run's latencies are not the server's own.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import gzip
import io
import json
import os
import pstats
import random
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from bench.bench_page import ROOT, served

RESULTS = ROOT / "bench" / "results" / "bench_load.txt"
REPLY_TIMEOUT_S = 10.0  # a drag whose status comes later counts as timed out
LATE_S = 30.0  # how long a user waits for a late answer before its next drag
SETTLE_S = 1.0  # once answered, how long a user waits for a summary or timeline that may not change
OPEN_TIMEOUT_S = 300.0
MARKERS = "prefetch_marker_glyphs"  # the renderer whose source a drag edits
BOUNDARIES = "boundaries"  # the source the page's snapping reads: op boundaries on the x axis
SUMMARY, TIMELINE = "breakdown", "ops"  # sources whose change marks the summary and the timeline updated
STEP_BOUNDARIES = 3
TOKEN = re.compile(r'"token"\s*:\s*"([^"]+)"')
DOCUMENT_READY = {"kind": "MessageSent", "msg_type": "bokeh_event",
                  "msg_data": {"type": "event", "name": "document_ready", "values": {"type": "map", "entries": []}}}


# --- Bokeh's websocket protocol, as much of it as a tab needs

@dataclass
class Message:
    """One Bokeh protocol message: its header, its parsed content, its buffers by id, and the monotonic
    time its last frame arrived."""

    header: dict[str, Any]
    content: Any
    buffers: dict[str, bytes]
    at: float

    @property
    def msgtype(self) -> str:
        return str(self.header["msgtype"])


class Wire:
    """A websocket carrying Bokeh messages: each is a header, metadata and content (text frames), then a
    buffer-id text frame and a binary frame per buffer (the header's `num_buffers`)."""

    def __init__(self, ws: WebSocketClientConnection) -> None:
        self.ws = ws

    async def _frame(self) -> str | bytes:
        frame = await self.ws.read_message()
        if frame is None:
            raise ConnectionError("the server closed the connection")
        return frame

    async def read(self) -> Message:
        header = json.loads(await self._frame())
        await self._frame()  # metadata: nothing a client needs
        content = json.loads(await self._frame())
        buffers: dict[str, bytes] = {}
        for _ in range(int(header.get("num_buffers", 0))):
            ref = json.loads(await self._frame())
            payload = await self._frame()
            buffers[ref["id"]] = payload if isinstance(payload, bytes) else payload.encode()
        return Message(header, content, buffers, time.monotonic())

    async def send(self, msgtype: str, content: Any, buffers: list[tuple[str, bytes]] | None = None) -> None:
        header: dict[str, Any] = {"msgid": uuid.uuid4().hex, "msgtype": msgtype}
        if buffers:
            header["num_buffers"] = len(buffers)
        for text in (json.dumps(header), "{}", json.dumps(content)):
            await self.ws.write_message(text)
        for buffer_id, payload in buffers or []:
            await self.ws.write_message(json.dumps({"id": buffer_id}))
            await self.ws.write_message(payload, binary=True)


def decode_value(rep: Any, buffers: dict[str, bytes]) -> Any:
    """A column as Bokeh serialises it: an "ndarray" of bytes (a buffer referenced by id, or base64 of
    gzip inline) as a numpy array over those bytes, an "ndarray" of objects or a plain list as a list."""
    if isinstance(rep, dict) and rep.get("type") == "ndarray":
        array = rep["array"]
        if isinstance(array, dict) and array.get("type") == "bytes":
            data = array["data"]
            raw = buffers[data["id"]] if isinstance(data, dict) else gzip.decompress(base64.b64decode(data))
            return np.frombuffer(raw, dtype=rep["dtype"])
        return list(array)
    return rep


def decode_columns(rep: Any, buffers: dict[str, bytes]) -> dict[str, Any]:
    entries = rep.get("entries", []) if isinstance(rep, dict) and rep.get("type") == "map" else list(rep.items())
    return {str(k): decode_value(v, buffers) for k, v in entries}


def encode_columns(columns: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
    """Columns as BokehJS sends a source's data: numeric arrays as binary buffers, the rest as lists."""
    entries, buffers = [], []
    for name, values in columns.items():
        if isinstance(values, np.ndarray) and values.dtype.kind in "fiub":
            buffer_id = uuid.uuid4().hex
            buffers.append((buffer_id, values.tobytes()))
            entries.append([name, {"type": "ndarray", "array": {"type": "bytes", "data": {"id": buffer_id}},
                                   "shape": [len(values)], "dtype": values.dtype.name, "order": sys.byteorder}])
        else:
            entries.append([name, list(values)])
    return {"type": "map", "entries": entries}, buffers


class Mirror:
    """What a client knows of its page: each model's attributes as JSON (in the order models arrived)
    and every ColumnDataSource's current columns, kept up to date from the server's patches."""

    def __init__(self) -> None:
        self.attrs: dict[str, dict[str, Any]] = {}
        self.columns: dict[str, dict[str, Any]] = {}

    def add(self, obj: Any, buffers: dict[str, bytes]) -> None:
        """Register every model defined inside `obj` (a document, or a patch's new value)."""
        if isinstance(obj, list):
            for item in obj:
                self.add(item, buffers)
        elif isinstance(obj, dict):
            if obj.get("type") == "object" and "id" in obj:
                attrs = obj.get("attributes", {})
                self.attrs[obj["id"]] = attrs
                if "data" in attrs and obj.get("name") == "ColumnDataSource":
                    self.columns[obj["id"]] = decode_columns(attrs["data"], buffers)
            for value in obj.values():
                if isinstance(value, (dict, list)):
                    self.add(value, buffers)

    def apply(self, event: dict[str, Any], buffers: dict[str, bytes]) -> None:
        kind, model = event.get("kind"), str(event.get("model", {}).get("id", ""))
        if kind == "ModelChanged":
            self.add(event["new"], buffers)
            self.attrs.setdefault(model, {})[event["attr"]] = event["new"]
            if event["attr"] == "data":
                self.columns[model] = decode_columns(event["new"], buffers)
        elif kind == "ColumnDataChanged":
            self.columns.setdefault(model, {}).update(decode_columns(event["data"], buffers))
        elif kind == "RootAdded":
            self.add(event.get("model"), buffers)
        # ColumnsStreamed/ColumnsPatched: the app replaces the sources a drag reads, it streams none

    def name(self, model_id: str) -> str | None:
        return self.attrs.get(model_id, {}).get("name")

    def newest(self, name: str, attr: str) -> str | None:
        """The id of the newest model named `name` that has attribute `attr`."""
        found = [i for i, a in self.attrs.items() if a.get("name") == name and attr in a]
        return found[-1] if found else None

    def source_of(self, renderer_name: str) -> str:
        renderer = self.newest(renderer_name, "data_source")
        if renderer is None:
            raise LookupError(f"no renderer named {renderer_name!r} in the page")
        return str(self.attrs[renderer]["data_source"]["id"])

    def source_named(self, name: str) -> str:
        source = self.newest(name, "data")
        if source is None or source not in self.columns:
            raise LookupError(f"no source named {name!r} in the page")
        return source


# --- the users

@dataclass
class Drag:
    """One drag: when it was sent and, in seconds after that, when each sign of its answer arrived."""

    tensor: str
    user: int
    source: str  # the id of the marker source the drag set
    sent_at: float
    markers_s: float | None = None
    summary_s: float | None = None
    timeline_s: float | None = None
    status_s: float | None = None
    last_s: float | None = None
    refused: str = ""

    @property
    def answered_s(self) -> float | None:
        """When the answer was on the page: the status and the markers, and the summary and timeline
        where they came."""
        if self.status_s is None or self.markers_s is None:
            return None
        return max(s for s in (self.status_s, self.markers_s, self.summary_s, self.timeline_s) if s is not None)

    @property
    def complete(self) -> bool:
        return None not in (self.status_s, self.markers_s, self.summary_s, self.timeline_s)


@dataclass
class Tally:
    """What the users measured (one event loop: no locking)."""

    drags: list[Drag] = field(default_factory=list)
    connect_s: list[float] = field(default_factory=list)
    connected_at: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started_at: float = 0.0  # after the warm-up session, when the first user starts


class User:
    """One simulated user: a tab of the page, dragging its prefetch marker every few seconds."""

    def __init__(self, url: str, seconds: float, interval: float, tally: Tally, index: int, seed: int) -> None:
        self.url, self.seconds, self.interval, self.tally, self.index = url, seconds, interval, tally, index
        self.rng = random.Random(seed)
        self.mirror = Mirror()
        self.wire: Wire | None = None
        self.pending: Drag | None = None
        self.signal = asyncio.Event()  # set when a sign of the pending drag's answer arrives
        self.tensor_id: int | None = None  # the tensor whose marker this user drags, once chosen
        self.earlier = True  # the direction of the next drag: alternates, so markers stay near their place
        self.closing = False
        self.source_ip: str | None = None  # the address it connects from (None: the system's choice)

    async def run(self) -> None:
        reader = None
        try:
            await self.open()
            reader = asyncio.create_task(self.read_loop())
            end = time.monotonic() + self.seconds
            while time.monotonic() < end and not reader.done():
                await asyncio.sleep(self.rng.uniform(0.6, 1.4) * self.interval)
                await self.drag()
        except Exception as e:  # counted and reported: one user's failure must not stop the others
            self.tally.errors.append(f"{type(e).__name__}: {e}"[:200])
        finally:
            self.closing = True
            if self.wire is not None:
                self.wire.ws.close()
            if reader is not None:
                await asyncio.gather(reader, return_exceptions=True)

    async def open(self) -> None:
        """As a tab opens the page: GET it (the server builds the session), connect, pull the document."""
        t = time.monotonic()
        page = await AsyncHTTPClient().fetch(HTTPRequest(self.url, request_timeout=OPEN_TIMEOUT_S,
                                                         network_interface=self.source_ip))
        token = TOKEN.search(page.body.decode())
        if token is None:
            raise LookupError("no session token in the page")
        request = HTTPRequest(self.url.replace("http://", "ws://", 1) + "/ws", request_timeout=OPEN_TIMEOUT_S,
                              network_interface=self.source_ip)
        ws = await websocket_connect(request, subprotocols=["bokeh", token.group(1)], max_message_size=1 << 30)
        self.wire = Wire(ws)
        ack = await self.wire.read()
        if ack.msgtype != "ACK":
            raise ConnectionError(f"{ack.msgtype} instead of ACK")
        await self.wire.send("PULL-DOC-REQ", {})
        reply = await self.wire.read()
        while reply.msgtype != "PULL-DOC-REPLY":
            reply = await self.wire.read()
        self.mirror.add(reply.content["doc"], reply.buffers)
        await self.wire.send("PATCH-DOC", {"events": [DOCUMENT_READY]})
        self.tally.connect_s.append(time.monotonic() - t)
        self.tally.connected_at.append(time.monotonic())

    async def read_loop(self) -> None:
        assert self.wire is not None
        try:
            while True:
                msg = await self.wire.read()
                if msg.msgtype == "ERROR":
                    self.tally.errors.append(f"ERROR reply: {msg.content.get('text', '')}"[:200])
                elif msg.msgtype == "PATCH-DOC":
                    for event in msg.content.get("events", []):
                        self.mirror.apply(event, msg.buffers)
                        self.note(event, msg.at)
                if self.pending is not None:
                    self.pending.last_s = msg.at - self.pending.sent_at
        except ConnectionError as e:
            if not self.closing:
                self.tally.errors.append(f"ConnectionError: {e}")
                self.signal.set()

    def note(self, event: dict[str, Any], at: float) -> None:
        """Time the signs of the pending drag's answer that `event` carries."""
        d = self.pending
        if d is None:
            return
        since = at - d.sent_at
        name = self.mirror.name(str(event.get("model", {}).get("id", "")))
        if event.get("attr") == "data" and event.get("kind") in ("ModelChanged", "ColumnDataChanged"):
            if name == SUMMARY and d.summary_s is None:
                d.summary_s = since
            if name == TIMELINE and d.timeline_s is None:
                d.timeline_s = since
            if event.get("model", {}).get("id") == d.source and d.markers_s is None:
                d.markers_s = since
        text = event.get("new") if event.get("attr") == "text" else None
        if isinstance(text, str) and d.tensor in text and d.status_s is None:
            d.status_s = since
            d.refused = "" if "issued after" in text else text[:160]
        self.signal.set()

    def target(self) -> tuple[str, dict[str, Any], int, float]:
        """The marker source, its columns, this user's marker and the boundary to drag it to."""
        source = self.mirror.source_of(MARKERS)
        columns = self.mirror.columns[source]
        bounds = np.asarray(self.mirror.columns[self.mirror.source_named(BOUNDARIES)]["x"], dtype=float)
        xs = np.asarray(columns["x"], dtype=float)
        if len(xs) == 0 or len(bounds) < 2:
            raise LookupError("no prefetch marker or op boundaries to drag to")
        ids = [int(t) for t in columns["tensor_id"]]
        if self.tensor_id not in ids:  # by tensor, not by row: an edit may reorder the rows
            self.tensor_id = ids[self.index % len(ids)]
        i = ids.index(self.tensor_id)
        here = int(np.argmin(np.abs(bounds - xs[i])))
        step = -STEP_BOUNDARIES if self.earlier else STEP_BOUNDARIES
        to = min(max(here + step, 0), len(bounds) - 1)
        if to == here:  # at the iteration's edge: go the other way
            to = min(max(here - step, 0), len(bounds) - 1)
        self.earlier = not self.earlier
        return source, columns, i, float(bounds[to])

    async def drag(self) -> None:
        assert self.wire is not None
        source, columns, i, new_x = self.target()
        moved = dict(columns)
        moved["x"] = np.array(columns["x"], dtype=float)
        moved["x"][i] = new_x
        data, buffers = encode_columns(moved)
        event = {"kind": "ModelChanged", "model": {"id": source}, "attr": "data", "new": data}
        d = self.pending = Drag(str(columns["tensor"][i]), self.index, source, time.monotonic())
        self.tally.drags.append(d)
        await self.wire.send("PATCH-DOC", {"events": [event]}, buffers)
        await self.await_answer(d)

    async def await_answer(self, d: Drag) -> None:
        """Wait for every sign of the answer, or once the status and markers came, until none came for
        `SETTLE_S` (the summary or timeline may not change); at most `LATE_S` in all."""
        while not d.complete and self.wire is not None and not self.closing:
            self.signal.clear()
            left = d.sent_at + LATE_S - time.monotonic()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self.signal.wait(), left if d.answered_s is None else min(left, SETTLE_S))
            except TimeoutError:
                if d.answered_s is not None:
                    return


# --- the server, and what it used

def tree(pid: int) -> list[int]:
    """`pid` and its descendants (`vmexplorer serve --num-procs N` forks N serving processes, and each
    server process starts worker processes)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(parents.get(p, []))
    return found


def tree_rss_kib(pid: int) -> int:
    """Resident memory of the server's processes, summed (pages they share counted in each)."""
    return sum(rss_kib(p) for p in tree(pid))


def tree_cpu_s(pid: int) -> float:
    return sum(cpu_s(p) for p in tree(pid))


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process `pid` so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


@dataclass
class Sample:
    """The server's resident memory and CPU seconds, and this client's CPU seconds, at one instant."""

    at: float
    rss_kib: int
    server_cpu_s: float
    client_cpu_s: float
    main_rss_kib: int  # the server's first process alone, without the processes it started


def sample_usage(pid: int, samples: list[Sample], stop: threading.Event) -> None:
    while not stop.is_set():
        samples.append(Sample(time.monotonic(), tree_rss_kib(pid), tree_cpu_s(pid), own_cpu_s(), rss_kib(pid)))
        stop.wait(0.5)


def at_or_after(samples: list[Sample], t: float) -> Sample:
    return next((s for s in samples if s.at >= t), samples[-1])


async def drive(url: str, users: int, seconds: float, interval: float, stagger: float, seed: int,
                tally: Tally, hostile: Any = None) -> None:
    # tornado's default of 10 would queue page GETs here (the hostile tabs open pages too)
    AsyncHTTPClient.configure(None, max_clients=users + (4 if hostile else 2))
    warm = User(url, 0.0, interval, Tally(), 0, seed)  # the server's first session imports and reads the most
    await warm.run()
    if warm.tally.errors:
        raise RuntimeError(f"the warm-up session failed: {warm.tally.errors[0]}")
    tally.started_at = time.monotonic()
    if hostile is not None:
        hostile.start(url)
    tasks = []
    try:
        for k in range(users):
            user = User(url, seconds, interval, tally, k, seed + 1 + k)
            if hostile is not None:  # a class: each browser from an address of its own
                user.source_ip = hostile.ordinary_address(k)
            tasks.append(asyncio.create_task(user.run()))
            await asyncio.sleep(stagger)  # a class opening the page within a few seconds, not in one instant
        await asyncio.wait_for(asyncio.gather(*tasks), seconds + OPEN_TIMEOUT_S + LATE_S + 60)
    finally:
        if hostile is not None:
            await hostile.finish(url)


def run_load(root: Path, args: argparse.Namespace, hostile: Any = None) -> tuple[Tally, list[Sample]]:
    tally, samples = Tally(), list[Sample]()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_load_serve_{os.getpid()}.log"
    if hostile is not None:
        hostile.tally.log = log
    with served(root, log, launcher=args.launcher, profile=args.profile_server, procs=args.num_procs) as (url, proc):
        stop = threading.Event()
        sampler = threading.Thread(target=sample_usage, args=(proc.pid, samples, stop), daemon=True)
        sampler.start()
        try:
            asyncio.run(drive(url, args.users, args.seconds, args.interval, args.stagger, args.seed, tally, hostile))
            if hostile is not None and proc.poll() is not None:
                hostile.tally.serving_at_end = False
                hostile.tally.end_check += f"; the server process had exited (status {proc.poll()})"
        finally:
            stop.set()
            sampler.join()
            samples.append(Sample(time.monotonic(), tree_rss_kib(proc.pid), tree_cpu_s(proc.pid), own_cpu_s(),
                                  rss_kib(proc.pid)))
    return tally, samples


# --- the report

def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def spread(values: list[float | None]) -> str:
    seen = [v for v in values if v is not None]
    if not seen:
        return "none seen"
    return (f"p50 {pct(seen, .5) * 1e3:.0f} ms, p95 {pct(seen, .95) * 1e3:.0f} ms, "
            f"worst {max(seen) * 1e3:.0f} ms")


def drag_figures(drags: list[Drag]) -> str:
    answered = [d for d in drags if d.answered_s is not None]
    late = sum(1 for d in drags if d.answered_s is None or d.answered_s > REPLY_TIMEOUT_S)
    refused = sum(1 for d in answered if d.refused)
    def seen(values: list[float | None]) -> str:
        return f"{spread(values)} ({sum(v is not None for v in values)} seen)"

    return (f"{len(answered)} of {len(drags)} drags answered, {late} timed out (>{REPLY_TIMEOUT_S:.0f} s), "
            f"{refused} refused; answered {spread([d.answered_s for d in drags])}; summary "
            f"{seen([d.summary_s for d in drags])}; timeline {seen([d.timeline_s for d in drags])}; markers "
            f"{spread([d.markers_s for d in drags])}; status {spread([d.status_s for d in drags])}; last patch "
            f"{spread([d.last_s for d in answered])}")


def usage_figures(tally: Tally, samples: list[Sample], steady_from: float) -> str:
    first, last = at_or_after(samples, tally.started_at), samples[-1]
    rss = [s.rss_kib for s in samples]
    steady = at_or_after(samples, steady_from)
    steady_drags = sum(1 for d in tally.drags if d.sent_at >= steady_from and d.answered_s is not None)
    per_drag = (last.server_cpu_s - steady.server_cpu_s) / steady_drags if steady_drags else float("nan")
    return (f"server RSS start {rss[0] / 1024:.0f} MiB, peak {max(rss) / 1024:.0f} MiB, end {rss[-1] / 1024:.0f} MiB; "
            f"CPU over {last.at - first.at:.0f} s: server {last.server_cpu_s - first.server_cpu_s:.0f} s, "
            f"client {last.client_cpu_s - first.client_cpu_s:.0f} s; with every page open: server "
            f"{per_drag * 1e3:.0f} ms of CPU per answered drag")


def first_drags(drags: list[Drag]) -> list[Drag]:
    """Each page's first drag: its session's first edit is cold, and the pages of a class, opened within
    seconds, start dragging together."""
    firsts: dict[int, Drag] = {}
    for d in sorted(drags, key=lambda d: d.sent_at):
        firsts.setdefault(d.user, d)
    return list(firsts.values())


def print_over_time(tally: Tally, window_s: float = 10.0) -> None:
    """Answer times by when the drag was sent, so a reader sees a start-up burst apart from the rest."""
    if not tally.drags:
        return
    start = min(d.sent_at for d in tally.drags)
    windows: dict[int, list[Drag]] = {}
    for d in tally.drags:
        windows.setdefault(int((d.sent_at - start) // window_s), []).append(d)
    for w, ds in sorted(windows.items()):
        print(f"  drags sent {w * window_s:3.0f}-{(w + 1) * window_s:3.0f} s after the first: {len(ds):3d}, "
              f"answered {spread([d.answered_s for d in ds])}")


def report(tally: Tally, samples: list[Sample], args: argparse.Namespace, hostile: Any = None) -> str:
    for e in sorted(set(tally.errors)):
        print("  error:", e)
    for e in sorted({d.refused for d in tally.drags if d.refused})[:5]:
        print("  refused:", e)
    print_over_time(tally)
    firsts = first_drags(tally.drags)
    later = [d for d in tally.drags if all(d is not f for f in firsts)]
    opened = max(tally.connected_at, default=float("inf"))  # from then on, no page build competes with drags
    c = tally.connect_s
    line = (f"{args.users} users x {args.seconds:.0f} s, a drag every {args.interval:g} s +-40% (light websocket "
            f"clients in one process, one {'vmexplorer' if args.launcher else 'panel'} serve"
            f"{f' of {args.num_procs} processes' if args.num_procs > 1 else ''}): "
            f"all drags: {drag_figures(tally.drags)}; each page's first "
            f"drag: answered {spread([d.answered_s for d in firsts])}; later drags: {drag_figures(later)}; "
            f"{len(tally.errors)} errors; page open (GET to document pulled) p50 {pct(c, .5):.1f} s, worst "
            f"{max(c, default=float('nan')):.1f} s; {usage_figures(tally, samples, opened)}")
    print(line)
    if hostile is not None:
        from bench.load_hostile import drag_p95

        p95 = (drag_p95([d.answered_s for d in tally.drags]), drag_p95([d.answered_s for d in later]))
        line += "; " + hostile.report(samples, p95, tally.started_at,
                                      [(d.user, d.sent_at, d.answered_s) for d in tally.drags], opened)
    return line


def print_profile(profile: Path, top: int = 30) -> None:
    """The server's top functions by own time and by cumulative time."""
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(str(profile), stream=out).sort_stats(order).print_stats(top)
        print(out.getvalue())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long each user drags once its page is open")
    ap.add_argument("--interval", type=float, default=3.5, help="mean seconds from a drag's answer to the next drag")
    ap.add_argument("--stagger", type=float, default=0.5, help="seconds between users opening the page")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--launcher", action="store_true",
                    help="serve with `python -m vmexplorer serve` (what the README starts) instead of panel serve")
    ap.add_argument("--num-procs", type=int, default=1, metavar="N",
                    help="with --launcher: server processes (`vmexplorer serve --num-procs N`); RSS and CPU are "
                         "then summed over them")
    ap.add_argument("--root", type=Path, default=ROOT, help="a checkout whose vmexplorer/app.py to serve")
    ap.add_argument("--profile-server", type=Path, default=None, metavar="FILE",
                    help="run the server under cProfile, write its profile to FILE and print its top functions")
    ap.add_argument("--hostile", action="store_true",
                    help="add issue 32's hostile visitors (Simulate of ResNet-152 and tuned at its bounds, the "
                         "largest upload, the module route, a GET prober); serves with `vmexplorer serve`")
    ap.add_argument("--tuned-seconds", type=float, default=None, metavar="S",
                    help="with --hostile: tuned's search seconds (default: the bound the page gives its input)")
    ap.add_argument("--upload-file", type=Path, default=None, metavar="FILE",
                    help="with --hostile: the file to upload (default: the largest the loader accepts, built)")
    args = ap.parse_args()
    root = args.root.resolve()
    if args.profile_server is not None:
        args.profile_server = args.profile_server.resolve()
    hostile = None
    if args.hostile:
        args.launcher = True  # the guarded routes and the websocket's message limit are `vmexplorer serve`'s
        sys.modules.setdefault("bench.bench_load", sys.modules[__name__])  # the helper imports this module by name
        from bench.load_hostile import Hostile

        hostile = Hostile.made(args.upload_file, args.tuned_seconds)
    elif args.tuned_seconds is not None or args.upload_file is not None:
        ap.error("--tuned-seconds and --upload-file go with --hostile")
    tally, samples = run_load(root, args, hostile)
    line = report(tally, samples, args, hostile)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    where = "" if root == ROOT else f" [served from {root}]"
    if args.hostile and args.tuned_seconds is not None:
        where += f" [tuned's search seconds {args.tuned_seconds:g}, not its bound]"
    if args.profile_server is not None:
        where += " [server under cProfile]"
        print_profile(args.profile_server)
    with open(RESULTS, "a") as f:
        f.write(f"{stamp} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}){where}: {line}\n")
    return 0 if not tally.errors and (hostile is None or hostile.ok) else 1


if __name__ == "__main__":
    sys.exit(main())
