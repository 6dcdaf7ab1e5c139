"""The app's tests' fixtures: a store showing the default sample and a page built without a server."""

from __future__ import annotations

import pytest

from vmexplorer.session.samples import DEFAULT_SAMPLE, SAMPLES
from vmexplorer.ui.page import Page
from vmexplorer.ui.state import AppState


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = not (SAMPLES / DEFAULT_SAMPLE).is_file()
    for item in items:
        if missing and "tests/ui" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason="sample sessions are missing"))


@pytest.fixture
def state() -> AppState:
    s = AppState()
    assert s.open_sample(), s.message
    return s


@pytest.fixture
def page() -> Page:
    p = Page()
    p.main()
    return p
