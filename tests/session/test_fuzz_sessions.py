"""A fuzzer over session files: whatever a stranger's file holds, it loads or is refused with the
loader's own error, and what loads can be shown, compared and exported by every tool; no example takes
more than bounded time or memory.

Valid sessions (one simulated, one measured with collector records) are mutated field by field (any
JSON value anywhere, extreme numbers, hostile text) and byte by byte (in the JSON text and in the gzip
stream). Hypothesis runs derandomized, so CI sees the same examples every time.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from vmexplorer.cli import main
from vmexplorer.graph import build_graph
from vmexplorer.plots.timeline import timeline_figure
from vmexplorer.policies import compile_plan
from vmexplorer.session import (
    Session,
    SessionError,
    load_session,
    new_session,
    session_from_bytes,
    session_to_bytes,
)
from vmexplorer.session.compare import align_op_times
from vmexplorer.session.iterations import iteration_view
from vmexplorer.session.samples import SAMPLES
from vmexplorer.session.trace import chrome_trace_chunks
from vmexplorer.simulator import H100_DEFAULT, simulate
from vmexplorer.ui import numbers
from vmexplorer.ui.state import AppState

EXAMPLE_PEAK_BYTES = 64 * 2**20  # what one example may allocate; the base files are tens of KB
FUZZ = settings(max_examples=100, deadline=5000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])  # capsys is read out per example


def _simulated() -> Session:
    graph = build_graph("resnet18", 4, 64)
    plan = compile_plan(graph, graph.footprint * 6 // 10, "autovm", {"tensors": "all"})
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT, notes=["a note"])


def _measured() -> Session:
    """The counted iteration of a measured sample: every collector table has rows."""
    s = load_session(SAMPLES / "alexnet-b256-uvm-50pct.measured.vms")
    return iteration_view(s, s.timeline.iterations - 1)


BASES = {"simulated": json.loads(gzip.decompress(session_to_bytes(_simulated()))),
         "measured": json.loads(gzip.decompress(session_to_bytes(_measured())))}


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a document: keys of objects and, for lists, their first, second and last item."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list) and node:
        for i in sorted({0, min(1, len(node) - 1), len(node) - 1}):
            yield from _paths(node[i], (*prefix, i))


PATHS = {name: [p for p in _paths(doc) if p] for name, doc in BASES.items()}
# what a run records, rather than what the configuration fixes: changed, these still load half the time,
# so the tools behind the loader get fuzzed too
RECORDED = {name: [p for p in paths if p[0] in ("timeline", "collected", "notes", "environment", "cost_model")]
            for name, paths in PATHS.items()}
PAYLOADS = ["<img src=x onerror=alert(1)>", "\x1b]0;pwned\x07\x1b[2J", "\u202etxt.exe", "", " ", "a" * 300,
            "\ud800", "\udc00x", "NaN", "-1", "1e400", "\x00", "🙂", "forward", "to_host", "uvm", "measured"]
NUMBERS = [0, -1, 1, 2, 3, 7, 2**31, 2**53, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), 2**64, 10**30, 0.5, -0.0,
           1e-300, 5e-324, 1e308, -1e308, 1e16]
JSON = st.recursive(
    st.none() | st.booleans() | st.sampled_from(NUMBERS) | st.integers() | st.floats(allow_nan=True)
    | st.sampled_from(PAYLOADS) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)


@st.composite
def field_mutations(draw: st.DrawFn) -> tuple[str, bytes]:
    """A base document with one to three places replaced, deleted, or a list shortened or repeated."""
    name = draw(st.sampled_from(sorted(BASES)))
    doc = json.loads(json.dumps(BASES[name]))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(RECORDED[name]) | st.sampled_from(PATHS[name]))
        parent = _get(doc, path[:-1])
        if not isinstance(parent, dict | list):  # gone, or replaced by an earlier mutation
            continue
        last = path[-1]
        if isinstance(parent, list) and not (isinstance(last, int) and last < len(parent)):
            continue
        if isinstance(parent, dict) and last not in parent:
            continue
        old = parent[last]
        action = draw(st.sampled_from(["replace", "delete", "shorten", "repeat", "like"]))
        if action == "like" and isinstance(old, str):  # text for text: free strings load, names do not
            parent[last] = draw(st.sampled_from(PAYLOADS) | st.text(max_size=20))
        elif action == "like" and isinstance(old, int | float) and not isinstance(old, bool):
            parent[last] = draw(st.sampled_from(NUMBERS) | st.integers(0, 10**12) | st.floats(0, 1e12))
        elif action in ("replace", "like"):
            parent[last] = draw(JSON)
        elif action == "delete":
            del parent[last]
        elif isinstance(old, list):
            parent[last] = old[: len(old) // 2] if action == "shorten" else old * 2
    return name, json.dumps(doc, allow_nan=True).encode()


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    node = doc
    for key in path:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
    return node


@st.composite
def byte_mutations(draw: st.DrawFn) -> tuple[str, bytes]:
    """A base file's JSON text (or its gzip stream) with a few bytes flipped, inserted or cut."""
    name = draw(st.sampled_from(sorted(BASES)))
    text = bytearray(json.dumps(BASES[name], sort_keys=True, separators=(",", ":")).encode())
    compressed = draw(st.booleans())
    data = bytearray(gzip.compress(bytes(text), mtime=0)) if compressed else text
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "insert", "cut", "punctuate", "truncate"]))
        if action == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif action == "cut":
            del data[at:at + draw(st.integers(1, 16))]
        elif action == "punctuate":
            data[at] = draw(st.sampled_from(b'[]{},:"\\-.0e'))
        else:
            del data[at:]
        if not data:
            data = bytearray(b"{")
    return name, bytes(data) if compressed else gzip.compress(bytes(data), mtime=0)


