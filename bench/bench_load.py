"""A bounded load test: K simulated users dragging prefetch markers on one `panel serve` process.

    python bench/bench_load.py [--users 20] [--seconds 60] [--root DIR]

Serves `vmexplorer/app.py` of `--root` (default: this checkout) with `panel serve` (one process) on a
free loopback port. Each user is a Bokeh client session (`bokeh.client.pull_session`, in a thread of
this process with its own event loop): the server builds a page for it as for a browser tab, and the
client holds a copy of the page's document, kept in step by the server's patches, as a browser does.
Bokeh client sessions rather than browser pages: twenty Chromium pages on two cores would mostly
measure Chromium; a client session costs the server what a tab costs it (a document, a websocket, and
the same edits), though its client side (one Python thread each) still shares the two cores.

Every 2 to 5 s (at random) a user "drags" a prefetch marker as Bokeh's PointDrawTool does in the
browser: it sets the `data` of the ColumnDataSource of the renderer named "prefetch_markers" with one
marker's x moved to the x of another marker that is issued after another op (on the time axis x is in
ms). It then waits, up to 10 s, for the server's answer, measured at the moment its patch is applied:

- status: a text of the page (any model with a `text`, such as the status line "prefetch of T now
  issued after ...", or the alert) that names the dragged tensor changes or appears;
- markers: the "prefetch_markers" renderer's data (found again by name: the page may have replaced the
  figure) no longer holds the x the user set, or the marker's op changed (the server snapped it).

Reports p50/p95/worst of both over all drags, drags timed out, errors (refusals in the alert, lost
connections, exceptions), the time each user took to open the page (pull_session), and the server's
resident memory (VmRSS, sampled every 0.5 s: at start, peak, at end). Appends to
bench/results/bench_load.txt.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import pkgutil
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_page import ROOT, served  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "bench_load.txt"
REPLY_TIMEOUT_S = 10.0
MARKERS = "prefetch_marker_glyphs"  # the renderer; its source is named "prefetch_markers"


def register_panel_models() -> None:
    """Import every Panel model module, so a client can decode a page's document (Panel registers its
    Bokeh models as their modules are imported)."""
    import panel.models

    for info in pkgutil.iter_modules(panel.models.__path__):
        try:
            importlib.import_module(f"panel.models.{info.name}")
        except Exception:  # an optional dependency missing: the app does not use that model
            pass
    # and the app's own: its components (the lesson's arrow keys) are models made as the module loads
    importlib.import_module("vmexplorer.views")


@dataclass
class Tally:
    """What the users measured, appended to from their threads (list.append is atomic)."""

    status_s: list[float] = field(default_factory=list)
    status_at: list[float] = field(default_factory=list)  # monotonic time each timed drag started
    timeout_at: list[float] = field(default_factory=list)
    connected_at: list[float] = field(default_factory=list)
    markers_s: list[float] = field(default_factory=list)
    connect_s: list[float] = field(default_factory=list)
    timeouts: int = 0
    refusals: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def renderer(doc: Any, name: str) -> Any:
    found = [m for m in doc.models if getattr(m, "name", None) == name and hasattr(m, "data_source")]
    return found[-1] if found else None


def texts(doc: Any) -> dict[str, str]:
    return {m.id: m.text for m in doc.models if isinstance(getattr(m, "text", None), str)}


class User:
    """One simulated user: a client session of the page, dragging a prefetch marker every few seconds."""

    def __init__(self, url: str, seconds: float, tally: Tally, seed: int) -> None:
        self.url, self.seconds, self.tally = url, seconds, tally
        self.rng = random.Random(seed)
        self.session: Any = None
        self.seen: set[str] = set()  # request ids the server has answered
        self.last = -1

    def run(self) -> None:
        from bokeh.client import pull_session

        try:
            t = time.monotonic()
            self.session = pull_session(url=self.url)
            self.tally.connect_s.append(time.monotonic() - t)
            self.tally.connected_at.append(time.monotonic())
            self._watch_messages()
            end = time.monotonic() + self.seconds
            while time.monotonic() < end:
                time.sleep(self.rng.uniform(2.0, 5.0))
                self._sync()
                self._drag()
        except Exception as e:  # counted and reported: one user's failure must not stop the others
            self.tally.errors.append(f"{type(e).__name__}: {e}"[:200])
        finally:
            if self.session is not None:
                self.session.close()

    def _watch_messages(self) -> None:
        """Note the request id of every message the connection reads, so a round trip can be awaited
        without bokeh's `force_roundtrip` (which drops the patches arriving while it waits)."""
        conn = self.session._connection
        pop = conn._pop_message

        async def pop_and_note() -> Any:
            msg = await pop()
            if msg is not None and "reqid" in msg.header:
                self.seen.add(msg.header["reqid"])
            return msg

        conn._pop_message = pop_and_note

    def _ping(self) -> str:
        conn = self.session._connection
        msg = conn._protocol.create("SERVER-INFO-REQ")
        conn._loop.add_callback(conn.send_message, msg)
        return str(msg.header["msgid"])

    def _loop_until(self, done: Any, timeout_s: float) -> bool:
        """Run the connection's loop, applying the server's patches, until `done()` or the timeout (a
        ping then wakes the loop, which otherwise waits for a message); whether `done()` came true."""
        conn = self.session._connection
        deadline = time.monotonic() + timeout_s
        wake = conn._loop.call_later(timeout_s, self._ping)
        conn._loop_until(lambda: done() or time.monotonic() >= deadline or not conn.connected)
        conn._loop.remove_timeout(wake)
        if not conn.connected:
            raise ConnectionError("the server closed the connection")
        return bool(done())

    def _sync(self) -> None:
        """Apply whatever the server sent while the user slept: a ping's answer comes after it."""
        ping = self._ping()
        self._loop_until(lambda: ping in self.seen, REPLY_TIMEOUT_S)

    def _drag(self) -> None:
        doc = self.session.document
        r = renderer(doc, MARKERS)
        if r is None:
            raise LookupError(f"no renderer named {MARKERS!r} in the page")
        data = {k: list(v) for k, v in r.data_source.data.items()}
        ops = [int(a) for a in data["issue_after"]]
        choices = [i for i in range(len(ops)) if i != self.last and len(set(ops) - {ops[i]}) > 0]
        i = self.rng.choice(choices)
        j = self.rng.choice([k for k in range(len(ops)) if ops[k] != ops[i]])
        self.last = i
        tensor, new_x = str(data["tensor"][i]), float(data["x"][j])
        before = texts(doc)
        data["x"][i] = new_x
        t0 = time.monotonic()
        marks: list[float] = []
        r.data_source.data = data

        def status() -> bool:
            now = self.session.document
            moved = renderer(now, MARKERS)
            if not marks and moved is not None and moved.data_source.data is not None:
                d = moved.data_source.data
                k = [str(t) for t in d["tensor"]].index(tensor) if tensor in [str(t) for t in d["tensor"]] else -1
                if k >= 0 and (float(d["x"][k]) != new_x or int(d["issue_after"][k]) != ops[i]):
                    marks.append(time.monotonic() - t0)
            return any(tensor in text and before.get(mid) != text for mid, text in texts(now).items())

        if not self._loop_until(status, REPLY_TIMEOUT_S):
            self.tally.timeouts += 1
            self.tally.timeout_at.append(t0)
            return
        self.tally.status_s.append(time.monotonic() - t0)
        self.tally.status_at.append(t0)
        if not marks:  # the markers' patch may come after the status line's
            self._loop_until(lambda: (status(), bool(marks))[1], 1.0)
        if marks:
            self.tally.markers_s.append(marks[0])
        alert = [t for mid, t in texts(self.session.document).items() if tensor in t and "issued after" not in t]
        if alert:
            self.tally.refusals.append(alert[0][:160])


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


