"""Uploads through `vmexplorer serve`: a file as large as the loader accepts arrives whole and is answered
on the page (Bokeh's websocket limit once dropped the connection for any file over ~16 MiB, silently)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_classroom import TIMEOUT_MS, open_page, opened, server_errors, shown

from vmexplorer.session.files import MAX_FILE_BYTES


@pytest.fixture(scope="module")
def launched(app_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("launched") / "serve.log"
    with app_server(log, None, (), launcher=True) as url:
        yield url, log


def test_a_file_as_large_as_the_loader_takes_arrives_whole_its_refusal_is_said_and_the_page_goes_on(
        launched: tuple[str, Path], browser: Any, tmp_path: Path) -> None:
    url, log = launched
    page = open_page(browser, url)
    big = tmp_path / "lecture.vms"
    big.write_bytes(os.urandom(MAX_FILE_BYTES - 4096))  # not gzip, not JSON: refused once it has arrived
    page.locator("input[type=file]").set_input_files(str(big))
    page.wait_for_function("() => [...Bokeh.documents[0].all_models].some(m => typeof m.text === 'string' "
                           "&& m.text.includes('lecture.vms'))", timeout=TIMEOUT_MS)
    sample = page.get_by_label(re.compile("^Sample session"))
    labels = [o for o in sample.locator("option").all_text_contents() if " — " in o]
    other = next(label for label in labels if label != shown(page)["picker"])
    sample.select_option(label=other)
    page.get_by_role("button", name="Open sample").click()
    deadline = time.monotonic() + TIMEOUT_MS / 1e3
    while not opened(other)(now := shown(page)):  # the connection survived: the page answers the next click
        assert time.monotonic() < deadline, now
        page.wait_for_timeout(100)
    assert page.errors == [] and server_errors(log) == []


def test_a_file_larger_than_the_page_takes_is_refused_in_the_browser_with_a_message_and_the_page_goes_on(
        launched: tuple[str, Path], browser: Any, tmp_path: Path) -> None:
    url, log = launched
    page = open_page(browser, url)
    huge = tmp_path / "whole-term.vms"
    with huge.open("wb") as f:  # sparse: the browser must not read it, so its bytes need not exist
        f.truncate(MAX_FILE_BYTES + 1)
    page.locator("input[type=file]").first.set_input_files(str(huge))
    page.get_by_text(re.compile(r'^"whole-term\.vms" is 48\.00 MiB: the largest file the page takes is')).wait_for(
        timeout=TIMEOUT_MS)
    before = shown(page)["picker"]
    sample = page.get_by_label(re.compile("^Sample session"))
    other = next(o for o in sample.locator("option").all_text_contents() if " — " in o and o != before)
    sample.select_option(label=other)
    page.get_by_role("button", name="Open sample").click()
    deadline = time.monotonic() + TIMEOUT_MS / 1e3
    while not opened(other)(now := shown(page)):  # the connection is the same: the page answers
        assert time.monotonic() < deadline, now
        page.wait_for_timeout(100)
    assert page.errors == [] and server_errors(log) == []
