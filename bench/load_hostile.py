"""The hostile visitors of `bench_load.py --hostile` (issue 32, item 5), beside the ordinary ones.

Each comes from a loopback address of its own (tornado's `network_interface`: the connection's source
address), so the server takes it for another visitor: the app keeps each visitor (the browser's address)
to one job in its work pool, and a visitor's new action replaces the one they had. The ordinary users
come from 127.0.1.<k+1> then, one address each, as a class's browsers do.

- simulate (127.0.0.2): a tab of the page that, once the sidebar is in (after `document_ready`), sets
  Configure's model to ResNet-152 and presses Simulate, over and over, each time as soon as the last press
  was answered (and a second to read it): alternately `autovm` and `tuned`, each at a capacity it has not
  asked for before (50% to 79%, in steps of 3); for `tuned`, its knobs `search steps` and `search seconds`
  at the bounds the page gives their inputs (`--tuned-seconds` sets the seconds lower, for a smoke run).
  Widgets are found by their label in the document; a field is set as the browser sets it (a PATCH-DOC
  ModelChanged of the widget's `value`), and the press is the event BokehJS sends for a click (a
  PATCH-DOC "MessageSent" of a `button_click` bokeh_event naming the button).
- upload (127.0.0.3): a tab that uploads the largest session file the loader accepts, again and again
  (`largest-<n>.vms`, a new name each time, and two files that differ in their padding alternately: a
  file input sends nothing for the same file, and the server would see no change), as BokehJS's
  FileInput sends a picked file: one PATCH-DOC setting the input's `value` (the file in base64),
  `filename` and `mime_type`. The file (`build_upload`): a measured sample (ResNet-50 under `uvm`) with its
  iterations repeated to just under the loader's limit on values, as bench_hostile_sessions.py builds its
  largest real session, then padded with JSON whitespace and stored in gzip uncompressed, to just under
  the loader's limit on bytes: as costly to parse as a session may be, and as large on the wire.
- routes (127.0.0.4): GETs of Panel's module route (`ROUTES`), one after another with `ROUTE_GAP_S`
  between, each answer's status and time kept.
- probe (127.0.0.5): every `PROBE_EVERY_S` a GET of the page's lightest static file (the smallest of the
  page's /static/ scripts and stylesheets, chosen at the start), and every `PAGE_EVERY_S` of the page
  itself (/app), each sent on time whether or not the last has come back, so that a stalled server shows
  as many waits, not one. Time from sending to the whole response.

A press or upload is answered when the status line says so ("simulated ..." / "opened <file>") or the
alert (the model with the `alert-danger` class) shows a message; its first sign is the first text the
page changed after it (the work's progress line). Each waits at most `ANSWER_TIMEOUT_S`; once the
ordinary users are done, at most `GRACE_S` more. Then the server is asked for the page once more: whether
it still serves.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from bench.bench_load import OPEN_TIMEOUT_S, Sample, Tally, User, pct, spread

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_sessions" / "resnet50-b64-uvm-50pct.measured.vms"
ADDRESSES = {"simulate": "127.0.0.2", "upload": "127.0.0.3", "routes": "127.0.0.4", "probe": "127.0.0.5"}
ROUTES = ("/components/unittest.__main__/x/__css__/y", "/components/this/x", "/components/vmexplorer.__main__/x",
          "/components/..%2f..%2fetc%2fpasswd")
ROUTE_GAP_S = 0.25
PROBE_EVERY_S, PAGE_EVERY_S = 0.5, 5.0
GET_GOAL_S, DRAG_GOAL_S = 1.0, 0.5  # the issue's goals: no GET waits over 1 s, the drags' p95 under 0.5 s
GET_TIMEOUT_S = 120.0
ANSWER_TIMEOUT_S = 240.0  # tuned searches up to a minute; queued behind others, longer
GRACE_S = 15.0  # how long an action under way at the end may still take
FIELD_SETTLE_S = 0.5  # between setting a field and pressing the button, as a person is slower
READ_S = 1.0  # between an answer and the next action
SIMULATE_MODEL = "resnet152"
FILE_MIME = "application/octet-stream"  # what a browser gives a .vms file
CHUNK_BYTES = 4 * 2**20  # the page's pieces, unless its file input says another size
BUILD_MARGIN = 64 * 1024  # bytes under the loader's limits


def ordinary_address(k: int) -> str:
    return f"127.0.{1 + k // 254}.{1 + k % 254}"


# --- what they did

@dataclass
class Action:
    """A press of Simulate or an upload: when it was sent and, in seconds after that, its first sign
    and its answer."""

    visitor: str
    what: str
    sent_at: float
    sent_s: float | None = None  # its last frame written (an upload's 64 MiB take a while)
    first_s: float | None = None
    answer_s: float | None = None
    answer: str = ""
    refused: bool = False
    progress: str = ""  # the last other text seen before the answer
    lost: str = ""


@dataclass
class Get:
    what: str  # "static", "page", or the route's path
    sent_at: float
    seconds: float | None  # None: no answer (an error or a timeout)
    code: int = 0
    error: str = ""


@dataclass
class HostileTally:
    actions: list[Action] = field(default_factory=list)
    gets: list[Get] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    upload: str = ""  # what the uploaded file is
    static_url: str = ""
    end_check: str = ""
    serving_at_end: bool = False
    log: Path | None = None  # the server's


# --- the tabs

def changed(model_id: str, attr: str, new: Any) -> dict[str, Any]:
    return {"kind": "ModelChanged", "model": {"id": model_id}, "attr": attr, "new": new}


def button_click(model_id: str) -> dict[str, Any]:
    """The event BokehJS sends when a button is clicked (bokeh 3: a ModelEvent `button_click`)."""
    return {"kind": "MessageSent", "msg_type": "bokeh_event",
            "msg_data": {"type": "event", "name": "button_click",
                         "values": {"type": "map", "entries": [["model", {"id": model_id}]]}}}


def data_event(model_id: str, data: dict[str, Any]) -> dict[str, Any]:
    """The event a Panel component's `model.send_msg(data)` sends (a ModelEvent `data_event`)."""
    return {"kind": "MessageSent", "msg_type": "bokeh_event",
            "msg_data": {"type": "event", "name": "data_event",
                         "values": {"type": "map", "entries": [
                             ["model", {"id": model_id}],
                             ["data", {"type": "map", "entries": [[k, v] for k, v in data.items()]}]]}}}


