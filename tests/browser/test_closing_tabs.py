"""Closed tabs and the server's one GPU queue: a tab closed while its run waits or runs gives its place,
and the GPU, to the next person at once (not when Bokeh gets round to destroying its session), and the
server says nothing went wrong when Bokeh does destroy it, an update under way included.

The server runs a CPU stand-in for the GPU (VMEXPLORER_FAKE_RUNNER): `hold_the_gpu`, imported by name
by the server's worker process from this folder."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
TIMEOUT_MS = 60_000
CANCEL_S = 2.0  # a closed tab's run is cancelled within this
POLL_S = 0.5  # how often a page follows its run (app.POLL_MS): how late a waiting tab can say what changed
# Bokeh destroys a closed tab's session once it has gone unused this long (by default 15 s, checked every
# 17 s): longer than CANCEL_S, so only the page's own poll can free the GPU in time; short enough for the
# test to see the session-destroyed hooks run
SESSION_LIFETIME_MS = 4000
SERVER_ARGS = ["--unused-session-lifetime", str(SESSION_LIFETIME_MS), "--check-unused-sessions", "250",
               "--log-level", "debug"]


def hold_the_gpu(request: Any, progress: Callable[[int, int, float], None], should_stop: Callable[[], bool]) -> None:
    """A run that holds the GPU until it is cancelled (or a minute passes), an iteration each 0.05 s."""
    end, i = time.monotonic() + 60, 0
    while not should_stop() and time.monotonic() < end:
        time.sleep(0.05)
        i += 1
        progress(i, max(i, request.iterations), 1.0)


@pytest.fixture(scope="module")
def served(app_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The app under `panel serve` with `hold_the_gpu` for a GPU: its URL and its log."""
    from vmexplorer.ui.gpu import FAKE_RUNNER_ENV
    from vmexplorer.worker import RUNS_PER_VISITOR_ENV

    log = tmp_path_factory.mktemp("panel-queue") / "serve.log"
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    # every tab here is one visitor (127.0.0.1), standing for a class's several
    env = {FAKE_RUNNER_ENV: f"{Path(__file__).stem}:hold_the_gpu", "PYTHONPATH": path, RUNS_PER_VISITOR_ENV: "8"}
    with app_server(log, env, SERVER_ARGS) as url:
        yield url, log


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        yield ctx
    finally:
        ctx.close()


def _open(context: Any, url: str) -> Any:
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("canvas", state="attached", timeout=TIMEOUT_MS)
    return page


def _run(page: Any, says: str) -> None:
    from playwright.sync_api import expect

    page.get_by_role("button", name="Run on GPU").click()
    expect(page.get_by_text(says).first).to_be_visible(timeout=TIMEOUT_MS)


# whether the page shows `needle` in a text node, shadow roots included (Panel's widgets sit in them)
_SHOWS = """(needle) => {
    const visit = node => {
        if (node.nodeType === Node.TEXT_NODE) return node.data.includes(needle);
        if (node.shadowRoot && visit(node.shadowRoot)) return true;
        for (const child of node.childNodes) if (visit(child)) return true;
        return false;
    };
    return visit(document);
}"""


def _seconds_until_shown(page: Any, needle: str, within_s: float) -> float:
    """How long the page took to show `needle`, looking every 50 ms (Playwright's `expect` looks ever
    more seldom, up to once a second: too coarse to time)."""
    start = time.monotonic()
    page.wait_for_function(_SHOWS, arg=needle, polling=50, timeout=within_s * 1000)
    return time.monotonic() - start


def _discarded(log: Path) -> int:
    return len(re.findall(r"Discarding session", log.read_text(errors="replace")))


def _problems(log: Path) -> list[str]:
    text = log.read_text(errors="replace")
    return [line for line in text.splitlines()
            if "Traceback" in line or "ERROR" in line or "failed with following error" in line]


def test_closing_a_tab_cancels_its_queued_run_then_its_running_one_within_2_s(context: Any,
                                                                              served: tuple[str, Path]) -> None:
    from playwright.sync_api import expect

    url, log = served
    first, second, third = (_open(context, url) for _ in range(3))
    _run(first, "running: iteration")
    _run(second, "queued: number 1 in line")
    _run(third, "queued: number 2 in line")
    within = CANCEL_S + POLL_S  # the waiting tab sees it at its next poll
    second.close()  # its queued run leaves the line: the third tab moves up
    assert _seconds_until_shown(third, "queued: number 1 in line", within) < within
    first.close()  # its running run stops: the third tab's starts
    assert _seconds_until_shown(third, "running: iteration", within) < within
    third.get_by_role("button", name="Cancel the run").click()
    expect(third.get_by_text("cancelled").first).to_be_visible(timeout=TIMEOUT_MS)
    third.close()
    end = time.monotonic() + (SESSION_LIFETIME_MS / 1000 + 10)
    while _discarded(log) < 3 and time.monotonic() < end:  # the hooks run as Bokeh destroys the sessions
        time.sleep(0.25)
    assert _discarded(log) >= 3, "Bokeh did not destroy the closed tabs' sessions"
    assert not _problems(log), _problems(log)


def test_a_tab_closed_during_an_update_leaves_no_traceback_on_the_server(context: Any,
                                                                          served: tuple[str, Path]) -> None:
    url, log = served
    before = _discarded(log)
    page = _open(context, url)
    page.get_by_role("button", name="Run on GPU").click()
    page.get_by_role("button", name="Simulate", exact=True).click()
    page.close()  # while the server simulates, draws and follows the run
    end = time.monotonic() + (SESSION_LIFETIME_MS / 1000 + 10)
    while _discarded(log) <= before and time.monotonic() < end:
        time.sleep(0.25)
    assert _discarded(log) > before, "Bokeh did not destroy the closed tab's session"
    time.sleep(1)  # what the hooks do is logged after the discard
    assert not _problems(log), _problems(log)
