"""Exports open elsewhere: a Chrome trace Perfetto reads, an HTML page that needs no network."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import bokeh
import numpy as np
import pytest

from vmexplorer.fileio import OutputError
from vmexplorer.graph import build_graph
from vmexplorer.plan import Direction, Mode
from vmexplorer.plots.export import drawn_part, export_html, standalone_html
from vmexplorer.policies import compile_plan
from vmexplorer.session import Session, load_session, new_session
from vmexplorer.session.trace import COMPUTE, FAULTS, TO_DEVICE, TO_HOST, chrome_trace, export_chrome_trace
from vmexplorer.simulator import H100_DEFAULT, simulate


@pytest.fixture(scope="module")
def session() -> Session:
    graph = build_graph("resnet18", 64, 224)
    plan = compile_plan(graph, graph.footprint // 2, "autovm", {"offload": "all"})
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)


@pytest.fixture(scope="module")
def trace(session: Session, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    export_chrome_trace(session, path)
    return json.loads(path.read_text())


def spans(trace: dict[str, Any], tid: int) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == tid]


def test_the_trace_is_json_with_complete_counter_and_metadata_events(trace: dict[str, Any]) -> None:
    assert {e["ph"] for e in trace["traceEvents"]} == {"M", "X", "C"}
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"compute stream", "copy stream: to device", "copy stream: to host"} <= names
    meta = trace["metadata"]
    assert {"vmexplorer", "schema_version", "model", "policy", "capacity_bytes"} <= set(meta)
    assert (meta["model"], meta["policy"]) == ("resnet18", "autovm")


def test_every_op_run_is_one_span_in_microseconds_with_its_figures(session: Session,
                                                                  trace: dict[str, Any]) -> None:
    tl, ops = session.timeline, session.graph.ops
    op_spans = [e for e in spans(trace, COMPUTE) if e["cat"] in ("forward", "loss", "backward", "update")]
    assert sorted(e["name"] for e in op_spans) == sorted(ops[i].name for i in tl.op_index)
    first = next(e for e in op_spans if e["name"] == ops[int(tl.op_index[0])].name)
    assert first["ts"] == pytest.approx(tl.op_start_ns[0] / 1000)
    assert first["dur"] == pytest.approx((tl.op_end_ns[0] - tl.op_start_ns[0]) / 1000)
    assert {"op", "kind", "phase", "stall_ns", "fault_bytes"} <= set(first["args"])


def test_memory_operations_sit_on_the_thread_of_their_stream(session: Session, trace: dict[str, Any]) -> None:
    p = session.plan
    expected = {TO_DEVICE: 0, TO_HOST: 0, FAULTS: 0, COMPUTE: 0}
    for i in session.timeline.memop_index:
        m = p.memops[int(i)]
        tid = FAULTS if m.mode is Mode.FAULT else COMPUTE if m.mode is Mode.SYNC else \
            TO_DEVICE if m.direction is Direction.TO_DEVICE else TO_HOST
        expected[tid] += 1
    found = {tid: sum(e["cat"].startswith("memop") for e in spans(trace, tid)) for tid in expected}
    assert found == expected and expected[TO_HOST] and expected[TO_DEVICE] and expected[FAULTS]
    memop = next(e for e in spans(trace, TO_HOST))
    assert {"tensor", "bytes", "direction", "mode", "origin"} <= set(memop["args"])


@pytest.mark.parametrize("tid", [COMPUTE, TO_DEVICE, TO_HOST])
def test_spans_on_one_stream_never_partly_overlap(trace: dict[str, Any], tid: int) -> None:
    # Perfetto drops slices of a thread that are not properly nested
    open_ends: list[float] = []
    for e in sorted(spans(trace, tid), key=lambda e: (e["ts"], -e["dur"])):
        while open_ends and open_ends[-1] <= e["ts"] + 1e-6:
            open_ends.pop()
        end = e["ts"] + e["dur"]
        assert not open_ends or end <= open_ends[-1] + 1e-6, e["name"]
        open_ends.append(end)


def test_resident_bytes_are_a_counter_track(session: Session, trace: dict[str, Any]) -> None:
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == len(session.timeline.resident_bytes)
    assert max(e["args"]["resident"] for e in counters) == session.timeline.resident_bytes.max()


def test_the_trace_document_is_the_same_for_the_same_session(session: Session) -> None:
    assert json.dumps(chrome_trace(session)) == json.dumps(chrome_trace(session))


def test_the_html_page_is_self_contained(session: Session, tmp_path: Path) -> None:
    export_html(session, tmp_path / "page.html")
    html = (tmp_path / "page.html").read_text()
    assert not re.search(r"""<(script|link)[^>]*(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert bokeh.__version__ in html and "Bokeh.embed" in html  # the library itself is inline
    assert len(html) > 500_000
    assert "iteration time" in html and "simulated" in html


def test_a_session_of_more_rows_than_a_page_draws_is_drawn_as_its_typical_iteration_and_the_page_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    session = load_session(Path(__file__).resolve().parents[2] / "sample_sessions" / "vgg19-b64-uvm-60pct.measured.vms")
    tl = session.timeline
    assert tl.iterations > 1 and drawn_part(session) == (session, None)  # a recorded run: drawn whole
    monkeypatch.setattr("vmexplorer.plots.export.MAX_DRAWN_ROWS", len(tl.op_index) - 1)
    drawn, title = drawn_part(session)
    typical = f"its typical iteration ({tl.typical_iteration() + 1} of {tl.iterations})"
    assert drawn.timeline.iterations == 1 and title is not None and typical in title
    assert np.array_equal(drawn.timeline.op_index, tl.op_index[tl.op_iteration == tl.typical_iteration()])
    html = standalone_html(session).decode()
    assert typical in html and f"{tl.iterations} hold" in html


@pytest.mark.parametrize("export", [export_html, export_chrome_trace])
def test_exports_refuse_to_overwrite_without_force(session: Session, tmp_path: Path, export: Any) -> None:
    path = tmp_path / "out"
    path.write_text("keep me")
    with pytest.raises(OutputError, match="exists; pass --force"):
        export(session, path)
    assert path.read_text() == "keep me"
    export(session, path, force=True)
    assert path.read_text() != "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