class HostileTab(User):
    """A tab of the page from an address of its own, doing one kind of action again and again."""

    role = ""

    def __init__(self, url: str, stop: asyncio.Event, hostile: HostileTally) -> None:
        super().__init__(url, 0.0, 1.0, Tally(), 0, 0)
        self.source_ip = ADDRESSES[self.role]
        self.stop, self.hostile = stop, hostile
        self.action: Action | None = None
        self.reader: asyncio.Task[None] | None = None
        self.stopped_at: float | None = None
        self.alert_ids: set[str] = set()  # the page's alert: its text is a refusal

    async def visit(self) -> None:
        try:
            await self.open()
            self.alert_ids = {i for i, a in self.mirror.attrs.items()
                              if "alert-danger" in json.dumps(a.get("css_classes", ""))}
            if not self.alert_ids:
                self.hostile.errors.append(f"{self.role}: no alert (alert-danger) in the page: a refusal goes unseen")
            self.reader = asyncio.create_task(self.read_loop())
            await self.act()
        except Exception as e:  # reported: one visitor's failure must not stop the run
            self.hostile.errors.append(f"{self.role}: {type(e).__name__}: {e}"[:300])
        finally:
            self.closing = True
            if self.wire is not None:
                self.wire.ws.close()
            if self.reader is not None:
                await asyncio.gather(self.reader, return_exceptions=True)
            self.hostile.errors.extend(f"{self.role}: {e}" for e in self.tally.errors)

    async def act(self) -> None:
        raise NotImplementedError

    @property
    def going(self) -> bool:
        return not self.stop.is_set() and (self.reader is None or not self.reader.done())

    # finding and setting widgets in the tab's copy of the document
    def find(self, test: Any) -> str | None:
        """The newest model whose attributes pass `test`."""
        found = [i for i, a in self.mirror.attrs.items() if test(a)]
        return found[-1] if found else None

    async def widget(self, what: str, test: Any, since: set[str] | None = None) -> str:
        """Wait for a model passing `test` (one not in `since`, if given): the sidebar comes after
        `document_ready`, a policy's knobs after the policy is picked."""
        end = time.monotonic() + OPEN_TIMEOUT_S
        while True:
            found = self.find(lambda a: test(a))
            if found is not None and (since is None or found not in since):
                return found
            if time.monotonic() > end or (self.reader is not None and self.reader.done()):
                raise LookupError(f"no {what} in the page")
            await asyncio.sleep(0.2)

    async def set_value(self, model_id: str, attr: str, value: Any) -> None:
        assert self.wire is not None
        self.mirror.attrs.setdefault(model_id, {})[attr] = value  # the server does not echo a client's change
        await self.wire.send("PATCH-DOC", {"events": [changed(model_id, attr, value)]})

    # the answer
    def is_answer(self, text: str) -> bool:
        raise NotImplementedError

    def note(self, event: dict[str, Any], at: float) -> None:
        a = self.action
        if a is None or a.answer_s is not None:
            return
        text = event.get("new") if event.get("attr") == "text" else None
        if not isinstance(text, str):
            return
        since = at - a.sent_at
        if a.first_s is None:
            a.first_s = since
        model = str(event.get("model", {}).get("id", ""))
        if model in self.alert_ids and text:
            a.answer_s, a.answer, a.refused = since, text[:300], True
        elif self.is_answer(text):
            a.answer_s, a.answer = since, text[:300]
        else:
            a.progress = text[:160]
        self.signal.set()

    async def send_and_wait(self, action: Action, events: list[dict[str, Any]],
                            buffers: list[tuple[str, bytes]] | None = None) -> None:
        """Send `events` as one patch and wait for the answer (the server's, or the connection's end)."""
        assert self.wire is not None
        self.hostile.actions.append(action)
        self.action = action
        await self.wire.send("PATCH-DOC", {"events": events}, buffers)
        action.sent_s = time.monotonic() - action.sent_at
        while action.answer_s is None:
            if self.reader is not None and self.reader.done():
                action.lost = "the connection ended before the answer"
                break
            left = action.sent_at + ANSWER_TIMEOUT_S - time.monotonic()
            if self.stop.is_set():
                self.stopped_at = self.stopped_at or time.monotonic()
                left = min(left, self.stopped_at + GRACE_S - time.monotonic())
            if left <= 0:
                break
            self.signal.clear()
            try:
                await asyncio.wait_for(self.signal.wait(), min(left, 1.0))
            except TimeoutError:
                pass
        self.action = None


