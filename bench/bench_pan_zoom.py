"""How smooth pan and zoom are on the largest sample session, in headless Chromium (Debian's).

    python -m bench.bench_pan_zoom [--session FILE] [--moves 60] [--all-iterations]

Exports the session's timeline as the standalone HTML page (the same Bokeh figure the app shows; by
default one iteration, the median, as the app first shows a measured session), opens it from disk,
then drags the lanes (pan) and turns the mouse wheel over them (zoom) as fast as Playwright sends the
events, while the page records the time of every animation frame. Prints, for each, the median and
95th percentile interval between frames during the gesture: 16.7 ms is 60 frames a second, 33 ms 30.
Appends to bench/results/bench_pan_zoom.txt.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from vmexplorer.plots.export import export_html
from vmexplorer.session import load_session
from vmexplorer.session.iterations import iteration_view

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("VMEXPLORER_CHROMIUM", "/usr/bin/chromium")
# one recorder at a time: a new gesture's recorder stops the last one's loop
RECORD_FRAMES = ("() => { window.__frames = []; const g = (window.__gen = (window.__gen || 0) + 1); "
                 "const tick = t => { if (g !== window.__gen) return; window.__frames.push(t); "
                 "requestAnimationFrame(tick); }; requestAnimationFrame(tick); }")
TWO_FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"


def largest_sample() -> Path:
    def rows(path: Path) -> int:
        tl = load_session(path).timeline
        return len(tl.op_index) + len(tl.memop_index)

    return max((ROOT / "sample_sessions").glob("*.vms"), key=rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--session", type=Path)
    ap.add_argument("--moves", type=int, default=60)
    ap.add_argument("--all-iterations", action="store_true",
                    help="draw every recorded iteration (the app's default shows the median one)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    path = args.session or largest_sample()
    session = load_session(path)
    n = session.timeline.iterations
    shown = "all iterations"
    if not args.all_iterations and n > 1:
        k = session.timeline.typical_iteration()
        session, shown = iteration_view(session, k), f"iteration {k + 1} of {n} (the app's default view)"
    rows = len(session.timeline.op_index) + len(session.timeline.memop_index)
    with tempfile.TemporaryDirectory() as d:
        page_path = Path(d) / "timeline.html"
        export_html(session, page_path, force=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(page_path.as_uri())
            page.wait_for_selector("canvas", timeout=60_000)
            page.wait_for_timeout(1500)
            box = page.locator("canvas").first.bounding_box()
            assert box is not None
            x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
            page.mouse.move(x, y)
            frames = {}
            for gesture in ("pan", "zoom"):
                page.evaluate(RECORD_FRAMES)
                t0 = page.evaluate("() => performance.now()")
                if gesture == "pan":
                    page.mouse.down()
                    for i in range(args.moves):
                        page.mouse.move(x + ((i % 10) - 5) * 8, y)
                    page.mouse.up()
                else:
                    for i in range(args.moves):
                        page.mouse.wheel(0, -60 if (i // 10) % 2 == 0 else 60)
                page.evaluate(TWO_FRAMES)
                t1 = page.evaluate("() => performance.now()")
                stamps = np.array(page.evaluate("() => window.__frames"))
                frames[gesture] = np.diff(stamps[(stamps >= t0) & (stamps <= t1)])
            browser.close()
    lines = [f"{path.name}, {shown}: {rows} op and memory-operation rows drawn; headless Chromium, software "
             f"rendering, {os.cpu_count()} cores"]
    for gesture, gaps in frames.items():
        lines.append(f"{gesture}: frames {np.median(gaps):.1f} ms apart (median), {np.percentile(gaps, 95):.1f} ms "
                     f"(95th percentile), over {len(gaps)} frames of {args.moves} input events")
    text = "\n".join(lines)
    print(text)
    with open(ROOT / "bench" / "results" / "bench_pan_zoom.txt", "a") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