def _loads_or_is_refused(data: bytes, tmp: Path) -> None:
    """The property: one SessionError naming the file, or a session every tool can show."""
    tracemalloc.start()
    try:
        session = session_from_bytes(data, "fuzzed.vms")
        assert session.summary["iteration_ns"] >= 0
        _, peak = tracemalloc.get_traced_memory()
    except SessionError as e:
        message = str(e)
        assert message.startswith("fuzzed.vms") and "\n" not in message, message
        return
    finally:
        tracemalloc.stop()
    assert peak < EXAMPLE_PEAK_BYTES, f"loading one example took {peak / 2**20:.0f} MiB"
    _every_tool_shows(session, data, tmp)


def _every_tool_shows(session: Session, data: bytes, tmp: Path) -> None:
    """What loaded is summarised, compared, drawn, exported, opened by the app and saved again."""
    assert session_from_bytes(session_to_bytes(session)) is not None  # what loads, saves and loads again
    align_op_times(session, session)
    b"".join(chrome_trace_chunks(session))
    timeline_figure(iteration_view(session, session.timeline.typical_iteration()), "time", editable=True)
    path = tmp / "fuzzed.vms"
    path.write_bytes(data)
    for argv in (["info", str(path)], ["compare", str(path), str(path)], ["info", str(path), "--format", "json"]):
        assert main(argv) == 0, argv
    state = AppState()
    assert state.load(data, "fuzzed.vms"), state.message
    numbers.summary_rows(state)
    numbers.tensor_rows(state.session, list(state.moves))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(case=field_mutations())
def test_a_session_with_any_field_changed_loads_or_is_refused_with_the_loaders_error(
        tmp: Path, case: tuple[str, bytes], capsys: pytest.CaptureFixture[str]) -> None:
    _loads_or_is_refused(gzip.compress(case[1], mtime=0), tmp)
    capsys.readouterr()


@FUZZ
@given(case=byte_mutations())
def test_a_session_with_any_bytes_changed_loads_or_is_refused_with_the_loaders_error(
        tmp: Path, case: tuple[str, bytes], capsys: pytest.CaptureFixture[str]) -> None:
    _loads_or_is_refused(case[1], tmp)
    capsys.readouterr()


def test_the_bases_themselves_load_and_every_tool_shows_them(tmp: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    for doc in BASES.values():
        _loads_or_is_refused(gzip.compress(json.dumps(doc).encode(), mtime=0), tmp)
        assert session_from_bytes(gzip.compress(json.dumps(doc).encode())) is not None
    capsys.readouterr()


def test_the_measured_base_has_rows_in_every_collector_table() -> None:
    collected = BASES["measured"]["collected"]
    assert all(collected[t]["rows"] > 0 for t in ("kernels", "um", "memcpy", "nvml", "status"))



@pytest.mark.filterwarnings("ignore:Generating overly large repr")  # hypothesis about the example it prints
def test_field_mutations_reach_past_the_loader_to_the_tools() -> None:
    def loads(case: tuple[str, bytes]) -> bool:
        try:
            session_from_bytes(gzip.compress(case[1]))
        except SessionError:
            return False
        return case[1] != json.dumps(BASES[case[0]], allow_nan=True).encode()  # changed, and still a session

    find(field_mutations(), loads, settings=settings(database=None, derandomize=True))