class SimulateTab(HostileTab):
    """Presses Simulate on ResNet-152, alternately `autovm` and `tuned` at its bounds."""

    role = "simulate"
    tuned_seconds: float | None = None  # None: the bound the page gives

    def is_answer(self, text: str) -> bool:
        return text.startswith("simulated ")

    async def act(self) -> None:
        by_title = lambda title: lambda a: a.get("title") == title  # noqa: E731
        model = await self.widget("model picker", by_title("Model"))
        capacity = await self.widget("capacity field", lambda a: str(a.get("title", "")).startswith("Capacity"))
        policy = await self.widget("policy picker", by_title("Policy"))
        simulate = await self.widget("Simulate button", lambda a: a.get("label") == "Simulate")
        await self.set_value(model, "value", SIMULATE_MODEL)
        k = 0
        while self.going:
            name = "tuned" if k % 2 else "autovm"
            share = f"{50 + (3 * k) % 30}%"
            await self.set_value(capacity, "value", share)
            what = f"{SIMULATE_MODEL} {name} at {share}"
            if self.mirror.attrs[policy].get("value") != name:
                before = set(self.mirror.attrs)
                await self.set_value(policy, "value", name)
                if name == "tuned":  # its knobs are new widgets, drawn when the policy changes
                    await self.widget("tuned's knobs", lambda a: str(a.get("title", "")).startswith("search seconds"),
                                      since=before)
            if name == "tuned":
                knobs = []
                for knob in ("search steps", "search seconds"):
                    i = self.find(lambda a, knob=knob: str(a.get("title", "")).startswith(knob))
                    if i is None:
                        raise LookupError(f"no {knob!r} knob for tuned in the page")
                    bound = self.mirror.attrs[i].get("high")
                    if knob == "search seconds" and self.tuned_seconds is not None:
                        bound = self.tuned_seconds
                    if bound is None:
                        raise LookupError(f"tuned's {knob!r} knob has no upper bound in the page")
                    await self.set_value(i, "value", bound)
                    knobs.append(f"{knob} {bound:g}")
                what += f" ({', '.join(knobs)})"
            await asyncio.sleep(FIELD_SETTLE_S)
            await self.send_and_wait(Action(self.role, what, time.monotonic()), [button_click(simulate)])
            k += 1
            await asyncio.sleep(READ_S)