def sample_rss(pid: int, samples: list[int], stop: threading.Event) -> None:
    while not stop.is_set():
        samples.append(rss_kib(pid))
        stop.wait(0.5)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


@dataclass
class Usage:
    """The server's resident memory samples (KiB) and the CPU seconds the server and the clients used."""

    rss_kib: list[int]
    server_cpu_s: float
    client_cpu_s: float
    wall_s: float


def run_load(root: Path, users: int, seconds: float, seed: int) -> tuple[Tally, Usage]:
    register_panel_models()
    tally, rss = Tally(), []
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_load_serve_{os.getpid()}.log"
    with served(root, log) as (url, proc):
        from bokeh.client import pull_session

        pull_session(url=url).close()  # warm-up: the server's first session imports and reads the most
        stop = threading.Event()
        cpu0, mine0, wall0 = cpu_s(proc.pid), sum(os.times()[:2]), time.monotonic()
        sampler = threading.Thread(target=sample_rss, args=(proc.pid, rss, stop), daemon=True)
        sampler.start()
        threads = [threading.Thread(target=User(url, seconds, tally, seed + k).run, daemon=True)
                   for k in range(users)]
        for t in threads:
            t.start()
            time.sleep(0.2)  # a class opening the page within a few seconds, not in one instant
        for t in threads:
            t.join(seconds + 120)
        stop.set()
        sampler.join()
        usage = Usage(rss, cpu_s(proc.pid) - cpu0, sum(os.times()[:2]) - mine0, time.monotonic() - wall0)
    return tally, usage


