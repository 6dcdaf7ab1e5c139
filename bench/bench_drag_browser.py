"""Drag a prefetch marker with the mouse in the served app, in headless Chromium (Debian's), and time
the server's answer as the page shows it.

    python -m bench.bench_drag_browser [--drags 10] [--root DIR]

Serves `vmexplorer/app.py` of `--root` (default: this checkout) with `panel serve`, opens it in one
page (1280x720) and drags, `--drags` times, a prefetch marker of the timeline (the renderer named
"prefetch_markers"; its screen position comes from the plot view's frame scales) with Playwright's
mouse onto the x of another marker issued after another op, as a person would with the PointDrawTool.
Times, from the mouse release (a `pointerup` listener records it in the page):

- summary: the summary table's data changed (the Panel Tabulator whose data has a "figure" column;
  its data object replaced, or the table itself) and one frame drawn after;
- timeline: the "prefetch_markers" renderer (found again by name: the page may replace the figure) has
  data the server sent (a document patch of its source, or a new renderer; the browser's own changes as
  the drag ends do not count) and its plot view has finished drawing, and one frame drawn after.

Where markers crowd (within 14 px on screen) the mouse may grab any of them: the drop target is at an op
none of them is issued after, so whichever moves, the edit changes the plan. Prints median and worst;
appends to bench/results/bench_drag_browser.txt.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.bench_page import CHROMIUM, CHROMIUM_ARGS, ROOT, TIMELINE_DRAWN, served

RESULTS = ROOT / "bench" / "results" / "bench_drag_browser.txt"
ANSWER_TIMEOUT_MS = 10_000
CROWD_PX = 14

# page helpers: find models by what they hold, not where they sit in the layout
HELPERS = """() => {
  const B = window.Bokeh;
  window.__doc = () => B.documents[0];
  window.__markers = () => {
    const r = [...__doc().all_models].filter(m => m.name === "prefetch_marker_glyphs" && m.data_source);
    return r.length ? r[r.length - 1] : null;
  };
  window.__plot_of = (r) => [...__doc().all_models].find(m => m.renderers !== undefined
                                                          && m.renderers.includes(r));
  window.__summary = () => [...__doc().all_models].find(m => m.source && m.columns
      && m.source.data && m.source.data.figure !== undefined) || null;
  window.addEventListener("pointerup", () => { window.__release = performance.now(); }, true);
  // the browser changes the markers' data itself as a drag ends (the tool, then the snapping): the
  // server's answer is told apart as a document patch that changes their source
  window.__markers_patched = false;
  const doc = __doc(), apply = doc.apply_json_patch.bind(doc);
  doc.apply_json_patch = (patch, ...rest) => {
    const result = apply(patch, ...rest);
    const r = __markers();
    if (r && patch.events.some(e => e.model && e.model.id === r.data_source.id)) window.__markers_patched = true;
    return result;
  };
}"""

# screen positions of the prefetch markers: [{i, tensor, issue_after, x, y, px, py}]
MARKER_POSITIONS = """() => {
  const r = __markers(); const plot = __plot_of(r);
  const view = Bokeh.index.find_one_by_id(plot.id);
  view.el.scrollIntoView({block: "center"});
  const rect = view.canvas_view.el.getBoundingClientRect();
  const d = r.data_source.data; const out = [];
  for (let i = 0; i < d.x.length; i++) {
    out.push({i, tensor: String(d.tensor[i]), issue_after: Number(d.issue_after[i]), x: Number(d.x[i]),
              y: Number(d.y[i]), px: rect.left + view.frame.x_scale.compute(d.x[i]),
              py: rect.top + view.frame.y_scale.compute(d.y[i])});
  }
  return {markers: out, frame: [rect.left + view.frame.bbox.left, rect.left + view.frame.bbox.right,
                                rect.top + view.frame.bbox.top, rect.top + view.frame.bbox.bottom]};
}"""

# watch for the server's answer from now on; records __t_summary and __t_timeline (ms, page clock)
WATCH = """() => {
  const r0 = __markers(), s0 = __summary();
  const before = {markers: r0, markers_data: r0.data_source.data, summary: s0,
                  summary_data: s0 ? s0.source.data : null};
  window.__release = null; window.__t_summary = null; window.__t_timeline = null; window.__markers_patched = false;
  let seen_summary = null, seen_timeline = null;
  const tick = () => {
    const s = __summary(), r = __markers();
    if (window.__release !== null) {
      if (seen_summary !== null && window.__t_summary === null) window.__t_summary = performance.now();
      if (seen_timeline !== null && window.__t_timeline === null) window.__t_timeline = performance.now();
      if (seen_summary === null && s && (s !== before.summary || s.source.data !== before.summary_data))
        seen_summary = performance.now();
      if (seen_timeline === null && r && (r !== before.markers || window.__markers_patched)) {
        const v = Bokeh.index.find_one_by_id(__plot_of(r).id);
        if (v && v.has_finished()) seen_timeline = performance.now();
      }
    }
    if (window.__t_summary === null || window.__t_timeline === null) requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}"""

ANSWERED = "() => window.__t_summary !== null && window.__t_timeline !== null"
TIMES = "() => [window.__release, window.__t_summary, window.__t_timeline]"


def pick_drag(layout: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A marker inside the frame, and another marker to drop it on, at an op other than those of every
    marker crowding the first (the mouse may grab any of them)."""
    ms = layout["markers"]
    left, right, top, bottom = layout["frame"]
    inside = [m for m in ms if left < m["px"] < right and top < m["py"] < bottom]
    rng.shuffle(inside)
    for m in inside:
        crowd = {o["issue_after"] for o in ms if abs(m["px"] - o["px"]) < CROWD_PX}
        targets = [o for o in inside if o["issue_after"] not in crowd]
        if targets:
            return m, rng.choice(targets)
    return None


def drag_once(page: Any, rng: random.Random) -> tuple[float, float] | str:
    """One drag; (ms to summary, ms to timeline) from the release, or why it was not measured."""
    layout = page.evaluate(MARKER_POSITIONS)
    pair = pick_drag(layout, rng)
    if pair is None:
        return "no marker has a drop target at another op"
    m, to = pair
    page.evaluate(WATCH)
    page.mouse.move(m["px"], m["py"])
    page.mouse.down()
    for k in range(1, 9):  # a few moves, as a hand does: PointDrawTool follows pan events
        page.mouse.move(m["px"] + (to["px"] - m["px"]) * k / 8, m["py"], steps=1)
    page.mouse.up()
    try:
        page.wait_for_function(ANSWERED, polling="raf", timeout=ANSWER_TIMEOUT_MS)
    except Exception:
        return f"no answer within {ANSWER_TIMEOUT_MS / 1e3:.0f} s (dragging {m['tensor']})"
    release, summary, timeline = page.evaluate(TIMES)
    if release is None:
        return "the page saw no pointerup"
    return summary - release, timeline - release


def settle(page: Any) -> None:
    page.wait_for_function(TIMELINE_DRAWN, polling="raf", timeout=30_000)
    page.wait_for_timeout(500)


def measure(root: Path, drags: int, seed: int) -> tuple[list[tuple[float, float]], list[str], list[str]]:
    from playwright.sync_api import sync_playwright

    rng = random.Random(seed)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_drag_serve_{os.getpid()}.log"
    times: list[tuple[float, float]] = []
    failures: list[str] = []
    errors: list[str] = []
    with served(root, log) as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            settle(page)
            page.evaluate(HELPERS)
            for _ in range(drags):
                got = drag_once(page, rng)
                if isinstance(got, str):
                    failures.append(got)
                else:
                    times.append(got)
                settle(page)
        finally:
            browser.close()
    return times, failures, errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drags", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--root", type=Path, default=ROOT, help="a checkout whose vmexplorer/app.py to serve")
    args = ap.parse_args()
    root = args.root.resolve()
    times, failures, errors = measure(root, args.drags, args.seed)
    for failure in failures:
        print("  not measured:", failure)
    for e in sorted(set(errors)):
        print("  console error:", e[:300])
    if times:
        s, t = [a for a, _ in times], [b for _, b in times]
        line = (f"drag release -> summary median {statistics.median(s):.0f} ms, worst {max(s):.0f} ms; "
                f"-> timeline drawn median {statistics.median(t):.0f} ms, worst {max(t):.0f} ms; "
                f"{len(times)} drags measured, {len(failures)} not, {len(set(errors))} distinct console errors")
    else:
        line = f"no drag measured ({len(failures)} tried): {failures[:1]}"
    print(line)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    where = "" if root == ROOT else f" [served from {root}]"
    with open(RESULTS, "a") as f:
        f.write(f"{stamp} ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}){where}: {line}\n")
    return 0 if times else 1


if __name__ == "__main__":
    sys.exit(main())
