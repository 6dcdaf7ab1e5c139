"""How smooth pan and zoom are on the largest sample session, in headless Chromium (Debian's).

    python bench/bench_pan_zoom.py [--session FILE] [--steps 40]

Exports the session's timeline as the standalone HTML page (the same Bokeh figure the app shows), opens
it from disk, then scrolls the mouse wheel over the lanes (Bokeh's wheel zoom) and drags them (pan),
timing each step from the input event to the second animation frame after it, when the canvas has been
redrawn. Prints the median and the 95th percentile per step; a frame at 60 Hz is 16.7 ms. Appends to
bench/results/bench_pan_zoom.txt. By default it draws the session as the app first shows it: one
iteration (the median) of a measured session.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vmexplorer.export import export_html  # noqa: E402
from vmexplorer.session import load_session  # noqa: E402
from vmexplorer.timeline import iteration_view  # noqa: E402

CHROMIUM = os.environ.get("VMEXPLORER_CHROMIUM", "/usr/bin/chromium")
TWO_FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"


def largest_sample() -> Path:
    return max((ROOT / "sample_sessions").glob("*.vms"),
               key=lambda p: len(load_session(p).timeline.op_index) + len(load_session(p).timeline.memop_index))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--session", type=Path)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--all-iterations", action="store_true",
                    help="draw every recorded iteration (the app's default shows the median one)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    path = args.session or largest_sample()
    session = load_session(path)
    its = session.timeline.iteration_ns()
    shown = "all iterations"
    if not args.all_iterations and len(its) > 1:
        k = int(np.argsort(its, kind="stable")[(len(its) - 1) // 2])
        session, shown = iteration_view(session, k), f"iteration {k + 1} of {len(its)} (the app's default view)"
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
            times = {"zoom": [], "pan": []}
            for i in range(args.steps):
                t0 = page.evaluate("() => performance.now()")
                page.mouse.wheel(0, -120 if i % 2 == 0 else 120)
                times["zoom"].append(page.evaluate(TWO_FRAMES) - t0)
            for i in range(args.steps):
                t0 = page.evaluate("() => performance.now()")
                page.mouse.down()
                page.mouse.move(x + (40 if i % 2 == 0 else -40), y, steps=2)
                page.mouse.up()
                times["pan"].append(page.evaluate(TWO_FRAMES) - t0)
            browser.close()
    lines = [f"{path.name}, {shown}: {rows} op and memory-operation rows drawn; headless Chromium, software "
             "rendering, on this machine"]
    for kind, values in times.items():
        v = np.array(values)
        lines.append(f"{kind}: median {np.median(v):.1f} ms, 95th percentile {np.percentile(v, 95):.1f} ms per step "
                     f"(input to the second frame after it, {len(v)} steps)")
    text = "\n".join(lines)
    print(text)
    with open(ROOT / "bench" / "results" / "bench_pan_zoom.txt", "a") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