class UploadTab(HostileTab):
    """Uploads the largest file the loader accepts, again and again."""

    role = "upload"
    files: list[bytes] = []

    def is_answer(self, text: str) -> bool:
        a = self.action
        return a is not None and text.startswith("opened ") and a.what.split(" ")[0] in text

    async def act(self) -> None:
        # the page's file input (ui/upload.py) is a Panel component (a ReactiveESM model) whose script
        # sends a file's pieces; its settings are at their defaults, which Bokeh does not send
        upload = await self.widget("file input", lambda a: 'kind: "part"' in str(a.get("esm", "")))
        chunk = CHUNK_BYTES
        k = 0
        while self.going:
            name = f"largest-{k + 1}.vms"
            data = self.files[k % len(self.files)]
            count = max(1, -(-len(data) // chunk))
            action = Action(self.role, f"{name} ({len(data) / 2**20:.2f} MiB)", time.monotonic())
            assert self.wire is not None
            for i in range(count):  # a message each, its bytes a binary buffer, as the browser sends them
                piece = (uuid.uuid4().hex, data[i * chunk:(i + 1) * chunk])
                event = data_event(upload, {"kind": "part", "name": name, "size": len(data), "index": i,
                                            "count": count, "data": {"type": "bytes", "data": {"id": piece[0]}}})
                if i < count - 1:
                    await self.wire.send("PATCH-DOC", {"events": [event]}, [piece])
                else:
                    await self.send_and_wait(action, [event], [piece])
            k += 1
            await asyncio.sleep(READ_S)


# --- the GETs

async def timed_get(client: AsyncHTTPClient, url: str, what: str, source_ip: str, gets: list[Get],
                    timeout: float = GET_TIMEOUT_S) -> Get:
    g = Get(what, time.monotonic(), None)
    gets.append(g)
    try:
        r = await client.fetch(HTTPRequest(url, network_interface=source_ip, request_timeout=timeout,
                                           follow_redirects=False), raise_error=False)
        g.code, g.seconds = r.code, time.monotonic() - g.sent_at
        if r.code >= 500 or r.code == 599:
            g.error = f"{r.code} {r.reason}"
    except Exception as e:  # refused, reset, timed out: the server may be gone
        g.error = f"{type(e).__name__}: {e}"[:200]
    return g


async def routes(base: str, stop: asyncio.Event, hostile: HostileTally) -> None:
    client = AsyncHTTPClient(force_instance=True, max_clients=4)
    try:
        while not stop.is_set():
            for path in ROUTES:
                await timed_get(client, base + path, path, ADDRESSES["routes"], hostile.gets)
                await asyncio.sleep(ROUTE_GAP_S)
    finally:
        client.close()


async def lightest_static(client: AsyncHTTPClient, url: str, base: str) -> str:
    """The smallest /static/ file the page loads (its path), by its size (HEAD: nothing is sent)."""
    page = await client.fetch(HTTPRequest(url, network_interface=ADDRESSES["probe"], request_timeout=OPEN_TIMEOUT_S))
    paths = sorted(set(re.findall(r"""(?:src|href)=["']((?:\.\./|/)?static/[^"'?]+)""", page.body.decode())))
    sizes = []
    for path in paths:
        path = "/" + path.lstrip("./")
        r = await client.fetch(HTTPRequest(base + path, method="HEAD", network_interface=ADDRESSES["probe"]),
                               raise_error=False)
        if r.code == 200 and r.headers.get("Content-Length", "").isdigit():
            sizes.append((int(r.headers["Content-Length"]), path))
    if not sizes:
        raise LookupError("the page loads no /static/ file")
    return min(sizes)[1]


async def probe(url: str, base: str, stop: asyncio.Event, hostile: HostileTally) -> None:
    client = AsyncHTTPClient(force_instance=True, max_clients=256)
    try:
        hostile.static_url = await lightest_static(client, url, base)
        pending: list[asyncio.Task[Get]] = []
        t0, k = time.monotonic(), 0
        while not stop.is_set():
            pending.append(asyncio.create_task(
                timed_get(client, base + hostile.static_url, "static", ADDRESSES["probe"], hostile.gets)))
            if k % round(PAGE_EVERY_S / PROBE_EVERY_S) == 0:
                pending.append(asyncio.create_task(timed_get(client, url, "page", ADDRESSES["probe"], hostile.gets)))
            k += 1
            pending = [p for p in pending if not p.done()]
            await asyncio.sleep(max(0.0, t0 + k * PROBE_EVERY_S - time.monotonic()))
        if pending:
            await asyncio.wait(pending, timeout=GRACE_S)
    except Exception as e:
        hostile.errors.append(f"probe: {type(e).__name__}: {e}"[:300])
    finally:
        client.close()


# --- the run

class Hostile:
    """The hostile visitors of one run: started beside the ordinary users, stopped when they are done."""

    def __init__(self, files: list[bytes], upload: str, tuned_seconds: float | None) -> None:
        self.tally = HostileTally(upload=upload)
        self.files, self.tuned_seconds = files, tuned_seconds
        self.stop: asyncio.Event | None = None  # made in the visitors' process, for its loop

    @classmethod
    def made(cls, upload_file: Path | None, tuned_seconds: float | None) -> Hostile:
        """With the file to upload: `upload_file`, or the largest the loader accepts (built, or kept)."""
        if upload_file is not None:
            data = upload_file.read_bytes()
            # a second file for every other upload (the same one twice in a row changes nothing): the same
            # text gzipped again at another level, where it is gzip
            try:
                other = gzip.compress(gzip.decompress(data), 6, mtime=1)  # its header differs, at least
            except (OSError, EOFError, ValueError):
                other = data  # not gzip: the server sees the same file again, and does nothing
            return cls([data, other], f"{upload_file} ({len(data) / 2**20:.2f} MiB; every other upload the "
                                      f"same text gzipped again: {len(other) / 2**20:.2f} MiB)", tuned_seconds)
        t = time.monotonic()
        files, about = build_upload()
        print(f"the upload ({time.monotonic() - t:.0f} s to have it): {about}", flush=True)
        return cls(files, about, tuned_seconds)

    @staticmethod
    def ordinary_address(k: int) -> str:
        return ordinary_address(k)

    def report(self, samples: list[Sample], drags_p95: tuple[float, float], t0: float,
               drags: list[tuple[int, float, float | None]], opened: float) -> str:
        return report(self.tally, samples, drags_p95, t0, drags, opened)

    @property
    def ok(self) -> bool:
        """No visitor failed and the server still served at the end."""
        return not self.tally.errors and self.tally.serving_at_end

    def start(self, url: str) -> None:
        """Start the visitors in a process of their own: in the ordinary users' process, reading the large
        patches the hostile tabs get (a 189-iteration session drawn) would hold up the reading of every
        ordinary user's answer, and the times measured would be the client's."""
        ctx = multiprocessing.get_context("spawn")
        self._stop_flag = ctx.Event()
        parent, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_visitors_process, args=(self, url, child), daemon=True)
        self._proc.start()  # `self` goes to the child as it is now: without the pipe's other end
        child.close()
        self._conn = parent

    async def finish(self, url: str) -> None:
        """Stop them (an action under way may take `GRACE_S` more), then ask for the page once more, and
        take their tally back."""
        self._stop_flag.set()
        loop = asyncio.get_running_loop()
        ready = await loop.run_in_executor(None, self._conn.poll, GRACE_S + 120)
        if ready:
            self.tally = self._conn.recv()
        else:
            self.tally.errors.append("the hostile visitors' process did not report")
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()

    async def _visit(self, url: str) -> None:
        """In the visitors' process: visit until told to stop, then check the page once more."""
        base = url.rsplit("/app", 1)[0]
        AsyncHTTPClient.configure(None, max_clients=8)
        stop = self.stop = asyncio.Event()
        simulate = SimulateTab(url, stop, self.tally)
        simulate.tuned_seconds = self.tuned_seconds
        upload = UploadTab(url, stop, self.tally)
        upload.files = self.files
        tasks = [asyncio.create_task(c) for c in (
            simulate.visit(), upload.visit(), routes(base, stop, self.tally), probe(url, base, stop, self.tally))]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._stop_flag.wait)
        stop.set()
        done, late = await asyncio.wait(tasks, timeout=GRACE_S + 30)
        for task in late:
            task.cancel()
            self.tally.errors.append("a hostile visitor did not stop in time")
        client = AsyncHTTPClient(force_instance=True)
        try:
            g = await timed_get(client, url, "page at the end", "127.0.0.1", [], timeout=60)
        finally:
            client.close()
        self.tally.serving_at_end = g.code == 200
        self.tally.end_check = (f"GET /app answered {g.code} in {g.seconds:.2f} s" if g.seconds is not None
                                else f"GET /app failed: {g.error}")


