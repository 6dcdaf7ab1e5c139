"""The README's picture of the app: the first screen a visitor sees, taken in headless Chromium.

    python -m bench.app_screenshot [--out docs/app.png] [--size 1280x720] [--query "?projector=1"]

Serves this checkout's app (`python -m vmexplorer serve`, as the README starts it) on a free loopback
port, opens /app at the size asked, waits until the timeline has painted and the page is quiet, and
saves a PNG. It refuses to save a page that logged an error in its console or a traceback on the
server: a picture of a broken page is worse than none.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench.bench_page import CHROMIUM, CHROMIUM_ARGS, DRAWN_TIMEOUT_MS, ROOT, TIMELINE_DRAWN, served

QUIET_MS = 2_000  # after the timeline paints: the tables and tabs below it fill in


def shoot(out: Path, width: int, height: int, query: str) -> list[str]:
    """Save the page's first screen to `out`; the errors seen instead, if any (then nothing is saved)."""
    from playwright.sync_api import sync_playwright

    log = Path(tempfile.gettempdir()) / f"app_screenshot_{os.getpid()}.log"
    errors: list[str] = []
    with served(ROOT, log, launcher=True) as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": width, "height": height}).new_page()
            page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page: {e}"))
            page.goto(url + query)
            page.wait_for_function(TIMELINE_DRAWN, polling="raf", timeout=DRAWN_TIMEOUT_MS)
            page.wait_for_timeout(QUIET_MS)
            shot = page.screenshot()
        finally:
            browser.close()
    server_log = log.read_text(errors="replace")
    if "Traceback" in server_log:
        errors.append("server: " + server_log[server_log.index("Traceback"):][:2000])
    if not errors:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.partial")
        tmp.write_bytes(shot)
        tmp.replace(out)  # whole or not at all
    return errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "app.png")
    ap.add_argument("--size", default="1280x720", help="the browser's viewport, WIDTHxHEIGHT in CSS pixels")
    ap.add_argument("--query", default="", help="what follows /app in the address, e.g. ?step=3")
    args = ap.parse_args()
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        ap.error(f"--size takes WIDTHxHEIGHT, e.g. 1280x720, not {args.size!r}")
    errors = shoot(args.out, width, height, args.query)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print("nothing saved: the page was not drawn cleanly", file=sys.stderr)
        return 1
    print(f"saved {args.out} ({width}x{height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
