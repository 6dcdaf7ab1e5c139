"""The collectors share one declared interface, and their names and parts are spelled in one table.

No GPU is needed: the collectors are built, not started."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from vmexplorer.collectors import Collector, CuptiCollector, NvmlSampler
from vmexplorer.records.collected import CUPTI, FEEDS, NVTX, PARTS

PACKAGE = Path(__file__).resolve().parents[2] / "vmexplorer"
COLLECTORS: list[Collector] = [CuptiCollector(), NvmlSampler(lambda: 0)]


@pytest.mark.parametrize("collector", COLLECTORS, ids=lambda c: type(c).__name__)
def test_each_collector_has_every_member_the_protocol_declares_with_its_type(collector: Collector) -> None:
    assert isinstance(collector, Collector)
    hints = typing.get_type_hints(Collector)
    assert set(hints) == {"name", "available", "reason", "dropped", "overhead_ns", "rows"}
    for member, hint in hints.items():
        value = getattr(collector, member)
        assert isinstance(value, typing.get_origin(hint) or hint), (member, value)
    assert all(isinstance(v, list) for v in collector.rows.values()) and collector.rows
    for method in ("start", "flush", "stop"):
        assert list(inspect.signature(getattr(collector, method)).parameters) == []


def test_a_collector_that_has_not_started_says_so_rather_than_claiming_to_be_available() -> None:
    for collector in COLLECTORS:
        assert not collector.available and collector.reason == "not started"


def test_the_collectors_are_named_as_the_parts_table_names_them() -> None:
    assert [type(c).name for c in COLLECTORS] == list(dict.fromkeys(p.collector for p in PARTS))


def test_the_cupti_collectors_keyword_arguments_are_its_parts_in_the_tables_order() -> None:
    parameters = list(inspect.signature(CuptiCollector).parameters)
    assert parameters == ["device", *(p.name for p in PARTS if p.collector == CUPTI)]


def test_a_cupti_part_switched_off_is_named_by_its_status_entry_in_the_table() -> None:
    cupti_parts = [p for p in PARTS if p.collector == CUPTI]
    nothing = CuptiCollector(**{p.name: False for p in cupti_parts})
    assert [name for name, _ in nothing.switched_off()] == [p.status for p in cupti_parts]
    assert all(reason.startswith(p.records) for p, (_, reason) in zip(cupti_parts, nothing.switched_off()))
    assert CuptiCollector().switched_off() == []


def test_each_table_is_fed_by_the_collector_and_the_status_entry_of_its_part() -> None:
    assert list(FEEDS) == [p.table for p in PARTS]
    for p in PARTS:
        assert FEEDS[p.table][0] == p.collector and FEEDS[p.table][-1] == p.status


def test_the_executor_and_the_command_line_offer_exactly_the_tables_parts(capsys: pytest.CaptureFixture) -> None:
    from vmexplorer.cli import UsageError, main
    from vmexplorer.cli.commands import _collector_parts
    from vmexplorer.engine.executor import COLLECTOR_PARTS, RunSettings

    names = tuple(p.name for p in PARTS)
    assert COLLECTOR_PARTS == names and RunSettings().collectors == names
    assert _collector_parts(None) == names  # --collectors left out: every part
    assert all(_collector_parts(name) == (name,) for name in names)
    with pytest.raises(UsageError, match=", ".join(names)):
        _collector_parts("sonar")
    assert main(["run", "--help"]) == 0
    described = " ".join(capsys.readouterr().out.split("\n  --collectors PARTS", 1)[1].split("\n  --out", 1)[0].split())
    assert all(name in described for name in names), described


def test_every_collector_and_part_has_a_label_on_the_timeline() -> None:
    from vmexplorer.plots import COLLECTOR_LABELS

    assert {p.status for p in PARTS} | {p.collector for p in PARTS} | {NVTX} <= set(COLLECTOR_LABELS)


def test_the_collectors_and_the_engine_spell_no_collector_or_part_name_of_their_own() -> None:
    # a table's name is also the prefix of its raw columns ("memcpy_start"), which the collectors spell
    spelled = ({p.name for p in PARTS} | {p.status for p in PARTS} | {p.collector for p in PARTS} | {NVTX}) \
        - {p.table for p in PARTS}
    found = []
    for path in sorted([*(PACKAGE / "collectors").glob("*.py"), *(PACKAGE / "engine").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in spelled:
                found.append(f"{path.name}:{node.lineno} {node.value!r}")
    assert found == []