def _visitors_process(hostile: Hostile, url: str, conn: Any) -> None:
    try:
        asyncio.run(hostile._visit(url))
    except Exception as e:
        hostile.tally.errors.append(f"the hostile visitors' process: {type(e).__name__}: {e}"[:300])
    conn.send(hostile.tally)
    conn.close()


# --- the file

def build_upload(fresh: bool = False) -> tuple[list[bytes], str]:
    """The largest session file the loader accepts, in two versions (their padding differs), and what it
    is. Built in a child process (this one stays small) and kept in the temporary folder, keyed by the
    sample and the app's source (a change to the loader builds it again)."""
    key = hashlib.sha1(SAMPLE.read_bytes())
    for path in sorted((ROOT / "vmexplorer").rglob("*.py")):
        key.update(path.read_bytes())
    key.update(Path(__file__).read_bytes())
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_load_upload_{key.hexdigest()[:12]}"
    meta = folder / "file.json"
    if fresh or not meta.exists():
        for old in folder.parent.glob("bench_load_upload_*"):  # built for another version of the app
            if old != folder:
                for f in old.iterdir():
                    f.unlink()
                old.rmdir()
        folder.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "bench.load_hostile", "--make", str(folder)], cwd=ROOT, check=True)
    about = json.loads(meta.read_text())
    return [(folder / name).read_bytes() for name in about["files"]], about["about"]


