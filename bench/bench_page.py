"""Cold first load of the served app in headless Chromium (Debian's): time to the drawn timeline, and
the bytes on the wire.

    python -m bench.bench_page [--loads 5] [--gap 3] [--root DIR] [--launcher | --compress] [--profile]

Serves `vmexplorer/app.py` of `--root` (default: this checkout) with `panel serve` on a free loopback
port, then loads the page `--loads` times, each in a fresh browser context (an empty cache), and
measures:

- drawn: ms from navigation start until the timeline is drawn, meaning Bokeh's document is idle (every
  root view has painted once) and the view of the timeline plot (the plot holding the renderer named
  "prefetch_markers", or failing that one named "ops...") has finished and has a canvas of non-zero size;
- first byte: ms from navigation start to the first byte of the page's HTML (the server building the
  session's document and the page);
- bytes: the sum of every response's body (decoded, as the browser holds it) and of what came over the
  wire (CDP's encodedDataLength: compressed where the server compressed, headers included), plus what
  the websocket brought (the document's JSON and its patches) until the page was drawn and quiet.

`--launcher` serves with `python -m vmexplorer serve` instead, what the README starts (tornado's gzip:
`panel serve` has no flag for it); `--compress` serves the same way through a bare `pn.serve(...,
compress_response=True)`, for checkouts without the launcher. `--profile` builds
`vmexplorer.ui.page.Page()` in this process a few times after a warm-up and prints its time and a
cProfile of one build (top 15 by cumulative time): where the server's time per page goes.

Prints medians and the ten largest resources; appends a dated line to bench/results/bench_page.txt.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import http.client
import io
import os
import pstats
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "bench_page.txt"
CHROMIUM = os.environ.get("VMEXPLORER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]
SERVER_START_S = 90.0
DRAWN_TIMEOUT_MS = 60_000

# true once the timeline has painted; returns performance.now() then (ms since navigation start)
TIMELINE_DRAWN = """() => {
  const B = window.Bokeh;
  if (!B || !B.documents || B.documents.length === 0 || !B.index) return false;
  const doc = B.documents[0];
  if (!doc.is_idle) return false;
  const named = (p, test) => (p.renderers || []).some(r => r.name != null && test(r.name));
  const plots = [...doc.all_models].filter(m => m.renderers !== undefined && m.x_range !== undefined);
  let timeline = plots.filter(p => named(p, n => n === "prefetch_markers"));
  if (timeline.length === 0) timeline = plots.filter(p => named(p, n => n === "ops" || n.startsWith("ops_")));
  for (const p of timeline) {
    const v = B.index.find_one_by_id(p.id);
    if (v == null || !v.has_finished()) continue;
    const el = v.canvas_view && v.canvas_view.el;
    if (el && el.getBoundingClientRect().width > 0) return performance.now();
  }
  return false;
}"""
FIRST_BYTE = "() => performance.getEntriesByType('navigation')[0].responseStart"


@dataclass
class Load:
    """One cold load: its times (ms from navigation start) and what came over the network."""

    drawn_ms: float
    first_byte_ms: float
    resources: list[tuple[str, int, int]]  # (url, body bytes, bytes on the wire)
    websocket_bytes: int
    console_errors: list[str] = field(default_factory=list)

    @property
    def body_bytes(self) -> int:
        return sum(r[1] for r in self.resources)

    @property
    def wire_bytes(self) -> int:
        return sum(r[2] for r in self.resources)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/favicon.ico")  # any answer will do; this one builds no document
        conn.getresponse().read()
        conn.close()
        return True
    except OSError:
        return False


def serve_command(port: int, compress: bool, launcher: bool = False, procs: int = 1) -> list[str]:
    if launcher:
        return [sys.executable, "-m", "vmexplorer", "serve", "--address", "127.0.0.1", "--port", str(port),
                "--allow-websocket-origin", f"127.0.0.1:{port}", *(["--num-procs", str(procs)] if procs > 1 else [])]
    if not compress:
        return [sys.executable, "-m", "panel", "serve", "vmexplorer/app.py", "--address", "127.0.0.1",
                "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}"]
    # extra keyword arguments of pn.serve reach tornado's Application settings
    code = (f"import panel as pn; pn.serve({{'app': 'vmexplorer/app.py'}}, port={port}, address='127.0.0.1', "
            f"websocket_origin=['127.0.0.1:{port}'], show=False, compress_response=True)")
    return [sys.executable, "-c", code]


@contextmanager
def served(root: Path, log: Path, compress: bool = False, launcher: bool = False,
           profile: Path | None = None, procs: int = 1) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The app of `root` served on a free loopback port for as long as the block lasts: (URL, process).
    With `profile`, the server runs under cProfile and is stopped by SIGINT, so that cProfile writes it."""
    port = free_port()
    cmd = serve_command(port, compress, launcher, procs)
    if profile is not None:
        cmd = [cmd[0], "-m", "cProfile", "-o", str(profile), *cmd[1:]]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        end = time.monotonic() + SERVER_START_S
        while not answers(port):
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"the server did not start (exit status {proc.poll()}):\n"
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/app", proc
    finally:
        proc.send_signal(signal.SIGINT if profile is not None else signal.SIGTERM)
        try:
            proc.wait(60 if profile is not None else 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def load_once(browser: Any, url: str) -> Load:
    """Open `url` in a fresh context (a cold cache) and measure until the timeline is drawn."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        urls: dict[str, str] = {}
        body: dict[str, int] = {}
        wire: dict[str, int] = {}
        ws = [0]
        errors: list[str] = []
        cdp.on("Network.requestWillBeSent", lambda e: urls.__setitem__(e["requestId"], e["request"]["url"]))
        cdp.on("Network.dataReceived", lambda e: body.__setitem__(e["requestId"],
                                                                 body.get(e["requestId"], 0) + e["dataLength"]))
        cdp.on("Network.loadingFinished", lambda e: wire.__setitem__(e["requestId"], int(e["encodedDataLength"])))
        cdp.on("Network.webSocketFrameReceived",
               lambda e: ws.__setitem__(0, ws[0] + len(e["response"]["payloadData"])))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url, wait_until="commit")
        drawn = float(page.wait_for_function(TIMELINE_DRAWN, polling="raf", timeout=DRAWN_TIMEOUT_MS).json_value())
        first_byte = float(page.evaluate(FIRST_BYTE))
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(300)  # late requests (fonts, lazily loaded bundles) still count
        resources = [(u, body.get(rid, 0), wire.get(rid, 0)) for rid, u in urls.items()
                     if u.startswith("http")]
        return Load(drawn, first_byte, resources, ws[0], errors)
    finally:
        context.close()


def largest(loads: list[Load], n: int = 10) -> list[tuple[str, int, int]]:
    last = loads[-1].resources
    return sorted(last, key=lambda r: -r[1])[:n]


def short(url: str) -> str:
    path = url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
    return path if len(path) <= 90 else "..." + path[-87:]


def measure_loads(root: Path, loads: int, compress: bool, launcher: bool = False,
                  gap_s: float = 3.0) -> tuple[list[Load], Path]:
    from playwright.sync_api import sync_playwright

    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_page_serve_{os.getpid()}.log"
    with served(root, log, compress, launcher) as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            load_once(browser, url)  # warm-up: the server's first session imports and builds the most
            out = []
            for _ in range(loads):
                time.sleep(gap_s)  # a first load is one visitor's on a server doing nothing else
                out.append(load_once(browser, url))
            return out, log
        finally:
            browser.close()


def report_loads(results: list[Load], how: str) -> str:
    med = statistics.median
    mb = 1e6
    for r in largest(results):
        print(f"  {r[1] / 1e3:9.1f} kB body {r[2] / 1e3:9.1f} kB wire  {short(r[0])}")
    errors = sorted({e for r in results for e in r.console_errors})
    for e in errors:
        print("  console error:", e[:300])
    drawn = [r.drawn_ms for r in results]
    line = (f"cold load{how}: drawn median {med(drawn):.0f} ms (min {min(drawn):.0f}, "
            f"max {max(drawn):.0f}) over {len(results)} loads; first byte median "
            f"{med([r.first_byte_ms for r in results]):.0f} ms; bytes: body "
            f"{med([r.body_bytes for r in results]) / mb:.2f} MB, "
            f"wire {med([r.wire_bytes for r in results]) / mb:.2f} MB, websocket "
            f"{med([r.websocket_bytes for r in results]) / mb:.3f} MB, {len(results[-1].resources)} requests; "
            f"{len(errors)} distinct console errors")
    print(line)
    return line


def profile_build(root: Path, builds: int = 5) -> str:
    """Build the page (`ui.page.Page`) in this process: its time per build after a warm-up, and a profile of one."""
    # --root picks the tree measured, so its vmexplorer goes first (this checkout's, run from its root, otherwise)
    sys.path.insert(0, str(root))
    from vmexplorer.ui.page import Page

    Page()  # warm-up: imports, samples read and cached
    times = []
    for _ in range(builds):
        t = time.perf_counter()
        Page()
        times.append((time.perf_counter() - t) * 1e3)
    prof = cProfile.Profile()
    prof.enable()
    Page()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(15)
    print(out.getvalue())
    line = (f"Page() in process: median {statistics.median(times):.0f} ms, worst {max(times):.0f} ms "
            f"over {builds} builds after a warm-up")
    print(line)
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--gap", type=float, default=3.0, metavar="S",
                    help="seconds the server is left alone before each load (default 3): a cold first load is "
                         "one visitor's on an otherwise idle server; many at once are bench_load.py's")
    ap.add_argument("--root", type=Path, default=ROOT, help="a checkout whose vmexplorer/app.py to serve")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--launcher", action="store_true", help="serve with `vmexplorer serve` (gzip), as the README")
    how.add_argument("--compress", action="store_true", help="serve with tornado's gzip (a bare pn.serve)")
    ap.add_argument("--profile", action="store_true", help="also profile Page() built in this process")
    args = ap.parse_args()
    root = args.root.resolve()
    results, _ = measure_loads(root, args.loads, args.compress, args.launcher, args.gap)
    served_by = " (vmexplorer serve)" if args.launcher else " (gzip)" if args.compress else ""
    lines = [report_loads(results, f"{served_by}, {args.gap:g} s apart")]
    if args.profile:
        lines.append(profile_build(root))
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    where = "" if root == ROOT else f" [served from {root}]"
    with open(RESULTS, "a") as f:
        for line in lines:
            f.write(f"{stamp} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}){where}: {line}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