def spread(values: list[float]) -> str:
    def ms(v: float) -> str:
        return f"{v * 1e3:.0f}"

    worst = max(values, default=float("nan"))
    return f"p50 {ms(pct(values, .5))} ms, p95 {ms(pct(values, .95))} ms, worst {ms(worst)} ms"


def report(tally: Tally, usage: Usage, users: int, seconds: float) -> str:
    for e in sorted(set(tally.errors)):
        print("  error:", e)
    for e in sorted(set(tally.refusals))[:5]:
        print("  refused:", e)
    s, m, c, rss = tally.status_s, tally.markers_s, tally.connect_s, usage.rss_kib
    # once every user has the page open, drags no longer queue behind page builds
    opened = max(tally.connected_at, default=float("inf"))
    steady = [x for x, at in zip(s, tally.status_at) if at >= opened]
    steady_out = sum(1 for at in tally.timeout_at if at >= opened)
    line = (f"{users} users x {seconds:.0f} s (bokeh.client sessions, one panel serve): {len(s)} drags answered, "
            f"status {spread(s)}; markers {spread(m)} ({len(m)} seen); {tally.timeouts} timed out "
            f"(>{REPLY_TIMEOUT_S:.0f} s), {len(tally.refusals)} refused, {len(tally.errors)} errors; after all "
            f"{len(c)} pages were open: {len(steady)} answered, status {spread(steady)}, {steady_out} timed out; "
            f"page open p50 {pct(c, .5):.1f} s, worst {max(c, default=float('nan')):.1f} s; "
            f"server RSS start {rss[0] / 1024 if rss else 0:.0f} MiB, peak {max(rss, default=0) / 1024:.0f} MiB, "
            f"end {rss[-1] / 1024 if rss else 0:.0f} MiB; CPU over {usage.wall_s:.0f} s: server "
            f"{usage.server_cpu_s:.0f} s, clients {usage.client_cpu_s:.0f} s")
    print(line)
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--root", type=Path, default=ROOT, help="a checkout whose vmexplorer/app.py to serve")
    args = ap.parse_args()
    root = args.root.resolve()
    tally, usage = run_load(root, args.users, args.seconds, args.seed)
    line = report(tally, usage, args.users, args.seconds)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    where = "" if root == ROOT else f" [served from {root}]"
    load = os.getloadavg()[0]
    with open(RESULTS, "a") as f:
        f.write(f"{stamp} ({os.cpu_count()} cores, load {load:.1f}){where}: {line}\n")
    return 0 if not tally.errors else 1


if __name__ == "__main__":
    sys.exit(main())