def _make(folder: Path) -> None:
    """Build the files: the sample tiled to just under the limit on values (fewer, if the loader refuses
    that), padded with whitespace to just under the limit on bytes, gzip stored; each checked."""
    from bench.bench_hostile_sessions import tiled
    from vmexplorer.session.files import MAX_FILE_BYTES, MAX_JSON_BYTES, MAX_VALUES, session_from_bytes

    target, refusals = MAX_VALUES - 150_000, []
    for _ in range(12):
        text = tiled(SAMPLE, target)
        if len(text) <= MAX_JSON_BYTES - BUILD_MARGIN:
            try:
                session = session_from_bytes(gzip.compress(text, 1, mtime=0), "the tiled sample")
                break
            except Exception as e:
                refusals.append(f"{target:,} values: {e}"[:200])
        target = int(target * 0.85)
    else:
        raise RuntimeError("no tiling of the sample is accepted: " + "; ".join(refusals))
    iterations = session.timeline.iterations
    del session
    size = min(MAX_JSON_BYTES, MAX_FILE_BYTES) - BUILD_MARGIN
    names = []
    for k, pad in enumerate((b" ", b"\n")):
        padded = text[:-1] + pad * (size - len(text)) + text[-1:]  # whitespace before the last `}`
        data = gzip.compress(padded, compresslevel=0, mtime=0)  # stored: as large as the text
        assert len(data) <= MAX_FILE_BYTES, len(data)
        t = time.monotonic()
        session_from_bytes(data, "the padded file")  # raises if the loader refuses it
        names.append(f"largest-{k}.vms")
        (folder / names[-1]).write_bytes(data)
        print(f"built {folder / names[-1]}: {len(data) / 2**20:.2f} MiB, loaded here in "
              f"{time.monotonic() - t:.1f} s", file=sys.stderr)
    values = 1 + sum(text.count(c) for c in (b"{", b"[", b",", b":"))
    about = (f"{SAMPLE.name.split('.')[0]} tiled to {iterations} iterations ({values:,} JSON values, "
             f"{len(text) / 2**20:.1f} MiB of JSON; the limit {MAX_VALUES:,}"
             f"{'; refused with more: ' + refusals[-1] if refusals else ''}), "
             f"padded with whitespace to {size / 2**20:.2f} MiB and gzip-stored: a {len(data) / 2**20:.2f} MiB file "
             f"(the limit {MAX_FILE_BYTES / 2**20:.2f} MiB), {len(base64.b64encode(data)) / 2**20:.2f} MiB in base64")
    (folder / "file.json").write_text(json.dumps({"files": names, "about": about}))


