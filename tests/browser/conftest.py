"""Fixtures for the page tests: Debian's Chromium driven by Playwright, and the app under `panel serve`.

Nothing here downloads a browser (no `playwright install`): the tests use /usr/bin/chromium and skip,
saying why, when it or the `playwright` package is missing, so a CI runner without them stays green.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("VMEXPLORER_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]
SERVER_START_S = 90.0  # the first start on a cold laptop imports Panel, Bokeh and numpy


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives headless Chromium (skipped without playwright and "
                                       "/usr/bin/chromium); deselect with -m 'not browser'")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium, shared by the tests of a session."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the Python package playwright is not installed (pip install playwright)")
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@dataclass
class Watched:
    """A page and what it said: console errors, uncaught exceptions, failed requests."""

    page: Any
    console_errors: list[tuple[str, str]] = field(default_factory=list)  # (text, url of its source)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[tuple[str, str]] = field(default_factory=list)  # (url, failure)
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def watched_page(browser: Any) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    w = Watched(page)
    page.on("console", lambda m: w.console_errors.append((m.text, m.location.get("url", "")))
            if m.type == "error" else None)
    page.on("pageerror", lambda e: w.page_errors.append(str(e)))
    page.on("requestfailed", lambda r: w.failed_requests.append((r.url, r.failure or "")))
    page.on("request", lambda r: w.requests.append(r.url))
    try:
        yield w
    finally:
        context.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/favicon.ico")  # any answer will do; this one builds no document
        conn.getresponse().read()
        conn.close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def app_url(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app as the README starts it (`vmexplorer serve`: one page rendered for every visitor, each
    visitor's session built when the browser connects) on a free loopback port; its URL. (Asks for the
    browser first, so a machine without one skips before starting a server.)"""
    with serve_app(tmp_path_factory.mktemp("panel") / "serve.log", launcher=True) as url:
        yield url


@pytest.fixture(scope="session")
def app_server(browser: Any) -> Callable[..., AbstractContextManager[str]]:
    """`serve_app`, for tests that need a server of their own (another runner, other session lifetimes)."""
    return serve_app


@contextmanager
def serve_app(log: Path, env: dict[str, str] | None = None, args: Sequence[str] = (),
              launcher: bool = False) -> Iterator[str]:
    """`panel serve vmexplorer/app.py` (with `env` added to the environment and `args` to the command),
    or with `launcher` `vmexplorer serve`, on a free loopback port, its output in `log`, for as long as
    the block lasts; the app's URL."""
    port = _free_port()
    where = ["--address", "127.0.0.1", "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}"]
    cmd = [sys.executable, "-m", "vmexplorer", "serve", *where, *args] if launcher else \
        [sys.executable, "-m", "panel", "serve", "vmexplorer/app.py", *where, *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    try:
        end = time.monotonic() + SERVER_START_S
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > end:
                tail = log.read_text(errors="replace")[-3000:]
                pytest.fail(f"`{' '.join(cmd[1:])}` did not start (exit status {proc.poll()}):\n{tail}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/app"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
