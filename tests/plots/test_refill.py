"""Refilling a figure's data source: the browser is sent what changed, and ends with the new data."""

from __future__ import annotations

import numpy as np
from bokeh.document import Document
from bokeh.document.events import ColumnDataChangedEvent
from bokeh.models import ColumnDataSource

from vmexplorer.plots.axis import refill


def _sent(source: ColumnDataSource, data: dict) -> list[list[str] | None]:
    doc = Document()
    doc.add_root(source)
    events: list[ColumnDataChangedEvent] = []
    doc.on_change(lambda e: events.append(e) if isinstance(e, ColumnDataChangedEvent) else None)
    refill(source, data)
    return [e.cols for e in events]


def test_an_edit_with_the_same_rows_sends_only_the_columns_that_changed() -> None:
    source = ColumnDataSource({"left": np.arange(3.0), "name": ["a", "b", "c"], "width": [1, 1, 1]})
    sent = _sent(source, {"left": np.arange(3.0) + 1, "name": ["a", "b", "c"], "width": [1, 2, 1]})
    assert [sorted(cols or []) for cols in sent] == [["left", "width"]]
    assert list(source.data["left"]) == [1.0, 2.0, 3.0] and list(source.data["width"]) == [1, 2, 1]


def test_nothing_is_sent_when_nothing_changed() -> None:
    source = ColumnDataSource({"x": [1.0, 2.0], "what": ["a", "b"]})
    assert _sent(source, {"x": np.array([1.0, 2.0]), "what": ["a", "b"]}) == []


def test_other_rows_or_columns_replace_the_whole_data() -> None:
    longer = ColumnDataSource({"x": [1.0, 2.0], "what": ["a", "b"]})
    assert _sent(longer, {"x": [1.0, 2.0, 3.0], "what": ["a", "b", "c"]}) == [None]
    other = ColumnDataSource({"x": [1.0, 2.0], "what": ["a", "b"]})
    assert _sent(other, {"x": [1.0, 2.0], "size": [4, 5]}) == [None]
    assert list(other.data) == ["x", "size"]