# --- the report

def get_figures(gets: list[Get]) -> str:
    times = [g.seconds for g in gets if g.seconds is not None]
    failed = [g for g in gets if g.seconds is None]
    over = sum(1 for t in times if t > GET_GOAL_S)
    return (f"{len(gets)} GETs, {over} over {GET_GOAL_S:g} s, {len(failed)} unanswered; "
            f"{spread(list(times)) if times else 'none answered'}")


def action_line(a: Action, t0: float) -> str:
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    outcome = ("refused: " if a.refused else "answered: ") + repr(a.answer) if a.answer_s is not None else \
        f"NOT answered ({a.lost or 'no answer in time'}; last text {a.progress!r})"
    return (f"  {a.visitor} at {a.sent_at - t0:5.1f} s: {a.what}: sent in {s(a.sent_s)}, first sign "
            f"{s(a.first_s)}, answer {s(a.answer_s)}; {outcome}")


def stalls(h: HostileTally, t0: float) -> list[str]:
    """When the server kept GETs (the prober's and the routes') waiting over `GET_GOAL_S`: each such wait
    from its sending to its answer, overlapping ones merged, in time order with the hostile actions (sent
    and answered), so that a reader sees what each wait came with."""
    end = max((g.sent_at + (g.seconds or 0.0) for g in h.gets), default=t0)
    spans = sorted((g.sent_at, g.sent_at + (g.seconds if g.seconds is not None else end - g.sent_at))
                   for g in h.gets if g.seconds is None or g.seconds > GET_GOAL_S)
    merged: list[list[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    events = [(a, f"  {a - t0:6.1f} s  GETs waited over {GET_GOAL_S:g} s until {b - t0:.1f} s ({b - a:.1f} s; "
                  f"{sum(1 for x, _ in spans if a <= x <= b)} GETs)") for a, b in merged]
    for x in h.actions:
        events.append((x.sent_at, f"  {x.sent_at - t0:6.1f} s  {x.visitor}: sent {x.what}"))
        if x.answer_s is not None:
            events.append((x.sent_at + x.answer_s, f"  {x.sent_at + x.answer_s - t0:6.1f} s  {x.visitor}: "
                                                   f"{'refused' if x.refused else 'answered'} {x.what}"))
    return ["  what happened when (s from the first user):"] + [text for _, text in sorted(events)]


def server_log(log: Path | None) -> str:
    """What the server's log holds that it should not: tracebacks, and what an imported module printed."""
    if log is None or not log.exists():
        return "no log"
    text = log.read_text(errors="replace")
    zen = "Beautiful is better than ugly" in text  # `this` imported: the Zen of Python printed
    return (f"{text.count('Traceback')} tracebacks, {'the Zen of Python printed' if zen else 'no Zen of Python'}, "
            f"{text.count(' 500 ')} answers 500 (in {log})")


def rss_by_window(samples: list[Sample], t0: float, window_s: float = 10.0) -> str:
    windows: dict[int, tuple[int, int]] = {}
    for x in samples:
        if x.at >= t0:
            w = int((x.at - t0) // window_s)
            main, total = windows.get(w, (0, 0))
            windows[w] = (max(main, x.main_rss_kib), max(total, x.rss_kib))
    return ", ".join(f"{m / 1024:.0f}/{t / 1024:.0f}" for _, (m, t) in sorted(windows.items()))


def report(h: HostileTally, samples: list[Sample], drags_p95: tuple[float, float], t0: float,
           drags: list[tuple[int, float, float | None]], opened: float) -> str:
    """Print what the hostile visitors did and saw; return the part of the results line about them.
    `drags` are the ordinary users' (user, sent at, answered after); `opened` when the last of them had
    its page."""
    print(f"hostile visitors (from {', '.join(f'{r} {a}' for r, a in ADDRESSES.items())}):")
    print(f"  the upload: {h.upload}")
    for e in sorted(set(h.errors)):
        print("  error:", e)
    for a in h.actions:
        print(action_line(a, t0))
    parts = []
    for role in ("simulate", "upload"):
        acts = [a for a in h.actions if a.visitor == role]
        answered = [a for a in acts if a.answer_s is not None]
        refused = sum(a.refused for a in answered)
        parts.append(f"{role}: {len(answered)} of {len(acts)} answered ({refused} refused), answer "
                     f"{spread([a.answer_s for a in acts])}")
    route_gets = [g for g in h.gets if g.what in ROUTES]
    codes: dict[str, dict[str, int]] = {}
    for g in route_gets:
        c = codes.setdefault(g.what, {})
        key = str(g.code) if g.seconds is not None else "no answer"
        c[key] = c.get(key, 0) + 1
    for path, c in codes.items():
        print(f"  route {path}: " + ", ".join(f"{k} x{v}" for k, v in sorted(c.items())))
    for g in {g.error: g for g in route_gets if g.error}.values():
        print(f"  route {g.what}: {g.error}")
    parts.append(f"routes: {get_figures(route_gets)}, answers "
                 f"{'/'.join(sorted({str(g.code) for g in route_gets if g.seconds is not None})) or 'none'}")
    static = [g for g in h.gets if g.what == "static"]
    page = [g for g in h.gets if g.what == "page"]
    for line in stalls(h, t0):
        print(line)
    parts.append(f"GET {h.static_url}: {get_figures(static)}; GET /app: {get_figures(page)}")
    main_rss = [x.main_rss_kib for x in samples]
    parts.append(f"server process RSS start {main_rss[0] / 1024:.0f} MiB, peak {max(main_rss) / 1024:.0f} MiB, end "
                 f"{main_rss[-1] / 1024:.0f} MiB (with its worker processes: peak "
                 f"{max(x.rss_kib for x in samples) / 1024:.0f} MiB)")
    print(f"  server RSS by 10 s from the first user, peak per window, MiB (server process/with workers): "
          f"{rss_by_window(samples, t0)}")
    gets_over = sum(1 for g in static + page if g.seconds is None or g.seconds > GET_GOAL_S)
    all_p95, later_p95 = drags_p95
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    parts.append(f"goals: drag p95 under {DRAG_GOAL_S * 1e3:.0f} ms (all {all_p95 * 1e3:.0f} ms, later "
                 f"{later_p95 * 1e3:.0f} ms): {met(all_p95 < DRAG_GOAL_S and later_p95 < DRAG_GOAL_S)}; no GET over "
                 f"{GET_GOAL_S:g} s ({gets_over} were): {met(gets_over == 0)}")
    # a class opening its pages at once builds them all on the event loop, hostile or not: apart from
    # that, what the hostile visitors cost everyone else once every page is open
    firsts = {a.visitor: a.sent_at for a in reversed(h.actions)}  # each hostile visitor's first action
    first_answers: dict[int, float] = {}
    for user, at, s in sorted(drags, key=lambda d: d[1]):
        first_answers.setdefault(user, at + (s or 0.0))  # each page's first drag, cold, in the burst
    steady = max([opened, *firsts.values(), *first_answers.values()])
    late_gets = [g for g in static + page if g.sent_at >= steady]
    late_over = sum(1 for g in late_gets if g.seconds is None or g.seconds > GET_GOAL_S)
    late_drags = [s for _, at, s in drags if at >= steady]
    parts.append(f"once every page was open, each page's first drag answered and the hostile visitors at "
                 f"work (from {steady - t0:.0f} s): "
                 f"{len(late_drags)} drags, answered {spread(late_drags)}; GETs {get_figures(late_gets)}: "
                 f"drag p95 under {DRAG_GOAL_S * 1e3:.0f} ms {met(drag_p95(late_drags) < DRAG_GOAL_S)}, no GET "
                 f"over {GET_GOAL_S:g} s {met(late_over == 0)}")
    parts.append(f"server log: {server_log(h.log)}")
    parts.append(f"still serving at the end: {'yes' if h.serving_at_end else 'NO'} ({h.end_check})")
    for p in parts:
        print("  " + p)
    return "hostile visitors: " + "; ".join(parts)


def drag_p95(values: list[float | None]) -> float:
    """The p95 of answer times, a drag not answered counting as never."""
    return pct([float("inf") if v is None else v for v in values], .95)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--make":
        _make(Path(sys.argv[2]))
    else:
        sys.exit("usage: python -m bench.load_hostile --make FOLDER "
                 "(python -m bench.bench_load --hostile runs the visitors)")
