"""Session files: what is saved comes back equal, byte-for-byte reproducibly, and a bad file of any
kind is one clear SessionError; writing never leaves half a file or loses the one there."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmexplorer.cli import main
from vmexplorer.config import Mechanism
from vmexplorer.fileio import OutputError, atomic_write
from vmexplorer.graph import build_graph
from vmexplorer.plan.copies import earliest_deadline
from vmexplorer.policies import POLICIES, compile_plan
from vmexplorer.records import Timeline
from vmexplorer.records.collected import MEMCPY_KINDS, UM_KINDS, Collected, CollectorStatus, thin
from vmexplorer.records.device_memory import DeviceMemory
from vmexplorer.session import (
    Session,
    SessionError,
    load_session,
    new_session,
    save_session,
    session_from_bytes,
    session_to_bytes,
)
from vmexplorer.session import files as session_module
from vmexplorer.session.session import SCHEMA_VERSION
from vmexplorer.simulator import H100_DEFAULT, simulate
from vmexplorer.simulator.bound import lower_bound
from vmexplorer.simulator.costmodel import SWAP_RATES, CostModel


@pytest.fixture(scope="module")
def session() -> Session:
    # without workspace tensors: a file of this graph, relabelled as an older schema, is one that schema wrote
    # (test_workspaces_inside_the_capacity_are_kept_through_a_file has them)
    graph = build_graph("resnet18", 64, 224, workspaces=False)
    plan = compile_plan(graph, graph.footprint // 2, "autovm", {"offload": "all"})
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT,
                       notes=("recorded for the tests", "second note"))


def measured(s: Session, iterations: int = 3) -> Session:
    """The simulated iteration repeated back to back, as the executor would record it."""
    tl = s.timeline
    span = int(max(tl.op_end_ns.max(), tl.memop_end_ns.max())) + 1000

    def rep(a: np.ndarray, shift: bool) -> np.ndarray:
        return np.concatenate([a + (i * span if shift else 0) for i in range(iterations)])

    def its(a: np.ndarray) -> np.ndarray:
        return np.repeat(np.arange(iterations), len(a))

    tl2 = Timeline("measured", its(tl.op_iteration), rep(tl.op_index, False), rep(tl.op_start_ns, True),
                   rep(tl.op_end_ns, True), rep(tl.op_stall_ns, False), rep(tl.op_fault_bytes, False),
                   its(tl.memop_iteration), rep(tl.memop_index, False), rep(tl.memop_start_ns, True),
                   rep(tl.memop_end_ns, True), rep(tl.resident_t_ns, True), rep(tl.resident_bytes, False))
    return dataclasses.replace(s, timeline=tl2, cost_model=None)


def assert_same(a: Session, b: Session) -> None:
    assert b.graph == a.graph
    assert b.plan == a.plan
    for f in dataclasses.fields(Timeline):
        x, y = getattr(a.timeline, f.name), getattr(b.timeline, f.name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y) and x.dtype.kind == y.dtype.kind, f.name
        else:
            assert x == y
    assert b.cost_model == a.cost_model
    assert (b.environment, b.notes, b.created) == (a.environment, a.notes, a.created)
    assert b.bound == a.bound
    assert (a.collected is None) == (b.collected is None)
    if a.collected is not None and b.collected is not None:
        for f in dataclasses.fields(Collected):
            x, y = getattr(a.collected, f.name), getattr(b.collected, f.name)
            if isinstance(x, np.ndarray):
                assert np.array_equal(x, y) and x.dtype == y.dtype, f.name
            elif f.name == "status":
                assert [vars(s) for s in x] == [vars(s) for s in y]
            else:
                assert x == y, f.name


# --- round trips ----------------------------------------------------------------------------------

def test_load_gives_back_equal_graph_plan_timeline_and_cost_model(session: Session, tmp_path: Path) -> None:
    assert session.plan.moves, "the fixture should have planned round trips"
    save_session(session, tmp_path / "s.vms")
    assert_same(session, load_session(tmp_path / "s.vms"))


def test_a_measured_session_of_several_iterations_without_cost_model_round_trips(
        session: Session, tmp_path: Path) -> None:
    m = measured(session)
    save_session(m, tmp_path / "m.vms")
    back = load_session(tmp_path / "m.vms")
    assert_same(m, back)
    assert back.timeline.iterations == 3 and back.summary == m.summary


def test_float_times_stay_floats_and_whole_times_stay_integers(session: Session) -> None:
    tl = dataclasses.replace(session.timeline, op_start_ns=session.timeline.op_start_ns + 0.5,
                             op_end_ns=session.timeline.op_end_ns + 0.5)
    s = dataclasses.replace(session, timeline=tl)
    back = session_from_bytes(session_to_bytes(s))
    assert back.timeline.op_start_ns.dtype == np.float64 and back.timeline.op_index.dtype == np.int64
    assert_same(s, back)


def test_saving_the_same_session_twice_gives_identical_bytes(session: Session, tmp_path: Path) -> None:
    save_session(session, tmp_path / "a.vms")
    save_session(load_session(tmp_path / "a.vms"), tmp_path / "b.vms")
    assert (tmp_path / "a.vms").read_bytes() == (tmp_path / "b.vms").read_bytes()


def test_the_file_is_gzip_json_with_columns_that_name_their_units(session: Session, tmp_path: Path) -> None:
    save_session(session, tmp_path / "s.vms")
    doc = json.loads(gzip.decompress((tmp_path / "s.vms").read_bytes()))
    assert (doc["format"], doc["schema_version"]) == ("vmexplorer-session", SCHEMA_VERSION)
    ops = doc["timeline"]["ops"]
    assert ops["rows"] == len(session.timeline.op_index)
    assert {"start_ns", "end_ns", "stall_ns", "fault_bytes"} <= set(ops["columns"])
    reads = doc["graph"]["ops"]["ragged"]["read_tensors"]
    assert len(reads["offsets"]) == len(session.graph.ops) + 1
    assert doc["config"]["capacity_bytes"] == session.plan.capacity


def test_a_new_session_is_stamped_in_utc_with_the_software_versions(session: Session) -> None:
    assert session.created.endswith("Z") and "T" in session.created
    assert {"vmexplorer", "python", "platform", "numpy"} <= set(session.environment)
    s = new_session(session.graph, session.plan, session.timeline, environment={"gpu": "NVIDIA H100"})
    assert s.environment["gpu"] == "NVIDIA H100" and s.cost_model is None


def test_a_plan_for_another_graph_is_refused(session: Session) -> None:
    other = build_graph("alexnet", 2, 64)
    with pytest.raises(SessionError, match="compile the plan for this graph"):
        new_session(other, session.plan, session.timeline)


def test_numbers_json_cannot_hold_are_refused_when_saving(session: Session) -> None:
    tl = dataclasses.replace(session.timeline, op_start_ns=session.timeline.op_start_ns * np.nan)
    with pytest.raises(SessionError,
                       match=r"cannot save this session: timeline.ops column 'start_ns' row 0 .* not NaN"):
        session_to_bytes(dataclasses.replace(session, timeline=tl))



def test_a_lone_surrogate_is_refused_when_saving_as_it_would_be_when_loading(session: Session) -> None:
    with pytest.raises(SessionError, match="cannot save this session: a text in it holds a lone UTF-16 surrogate"):
        session_to_bytes(dataclasses.replace(session, notes=("half a pair: \ud800",)))
    assert session_from_bytes(session_to_bytes(dataclasses.replace(session, notes=("a pair: \U0001F600",))))


def test_a_session_with_more_values_than_the_loader_takes_is_refused_when_saving(
        session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "MAX_VALUES", 1000)
    with pytest.raises(SessionError, match=r"cannot save this session: its JSON holds up to [\d,]+ values, more "
                                           r"than the 1,000 a session may hold"):
        session_to_bytes(session)


# --- bad files ------------------------------------------------------------------------------------

def rewrite(change: Callable[[dict[str, Any]], Any]) -> Callable[[bytes], bytes]:
    def make(good: bytes) -> bytes:
        doc = json.loads(gzip.decompress(good))
        change(doc)
        text = json.dumps(doc).replace('"INFINITE"', "1e999")  # a literal JSON parses as infinity
        return gzip.compress(text.encode(), mtime=0)
    return make


def set_in(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set a nested field, e.g. "graph.ops.columns.name.0"; value may be a function of the old value."""
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key_: Any = int(last) if isinstance(node, list) else last
        node[key_] = value(node[key_]) if callable(value) else value
    return change


def without_schema_15(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without schema 15's `graph.definition` (null: a built-in model's, in the documents these
    tests relabel)."""
    assert doc["graph"].pop("definition", None) is None
    return doc


def without_schema_14(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without schema 14's `plan.recomputes` (none in the documents these tests relabel) and
    schema 15's field."""
    assert doc["plan"].pop("recomputes", {"rows": 0})["rows"] == 0
    return without_schema_15(doc)


def without_schema_13(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without schema 13's `cost_model.evict_fastest_bytes_per_ns` and schema 14's field."""
    if doc["cost_model"] is not None:
        doc["cost_model"].pop("evict_fastest_bytes_per_ns", None)
    return without_schema_14(doc)


def without_schema_12(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without schema 12's `cost_model.workspace_ns` and schema 13's field."""
    if doc["cost_model"] is not None:
        doc["cost_model"].pop("workspace_ns", None)
    return without_schema_13(doc)


def without_schema_10(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without schema 10's fields (`device_memory`, `plan.room_bytes`), schema 11's
    (`config.workspaces`: false in the documents these tests relabel, whose graphs have no workspaces)
    and schema 12's."""
    assert doc["config"].pop("workspaces", False) is False
    doc.pop("device_memory", None)
    doc["plan"].pop("room_bytes", None)
    return without_schema_12(doc)


def without_mechanism(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without schema 8's fields (`config.mechanism`, the cost model's swap rates) and the
    later ones (schema 9's `plan.copy_order`, schema 10's)."""
    without_schema_10(doc)
    del doc["config"]["mechanism"]
    doc["plan"].pop("copy_order", None)
    for rate in SWAP_RATES:
        if doc["cost_model"] is not None:
            del doc["cost_model"][rate]
    return doc


def relabel(version: int) -> Callable[[dict[str, Any]], None]:
    """The document relabelled as a schema older than 7, without schema 7's `bound` and
    `cost_model.serialises_directions` (and schema 8's fields); fields of older schemas stay."""
    def change(doc: dict[str, Any]) -> None:
        without_mechanism(doc)
        doc["schema_version"] = version
        del doc["bound"]
        if doc["cost_model"] is not None:
            del doc["cost_model"]["serialises_directions"]
    return change


def as_version(version: int) -> Callable[[dict[str, Any]], None]:
    """The document relabelled as an older schema, without the fields that came after it (schema 7's
    `bound` and `cost_model.serialises_directions`, schema 6's `cost_model.fault_bytes_per_ns_by_kind`,
    schema 5's `timeline.counted_iterations`); fields of older schemas are each test's to remove or keep."""
    def change(doc: dict[str, Any]) -> None:
        if version < 7:
            relabel(version)(doc)
        elif version < 8:
            without_mechanism(doc)
        elif version < 9:
            del without_schema_10(doc)["plan"]["copy_order"]
        elif version < 10:
            without_schema_10(doc)
        elif version < 12:
            without_schema_12(doc)
        elif version < 13:
            without_schema_13(doc)
        elif version < 14:
            without_schema_14(doc)
        elif version < 15:
            without_schema_15(doc)
        doc["schema_version"] = version
        if version < 6 and doc["cost_model"] is not None:
            del doc["cost_model"]["fault_bytes_per_ns_by_kind"]
        if version < 5:
            del doc["timeline"]["counted_iterations"]
    return change


def delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for key in parents:
            node = node[key]
        del node[last]
    return change


GOOD_BOUND = {"min_bytes_to_host": 1 << 30, "min_bytes_to_device": 1 << 30, "lower_bound_ns": 10**8,
              "set_by": "migration bandwidth"}

BAD_FILES: list[tuple[str, Callable[[bytes], bytes], str]] = [
    ("empty", lambda good: b"", "is not a vmexplorer session: it is not gzip-compressed"),
    ("text", lambda good: b"hello, world\n", "not gzip-compressed"),
    ("plain json", lambda good: gzip.decompress(good), "looks like plain JSON"),
    ("gzip of binary", lambda good: gzip.compress(b"\x00\xff\xfe garbage"), "is not UTF-8 text"),
    ("gzip of text", lambda good: gzip.compress(b"format: vmexplorer"), "not valid JSON (Expecting value at line 1"),
    ("gzip of nan", lambda good: gzip.compress(b'{"format": NaN}'), "is not valid JSON"),
    ("deep nesting", lambda good: gzip.compress(b"[" * 5_000 + b"]" * 5_000), "nested too deeply"),
    ("a bomb of lists", lambda good: gzip.compress(b"[" * 200_000 + b"]" * 200_000),
     "opens 200,000 objects and lists, where a session has about a hundred (at most 10,000)"),
    ("other json", lambda good: gzip.compress(b'{"traceEvents": []}'), "is not a vmexplorer session"),
    ("json list", lambda good: gzip.compress(b"[1, 2]"), "is not a vmexplorer session"),
    ("truncated", lambda good: good[: len(good) // 2], "is truncated"),
    ("corrupted", lambda good: good[:40] + bytes(b ^ 0x55 for b in good[40:80]) + good[80:], "damaged"),
    ("newer schema", rewrite(set_in("schema_version", SCHEMA_VERSION + 1)),
     f"written by a newer vmexplorer (schema {SCHEMA_VERSION + 1}, this reads up to {SCHEMA_VERSION}); upgrade"),
    ("a rate of zero", rewrite(set_in("cost_model.evict_bytes_per_ns", 0)),
     "cost_model.evict_bytes_per_ns is 0: expected a rate from 0.001 to 1e+09 per ns"),
    ("a negative gap", rewrite(set_in("cost_model.op_gap_ns", {"conv1": -5})),
     "op_gap_ns.conv1 is -5: expected a time from 0"),
    ("a fault rate of zero for a kind", rewrite(set_in("cost_model.fault_bytes_per_ns_by_kind", {"sgd_momentum": 0})),
     "cost_model.fault_bytes_per_ns_by_kind.sgd_momentum is 0: expected a rate from 0.001"),
    ("fault rates by kind in a schema 5 cost model",
     rewrite(relabel(5)), 'unexpected field "fault_bytes_per_ns_by_kind"'),
    ("a bound in a schema 6 file", rewrite(lambda doc: without_mechanism(doc).update(schema_version=6)),
     'unexpected field "bound"'),
    ("serialised directions in a schema 6 cost model",
     rewrite(lambda doc: (without_mechanism(doc).update(schema_version=6), doc.pop("bound"))),
     'unexpected field "serialises_directions"'),
    ("a mechanism in a schema 7 file", rewrite(lambda doc: without_schema_10(doc).update(schema_version=7)),
     'unexpected field "mechanism"'),
    ("swap rates in a schema 7 cost model",
     rewrite(lambda doc: (without_schema_10(doc), doc["config"].pop("mechanism"), doc["plan"].pop("copy_order"),
                          doc.update(schema_version=7))),
     'unexpected field "swap_'),
    ("a copy order in a schema 8 file", rewrite(lambda doc: without_schema_10(doc).update(schema_version=8)),
     'plan has an unexpected field "copy_order"'),
    ("device memory in a schema 9 file", rewrite(set_in("schema_version", 9)),
     'the file has an unexpected field "device_memory"'),
    ("a room in a schema 9 plan", rewrite(lambda doc: (doc.pop("device_memory"), doc["config"].pop("workspaces"),
                                                       without_schema_14(doc), doc.update(schema_version=9))),
     'plan has an unexpected field "room_bytes"'),
    ("workspaces in a schema 10 config", rewrite(lambda doc: (without_schema_15(doc), doc.update(schema_version=10))),
     'config has an unexpected field "workspaces"'),
    ("workspaces that are not true or false", rewrite(set_in("config.workspaces", lambda _: "yes")),
     "config.workspaces"),
    ("a room over the capacity", rewrite(set_in("plan.room_bytes", lambda _: 2**40)),
     "plan.room_bytes is 1099511627776, more than the capacity"),
    ("a negative room", rewrite(set_in("plan.room_bytes", -1)), "plan.room_bytes is -1, expected at least 0"),
    ("device memory in a simulated session", rewrite(set_in("device_memory", {"total_bytes": 1})),
     "device_memory is what a measured run took; this session is simulated"),
    ("a copy order in a uvm plan", rewrite(set_in("plan.copy_order", [0])),
     "plan: the plan is uvm but has a copy order"),
    ("a copy order of text", rewrite(set_in("plan.copy_order", ["<b>1</b>"])),
     "plan.copy_order row 0 should be a whole number"),
    ("an unknown mechanism", rewrite(set_in("config.mechanism", "<i>magic</i>")),
     'config.mechanism is "<i>magic</i>", expected one of "uvm", "swap"'),
    ("swap for the uvm policy", rewrite(lambda doc: doc["config"].update(policy="uvm", options={}, mechanism="swap")),
     "the uvm policy runs under uvm only"),
    ("a swap rate of zero", rewrite(set_in("cost_model.swap_to_host_bytes_per_ns", 0)),
     "cost_model.swap_to_host_bytes_per_ns is 0: expected a rate from 0.001"),
    ("serialised directions as a number", rewrite(set_in("cost_model.serialises_directions", 1)),
     "cost_model.serialises_directions should be true or false, not the number 1"),
    ("a bound that is a list", rewrite(set_in("bound", [1])), "bound should be an object, not a list"),
    ("a bound without its time",
     rewrite(set_in("bound", {k: v for k, v in GOOD_BOUND.items() if k != "lower_bound_ns"})),
     "bound has no 'lower_bound_ns' field"),
    ("a bound set by something unknown", rewrite(set_in("bound", {**GOOD_BOUND, "set_by": "<b>luck</b>"})),
     'bound.set_by is "<b>luck</b>", expected one of "compute", "migration bandwidth"'),
    ("a negative bound", rewrite(set_in("bound", {**GOOD_BOUND, "min_bytes_to_host": -1})),
     "bound.min_bytes_to_host is -1, expected at least 0"),
    ("a bound beyond any size", rewrite(set_in("bound", {**GOOD_BOUND, "min_bytes_to_device": 2**51})),
     "bound.min_bytes_to_device is 2251799813685248, more than the 1125899906842624 bytes"),
    ("a bound beyond any time", rewrite(set_in("bound", {**GOOD_BOUND, "lower_bound_ns": 2**60})),
     "bound.lower_bound_ns is 1152921504606846976: expected a time from 0"),
    ("a fractional bound", rewrite(set_in("bound", {**GOOD_BOUND, "lower_bound_ns": 0.5})),
     "bound.lower_bound_ns should be a whole number, not the number 0.5"),
    ("schema 3 fields in a schema 2 cost model", rewrite(as_version(2)), 'unexpected field "call_ns"'),
    ("collected in a schema 1 file", rewrite(as_version(1)), 'unexpected field "collected"'),
    ("counted iterations in a schema 4 timeline", rewrite(relabel(4)),
     'unexpected field "counted_iterations"'),
    ("every iteration counted", rewrite(set_in("timeline.counted_iterations", lambda _: 10_000)),
     "timeline.counted_iterations is 10000, but the timeline records"),
    ("counted iterations as a fraction", rewrite(set_in("timeline.counted_iterations", 0.5)),
     "timeline.counted_iterations should be a whole number"),
    ("no collected field", rewrite(delete("collected")), "the file has no 'collected' field"),
    ("collected in a simulated session", rewrite(set_in("collected", {})), "collected has no 'kernel_names'"),
    ("schema as text", rewrite(set_in("schema_version", "1")), "schema_version"),
    ("missing plan", rewrite(delete("plan")), "the file has no 'plan' field"),
    ("extra field", rewrite(set_in("surprise", 1)), 'unexpected field "surprise"'),
    ("batch as text", rewrite(set_in("config.batch", "64")), "config.batch should be a whole number"),
    ("batch as bool", rewrite(set_in("config.batch", True)), "config.batch should be a whole number"),
    ("zero capacity", rewrite(set_in("config.capacity_bytes", 0)), "config.capacity_bytes is 0"),
    ("note not text", rewrite(set_in("notes.0", 3)), "notes row 0 should be text"),
    ("environment not text", rewrite(set_in("environment.python", None)), "environment.python"),
    ("bad date", rewrite(set_in("created", "yesterday")), "not an ISO-8601"),
    ("short column", rewrite(set_in("graph.ops.columns.name", lambda v: v[:-1])), "values for 178 rows"),
    ("rows beyond the cap", rewrite(set_in("graph.ops.rows", 10**9)), "more than the 10,000,000"),
    ("column not a list", rewrite(set_in("graph.tensors.columns.nbytes", 5)), "should be a list"),
    ("float in int column", rewrite(set_in("graph.tensors.columns.nbytes.3", 1.5)), "row 3 should be a whole"),
    ("unknown phase", rewrite(set_in("graph.ops.columns.phase.0", "sideways")), "expected one of backward"),
    ("negative tensor id", rewrite(set_in("graph.ops.ragged.read_tensors.values.0", -1)), "not a tensor id"),
    ("tensor id past the end", rewrite(set_in("plan.memops.columns.tensor.0", 10**6)), "not a tensor id"),
    ("consumer past the end", rewrite(set_in("graph.tensors.ragged.consumer_ops.values.0", 178)),
     "not an op id"),
    ("producer below -1", rewrite(set_in("graph.tensors.columns.producer_op.0", -2)), "not an op id"),
    ("issue before the start", rewrite(set_in("plan.memops.columns.issue_after_op.0", -2)), "not an op id"),
    ("memop index past the end", rewrite(set_in("timeline.memops.columns.memop.0", 10**6)),
     "not an index into plan.memops"),
    ("op index past the end", rewrite(set_in("timeline.ops.columns.op.0", 178)), "not an op id"),
    ("memop larger than its tensor", rewrite(set_in("plan.memops.columns.nbytes.0", 10**15)),
     "is more than its tensor's"),
    ("offsets out of order", rewrite(set_in("graph.ops.ragged.read_tensors.offsets.1", 10**6)),
     "offsets of 'read_tensors' do not index"),
    ("ends before it starts", rewrite(set_in("timeline.ops.columns.start_ns.0", 10**12)), "ends (end_ns) before"),
    ("a negative time", rewrite(set_in("timeline.ops.columns.end_ns.0", -5)),
     "timeline.ops row 0, end_ns: -5 is not a time in ns from the first iteration's start"),
    ("a time beyond 104 days", rewrite(set_in("timeline.memops.columns.end_ns.0", 2**60)),
     "timeline.memops row 0, end_ns: 1152921504606846976 is not a time"),
    ("infinite time", rewrite(set_in("timeline.ops.columns.start_ns.0", "INFINITE")), "an infinite number"),
    ("huge integer", rewrite(set_in("timeline.ops.columns.fault_bytes.0", 2**80)), "beyond 64 bits"),
    ("no ops run", rewrite(set_in("timeline.ops", {"rows": 0, "columns": {c: [] for c in (
        "iteration", "op", "start_ns", "end_ns", "stall_ns", "fault_bytes")}})), "timeline.ops has no rows"),
    ("an iteration missing", rewrite(set_in("timeline.ops.columns.iteration", lambda v: [2] * len(v))),
     "no row for iteration 0"),
    ("memop in an iteration without ops", rewrite(set_in("timeline.memops.columns.iteration.0", 1)),
     "not an iteration with ops"),
    ("unknown source", rewrite(set_in("timeline.source", "guessed")), "expected one of simulated"),
    ("cost model field missing", rewrite(delete("cost_model.host_block")), "no 'host_block' field"),
    ("option as list", rewrite(set_in("config.options.offload", [1])),
     "config.options.offload should be text, not a list"),
    # what loads must make sense: the configured model's graph, a valid plan, a known policy and its options
    ("an op name that is not the model's", rewrite(set_in("graph.ops.columns.name.3", "<img src=x onerror=alert(1)>")),
     'graph.ops row 3, name: "<img src=x onerror=alert(1)>" is not resnet18 batch 64 at 224px\'s "maxpool"'),
    ("a tensor the model does not have", rewrite(set_in("graph.tensors.columns.nbytes.7", 12)),
     "graph.tensors row 7, nbytes: 12 is not resnet18 batch 64 at 224px's"),
    ("an op too many", rewrite(set_in("graph.ops.rows", lambda n: n - 1)),
     "graph.ops column 'name' has 178 values for 177 rows"),
    ("a model vmexplorer does not know", rewrite(set_in("config.model", "resnet1000")),
     'config.model is "resnet1000", not a model this vmexplorer knows (alexnet, vgg11'),
    ("a batch no graph can be built for", rewrite(set_in("config.batch", 2**40)),
     "config: batch 1099511627776 is beyond any sensible run"),
    ("a capacity beyond any GPU", rewrite(set_in("config.capacity_bytes", 2**51)),
     "config.capacity_bytes is 2251799813685248, more than the 1125899906842624 bytes (1 PiB)"),
    ("an option the policy does not have", rewrite(set_in("config.options.speed", 11)),
     'config.options.speed: the autovm policy has no option "speed"'),
    ("an option of the wrong type", rewrite(set_in("config.options.prefetch_distance", "3")),
     'config.options.prefetch_distance should be a whole number, not the text "3"'),
    ("an option below its minimum", rewrite(set_in("config.options.prefetch_distance", 0)),
     "config.options.prefetch_distance is 0, expected at least 1"),
    ("an option above its maximum", rewrite(set_in("config.options.prefetch_distance", 10**9)),
     "config.options.prefetch_distance is 1000000000, expected at most 10000"),
    ("an op run twice in an iteration", rewrite(set_in("timeline.ops.columns.op.1", 0)),
     "timeline.ops: each iteration must run each of the graph's 178 ops exactly once"),
    ("an iteration that runs one op", rewrite(set_in("timeline.ops", lambda t: {"rows": t["rows"] + 1, "columns": {
        c: [*v, 1 if c == "iteration" else v[0]] for c, v in t["columns"].items()}})),
     "timeline.ops: each iteration must run each of the graph's 178 ops exactly once"),
    ("a transfer repeated", rewrite(set_in("timeline.memops", lambda t: {"rows": 2 * t["rows"], "columns": {
        c: [*v, *v] for c, v in t["columns"].items()}})), "timeline.memops: a memory operation of the plan runs at "
     "most once in an iteration"),
    ("an option that is not one of its choices", rewrite(set_in("config.options.offload", "some")),
     'config.options.offload is "some", expected one of "needed", "all"'),
    ("a plan that breaks the capacity", rewrite(set_in("config.capacity_bytes", 2**20)),
     "plan: invalid plan: "),
    ("a memory operation due before it is issued",
     rewrite(set_in("plan.memops.columns.complete_before_op", lambda v: [0] * len(v))),
     "plan: memory operation 0 (conv1.out) is issued after op 1 and due before op 0: not in order"),
    ("a lone surrogate in a note", lambda good: gzip.compress(gzip.decompress(good).replace(
        b'"second note"', b'"second \\ud800 note"')), "holds half of a UTF-16 surrogate pair"),
]


@pytest.mark.parametrize("make, expected", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_one_session_error_naming_the_file_and_the_problem(
        session: Session, tmp_path: Path, make: Callable[[bytes], bytes], expected: str) -> None:
    path = tmp_path / "bad.vms"
    path.write_bytes(make(session_to_bytes(session)))
    with pytest.raises(SessionError) as info:
        load_session(path)
    message = str(info.value)
    assert expected in message
    assert message.startswith(str(path)) and "\n" not in message
    assert not any(word in message for word in ("Traceback", "KeyError", "TypeError", "IndexError"))
    assert info.value.__cause__ is None and (info.value.__context__ is None or info.value.__suppress_context__)


def test_a_file_too_large_to_be_a_session_is_refused_before_reading(
        session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_session(session, tmp_path / "s.vms")
    monkeypatch.setattr(session_module, "MAX_FILE_BYTES", 1000)
    with pytest.raises(SessionError, match=r"is [\d.]+ KiB, more than the 1000 B a session file may be"):
        load_session(tmp_path / "s.vms")


def test_decompression_stops_at_the_cap(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = gzip.compress(b" " * 50_000_000)  # 50 MB of spaces in 50 kB
    monkeypatch.setattr(session_module, "MAX_JSON_BYTES", 10_000)
    with pytest.raises(SessionError, match="decompresses to more than"):
        session_from_bytes(bomb, "bomb.vms")


def test_a_missing_file_or_a_folder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="cannot read .*nothing.vms: No such file"):
        load_session(tmp_path / "nothing.vms")
    with pytest.raises(SessionError, match="is a folder"):
        load_session(tmp_path)


def test_loading_leaves_the_file_untouched(session: Session, tmp_path: Path) -> None:
    path = tmp_path / "s.vms"
    save_session(session, path)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    load_session(path)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


# --- writing files --------------------------------------------------------------------------------

def test_an_existing_file_is_refused_without_force_and_replaced_with_it(session: Session,
                                                                        tmp_path: Path) -> None:
    path = tmp_path / "s.vms"
    path.write_bytes(b"precious")
    with pytest.raises(OutputError, match="s.vms exists; pass --force to replace it"):
        save_session(session, path)
    assert path.read_bytes() == b"precious"
    save_session(session, path, force=True)
    assert_same(session, load_session(path))


def test_a_missing_folder_or_a_folder_as_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="the folder .*nowhere does not exist"):
        atomic_write(tmp_path / "nowhere" / "s.vms", b"x")
    (tmp_path / "afile").write_bytes(b"")
    with pytest.raises(OutputError, match="does not exist"):
        atomic_write(tmp_path / "afile" / "s.vms", b"x")
    with pytest.raises(OutputError, match="is a folder"):
        atomic_write(tmp_path, b"x", force=True)


def test_an_unwritable_folder_is_refused_and_left_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    # Root may create files in a folder without write permission, so chmod alone tests nothing there:
    # creating a file in this folder is refused as the kernel refuses it to anyone else (EACCES), for
    # every user alike. Opening anything elsewhere goes to the real os.open.
    import errno

    real_open = os.open
    refused: list[str] = []

    def open_as_the_kernel_would_for_others(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and Path(os.fsdecode(path)).parent == folder:
            refused.append(os.fsdecode(path))
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_as_the_kernel_would_for_others)
    try:
        with pytest.raises(OutputError, match="cannot write"):
            atomic_write(folder / "s.vms", b"x")
        assert refused  # the write was refused by the folder, not by a check before it
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt()],
                         ids=["disk full", "interrupted"])
@pytest.mark.parametrize("force", [False, True])
def test_a_failed_write_leaves_no_partial_file_and_keeps_the_original(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException, force: bool) -> None:
    path = tmp_path / "out.vms"
    if force:
        path.write_bytes(b"the original")

    def fail(fd: int) -> None:
        raise failure

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OutputError if isinstance(failure, OSError) else KeyboardInterrupt):
        atomic_write(path, b"new content" * 1000, force=force)
    assert [p.name for p in tmp_path.iterdir()] == (["out.vms"] if force else [])
    if force:
        assert path.read_bytes() == b"the original"


def test_a_written_file_is_readable_by_others_like_any_file(tmp_path: Path) -> None:
    atomic_write(tmp_path / "x", b"data")
    assert (tmp_path / "x").stat().st_mode & 0o777 == 0o644
    (tmp_path / "x").chmod(0o600)
    atomic_write(tmp_path / "x", b"more", force=True)
    assert (tmp_path / "x").stat().st_mode & 0o777 == 0o600


# --- collector records (schema 2) -----------------------------------------------------------------

def synthetic_records(s: Session, seed: int = 0) -> Collected:
    """Kernels, unified-memory counters, memory copies and NVML samples spread over a measured session's
    timeline."""
    tl, rng = s.timeline, np.random.default_rng(seed)
    rows = rng.integers(0, len(tl.op_index), 2000)
    start = (tl.op_start_ns[rows] + (tl.op_end_ns[rows] - tl.op_start_ns[rows]) * rng.random(2000)).astype(np.int64)
    k = rows[:500]
    nvml_t = np.linspace(0, float(tl.op_end_ns.max()), 50)
    return Collected(tl.op_iteration[k], start[:500], start[:500] + rng.integers(0, 5000, 500),
                     rng.choice([7, 13], 500, p=[0.9, 0.1]), rng.integers(0, 3, 500),
                     ("sm90_xmma_gemm", "cudnn::conv_fprop<float>", "relu"),
                     tl.op_iteration[rows[500:]], start[500:], start[500:] + rng.integers(0, 20_000, 1500),
                     rng.integers(0, 3, 1500), rng.integers(1, 2**21, 1500),
                     nvml_t, rng.integers(10**9, 10**10, 50), rng.random(50) * 1e9, rng.random(50) * 1e9,
                     rng.integers(0, 101, 50).astype(np.float64),
                     (CollectorStatus("cupti", True, "", 3, 120_000),
                      CollectorStatus("nvml", True, "", 0, 4_000),
                      CollectorStatus("nvtx", False, "CUPTI's MARKER records did not arrive", 0, 0)),
                     memcpy_iteration=tl.op_iteration[rows[:20]], memcpy_start_ns=start[:20],
                     memcpy_end_ns=start[:20] + 700, memcpy_stream=np.full(20, 7), memcpy_kind=rng.integers(0, 11, 20),
                     memcpy_bytes=rng.integers(4, 2**20, 20))


@pytest.fixture(scope="module")
def recorded(session: Session) -> Session:
    m = measured(session)
    return new_session(m.graph, m.plan, m.timeline, notes=("with collectors",), collected=synthetic_records(m))


def test_a_session_with_collector_records_round_trips_and_saves_identically(recorded: Session,
                                                                           tmp_path: Path) -> None:
    save_session(recorded, tmp_path / "a.vms")
    back = load_session(tmp_path / "a.vms")
    assert_same(recorded, back)
    assert back.summary == recorded.summary
    save_session(back, tmp_path / "b.vms")
    assert (tmp_path / "a.vms").read_bytes() == (tmp_path / "b.vms").read_bytes()
    thinned = dataclasses.replace(recorded, collected=thin(recorded.collected))  # type: ignore[arg-type]
    assert_same(thinned, session_from_bytes(session_to_bytes(thinned)))


def test_collector_records_are_columns_with_kinds_and_names_as_text(recorded: Session) -> None:
    doc = json.loads(gzip.decompress(session_to_bytes(recorded)))
    c = doc["collected"]
    assert set(c) == {"kernel_names", "kernels", "um", "memcpy", "nvml", "status"}
    assert set(c["memcpy"]["columns"]["kind"]) <= set(MEMCPY_KINDS) and c["memcpy"]["rows"] == 20
    assert c["kernel_names"]["columns"]["name"] == list(recorded.collected.kernel_names)  # type: ignore[union-attr]
    assert set(c["um"]["columns"]["kind"]) <= set(UM_KINDS) and c["um"]["rows"] == 1500
    assert c["status"]["columns"]["available"] == [True, True, False]


def test_the_summary_adds_the_measured_figures(recorded: Session) -> None:
    s = recorded.summary
    assert {"measured_fault_groups", "measured_faulted_pages", "measured_bytes_htod", "measured_bytes_dtoh",
            "measured_kernel_ns", "measured_collector_flush_ns", "measured_dropped_records"} <= set(s)
    assert s["measured_nvtx_unavailable"] == "CUPTI's MARKER records did not arrive"
    assert s["measured_dropped_records"] == 3 and s["iteration_ns"] > 0
    assert not any(k.startswith("measured_") for k in dataclasses.replace(recorded, collected=None).summary)


def test_new_session_refuses_records_that_do_not_fit_the_timeline(session: Session, recorded: Session) -> None:
    with pytest.raises(SessionError, match="belong to a measured session, not a simulated one"):
        new_session(session.graph, session.plan, session.timeline, collected=recorded.collected)
    one = dataclasses.replace(recorded.timeline, op_iteration=np.zeros_like(recorded.timeline.op_iteration))
    with pytest.raises(SessionError, match="do not fit the timeline: kernel_iteration row .* but the timeline"):
        new_session(recorded.graph, recorded.plan, one, collected=recorded.collected)


@pytest.mark.parametrize("path", sorted((Path(__file__).parent / "data").glob("schema1-*.vms")),
                         ids=lambda p: p.name)
def test_schema_1_files_still_load_without_collector_records(path: Path) -> None:
    assert json.loads(gzip.decompress(path.read_bytes()))["schema_version"] == 1
    s = load_session(path)
    assert s.collected is None and s.summary["iterations"] >= 1


def test_a_schema_1_file_written_by_hand_loads_and_is_saved_as_the_newest(session: Session) -> None:
    doc = json.loads(gzip.decompress(session_to_bytes(session)))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["collected"] is None
    as_version(1)(doc)
    del doc["collected"]
    del doc["cost_model"]["op_gap_ns"]
    del doc["cost_model"]["call_ns"]
    old = session_from_bytes(gzip.compress(json.dumps(doc).encode()))
    assert_same(session, old)
    assert json.loads(gzip.decompress(session_to_bytes(old)))["schema_version"] == SCHEMA_VERSION


def test_the_counted_iterations_are_saved_and_a_schema_4_file_has_none(recorded: Session) -> None:
    counted = dataclasses.replace(recorded, timeline=dataclasses.replace(recorded.timeline, counted=1))
    back = session_from_bytes(session_to_bytes(counted))
    assert back.timeline.counted == 1 and back.summary["iterations"] == recorded.timeline.iterations - 1
    doc = json.loads(gzip.decompress(session_to_bytes(counted)))
    as_version(4)(doc)
    assert session_from_bytes(gzip.compress(json.dumps(doc).encode())).timeline.counted == 0


def test_a_schema_3_file_loads_saying_its_memory_copies_were_not_collected(recorded: Session) -> None:
    doc = json.loads(gzip.decompress(session_to_bytes(recorded)))
    as_version(3)(doc)
    del doc["collected"]["memcpy"]
    old = session_from_bytes(gzip.compress(json.dumps(doc).encode()))
    assert old.collected is not None and not len(old.collected.memcpy_bytes)
    assert "recorded before vmexplorer collected memory copies" in str(old.summary["measured_cupti_memcpy_unavailable"])
    assert "measured_memcpys" not in old.summary and recorded.summary["measured_memcpys"] >= 0
    doc["collected"]["memcpy"] = json.loads(gzip.decompress(session_to_bytes(recorded)))["collected"]["memcpy"]
    with pytest.raises(SessionError, match="unexpected"):
        session_from_bytes(gzip.compress(json.dumps(doc).encode()))


def test_a_schema_2_cost_model_loads_without_gaps_and_a_schema_3_one_keeps_them(session: Session) -> None:
    gapped = dataclasses.replace(session, cost_model=dataclasses.replace(session.cost_model,
                                                                         op_gap_ns={"conv1": 1500.0}))
    assert session_from_bytes(session_to_bytes(gapped)).cost_model.op_gap_ns == {"conv1": 1500.0}
    doc = json.loads(gzip.decompress(session_to_bytes(session)))
    as_version(2)(doc)
    del doc["cost_model"]["op_gap_ns"]
    del doc["cost_model"]["call_ns"]
    old = session_from_bytes(gzip.compress(json.dumps(doc).encode())).cost_model
    assert (old.op_gap_ns, old.call_ns) == ({}, 0.0)


def test_fault_rates_by_kind_are_saved_and_a_schema_5_cost_model_has_none(session: Session) -> None:
    kinds = dataclasses.replace(session, cost_model=dataclasses.replace(
        session.cost_model, fault_bytes_per_ns_by_kind={"sgd_momentum": 9.5, "conv2d_backward": 7.0}))
    back = session_from_bytes(session_to_bytes(kinds)).cost_model
    assert back.fault_bytes_per_ns_by_kind == {"sgd_momentum": 9.5, "conv2d_backward": 7.0}
    doc = json.loads(gzip.decompress(session_to_bytes(kinds)))
    as_version(5)(doc)
    assert session_from_bytes(gzip.compress(json.dumps(doc).encode())).cost_model.fault_bytes_per_ns_by_kind == {}


def test_a_bound_and_one_way_migrations_are_saved_and_a_schema_6_file_loads_with_neither(session: Session) -> None:
    bound = lower_bound(session.graph, session.plan.capacity, H100_DEFAULT)
    both_ways = dataclasses.replace(session.cost_model, serialises_directions=False)
    s = dataclasses.replace(session, bound=bound, cost_model=both_ways)
    back = session_from_bytes(session_to_bytes(s))
    assert back.bound == bound and back.bound.min_bytes_to_device > 0
    assert back.cost_model.serialises_directions is False
    doc = json.loads(gzip.decompress(session_to_bytes(s)))
    as_version(6)(doc)
    old = session_from_bytes(gzip.compress(json.dumps(doc).encode()))
    assert old.bound is None and old.cost_model.serialises_directions is True  # managed memory's driver


MEMORY = DeviceMemory(total_bytes=150 << 30, context_bytes=600 << 20, free_before_bytes=140 << 30,
                      least_free_bytes=(140 << 30) - (3 << 30), pool_bytes=2 << 30, scratch_bytes=1 << 30,
                      ledger_peak_bytes=2 << 30, managed=False)


def test_a_measured_run_keeps_the_device_memory_it_took_and_a_swap_plan_its_room_through_a_file(
        recorded: Session, session: Session) -> None:
    s = dataclasses.replace(recorded, device_memory=MEMORY)
    back = session_from_bytes(session_to_bytes(s))
    assert back.device_memory == MEMORY and back.device_memory.taken_bytes == 3 << 30
    unmeasured = dataclasses.replace(MEMORY, context_bytes=None)
    assert session_from_bytes(session_to_bytes(dataclasses.replace(s, device_memory=unmeasured))).device_memory \
        == unmeasured
    graph = build_graph("vgg19", 64)
    plan = compile_plan(graph, graph.footprint // 2, "belady", mechanism="swap")
    assert 0 < plan.room_bytes < plan.capacity  # VGG-19's pool outgrows the capacity at full room
    swap = new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)
    assert session_from_bytes(session_to_bytes(swap)).plan.room_bytes == plan.room_bytes


@pytest.mark.parametrize("field, value, expected", [
    ("least_free_bytes", (150 << 30) + 1, "should rise in that order"),
    ("total_bytes", -1, "device_memory.total_bytes is -1, expected at least 0"),
    ("managed", "yes", "device_memory.managed should be true or false"),
    ("context_bytes", "<b>600</b>", "device_memory.context_bytes should be a whole number"),
])
def test_a_device_memory_that_cannot_be_is_refused(recorded: Session, tmp_path: Path, field: str, value: Any,
                                                   expected: str) -> None:
    path = tmp_path / "bad.vms"
    good = session_to_bytes(dataclasses.replace(recorded, device_memory=MEMORY))
    path.write_bytes(rewrite(set_in(f"device_memory.{field}", value))(good))
    with pytest.raises(SessionError, match=expected.replace("(", r"\(")):
        load_session(path)


def test_a_swap_session_keeps_its_mechanism_copy_order_and_swap_rates_through_a_file(session: Session) -> None:
    graph = session.graph
    # (at half, what the engine keeps of the capacity leaves this graph's pool too little: refused)
    plan = compile_plan(graph, graph.footprint * 6 // 10, "belady", mechanism="swap")
    cost = dataclasses.replace(H100_DEFAULT, swap_to_device_bytes_per_ns=55.0, swap_to_host_bytes_per_ns=53.0,
                               swap_call_ns=7_000.0)
    s = new_session(graph, plan, simulate(graph, plan, cost), cost,
                    bound=lower_bound(graph, plan.capacity, cost, plan.mechanism))
    back = session_from_bytes(session_to_bytes(s))
    assert back.plan.mechanism is Mechanism.SWAP and back.plan.memops == plan.memops
    timeline = simulate(graph, plan, cost)
    order = earliest_deadline(plan, timeline.op_end_ns, timeline.memop_end_ns - timeline.memop_start_ns)
    ordered = dataclasses.replace(s, plan=dataclasses.replace(plan, copy_order=order))
    assert order and session_from_bytes(session_to_bytes(ordered)).plan.copy_order == order
    assert (back.cost_model.swap_to_device_bytes_per_ns, back.cost_model.swap_to_host_bytes_per_ns,
            back.cost_model.swap_call_ns) == (55.0, 53.0, 7_000.0)
    assert json.loads(gzip.decompress(session_to_bytes(s)))["config"]["mechanism"] == "swap"


def test_a_schema_7_file_loads_as_uvm_with_the_default_swap_rates(session: Session) -> None:
    doc = json.loads(gzip.decompress(session_to_bytes(session)))
    as_version(7)(doc)
    assert "mechanism" not in doc["config"]
    old = session_from_bytes(gzip.compress(json.dumps(doc).encode()))
    assert old.plan.mechanism is Mechanism.UVM and old.plan.memops == session.plan.memops
    assert old.cost_model.swap_to_device_bytes_per_ns == CostModel("x", 1, 1, 1, 1, 1, 1, 0).swap_to_device_bytes_per_ns


STEPS = {"features.0": ((0, 2_000_000.0), (1 << 20, 500_000.0), (64 << 20, 0.0))}


def test_a_cost_model_timing_convolutions_by_workspace_round_trips(session: Session) -> None:
    s = dataclasses.replace(session, cost_model=dataclasses.replace(session.cost_model or H100_DEFAULT,
                                                                    workspace_ns=STEPS))
    back = session_from_bytes(session_to_bytes(s))
    assert back.cost_model is not None and back.cost_model.workspace_ns == STEPS


def test_a_schema_11_file_loads_with_no_op_timed_by_its_workspace(session: Session) -> None:
    s = dataclasses.replace(session, cost_model=session.cost_model or H100_DEFAULT)
    doc = json.loads(gzip.decompress(session_to_bytes(s)))
    as_version(11)(doc)
    assert "workspace_ns" not in doc["cost_model"]
    assert session_from_bytes(gzip.compress(json.dumps(doc).encode())).cost_model.workspace_ns == {}


def test_the_fastest_eviction_rate_round_trips_and_a_schema_12_file_loads_with_its_fitted_rate(
        session: Session) -> None:
    cost = dataclasses.replace(session.cost_model or H100_DEFAULT, evict_fastest_bytes_per_ns=17.5)
    back = session_from_bytes(session_to_bytes(dataclasses.replace(session, cost_model=cost))).cost_model
    assert back is not None and back.evict_fastest_bytes_per_ns == 17.5
    doc = json.loads(gzip.decompress(session_to_bytes(dataclasses.replace(session, cost_model=cost))))
    as_version(12)(doc)
    old = session_from_bytes(gzip.compress(json.dumps(doc).encode())).cost_model
    assert old is not None and old.evict_fastest_bytes_per_ns == 0.0
    assert old.fastest_evict_bytes_per_ns == old.evict_bytes_per_ns
    doc["cost_model"]["evict_fastest_bytes_per_ns"] = 1.0
    with pytest.raises(SessionError, match='unexpected field "evict_fastest_bytes_per_ns"'):
        session_from_bytes(gzip.compress(json.dumps(doc).encode()))


def test_a_negative_fastest_eviction_rate_is_refused(session: Session) -> None:
    doc = json.loads(gzip.decompress(session_to_bytes(
        dataclasses.replace(session, cost_model=session.cost_model or H100_DEFAULT))))
    doc["cost_model"]["evict_fastest_bytes_per_ns"] = -1.0
    with pytest.raises(SessionError, match="evict_fastest_bytes_per_ns is -1: expected 0 or a rate"):
        session_from_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.mark.parametrize("steps, says", [
    ([[1 << 20, 1.0], [0, 2.0]], "expected bytes rising from step to step"),
    ([], "should be a list of 1 to 256"),
    ([[0, 1.0]] * 300, "should be a list of 1 to 256"),
    ([[0]], "should hold [bytes, ns] pairs"),
    ([[-1, 0.0]], "expected at least 0"),
    ([[0, 1e13]], "and a time within"),
    ([[0, "fast"]], "should be a number"),
])
def test_a_cost_models_workspace_steps_that_make_no_sense_are_refused_with_one_message(
        session: Session, steps: Any, says: str) -> None:
    s = dataclasses.replace(session, cost_model=session.cost_model or H100_DEFAULT)
    doc = json.loads(gzip.decompress(session_to_bytes(s)))
    doc["cost_model"]["workspace_ns"] = {"features.0": steps}
    with pytest.raises(SessionError, match=re.escape(says)):
        session_from_bytes(gzip.compress(json.dumps(doc).encode()))


def test_a_measured_session_is_held_against_its_own_models_bound_and_a_simulated_one_keeps_what_it_is_given(
        session: Session) -> None:
    from vmexplorer.session import bound_for

    measured = dataclasses.replace(session.timeline, source="measured")
    expected = lower_bound(session.graph, session.plan.capacity, H100_DEFAULT)
    # with no cost model of its GPU, no bound: the default's is another GPU's
    assert new_session(session.graph, session.plan, measured).bound is None
    slow = dataclasses.replace(H100_DEFAULT, name="slow", evict_bytes_per_ns=1.0)
    assert new_session(session.graph, session.plan, measured, cost_model=slow).bound == \
        lower_bound(session.graph, session.plan.capacity, slow) != expected
    assert new_session(session.graph, session.plan, session.timeline).bound is None
    assert bound_for(session.graph, session.plan) == expected


def test_a_plan_below_the_least_capacity_has_no_bound_rather_than_an_error(session: Session) -> None:
    from vmexplorer.session import bound_for

    tiny = dataclasses.replace(session.plan, config=dataclasses.replace(session.plan.config, capacity=1 << 20))
    assert bound_for(session.graph, tiny) is None


def test_new_session_refuses_a_bound_of_another_type(session: Session) -> None:
    with pytest.raises(SessionError, match="bound should be a simulator.bound.Bound, not dict"):
        new_session(session.graph, session.plan, session.timeline, bound=GOOD_BOUND)  # type: ignore[arg-type]


BAD_COLLECTED: list[tuple[str, Callable[[bytes], bytes], str]] = [
    ("missing table", rewrite(delete("collected.nvml")), "collected has no 'nvml' field"),
    ("not an object", rewrite(set_in("collected", [1])), "collected should be an object, not a list"),
    ("unknown kind", rewrite(set_in("collected.um.columns.kind.3", "page_fault")),
     "collected.um column 'kind' row 3 is \"page_fault\", expected one of bytes_dtoh"),
    ("kind as number", rewrite(set_in("collected.um.columns.kind.0", 2)), "row 0 should be text"),
    ("name index past the end", rewrite(set_in("collected.kernels.columns.name.4", 3)),
     "collected.kernels row 4, name: 3 is not an index into collected.kernel_names; expected 0 to 2"),
    ("negative value", rewrite(set_in("collected.um.columns.value.2", -1)), "collected.um row 2, value: -1"),
    ("fractional value", rewrite(set_in("collected.um.columns.value.2", 0.5)),
     "collected.um column 'value' row 2 should be a whole number"),
    ("zero records", rewrite(set_in("collected.um.columns.records.0", 0)), "collected.um row 0, records: 0"),
    ("negative time", rewrite(set_in("collected.kernels.columns.start_ns.0", -1)),
     "collected.kernels row 0, start_ns: -1 is not a time in ns"),
    ("ends before it starts", rewrite(set_in("collected.um.columns.end_ns.1", 0)),
     "collected.um row 1: it ends (end_ns) before it starts"),
    ("a column adding up past int64", rewrite(set_in("collected.um.columns.records", lambda v: [2**61] * len(v))),
     "collected.um column 'records': its values add up to more than 2**62"),
    ("iteration not recorded", rewrite(set_in("collected.kernels.columns.iteration.0", 3)),
     "collected.kernels row 0, iteration: 3 is not an iteration with ops; expected 0 to 2"),
    ("short column", rewrite(set_in("collected.kernels.columns.stream", lambda v: v[:-1])),
     "collected.kernels column 'stream' has 499 values for 500 rows"),
    ("too many rows", rewrite(set_in("collected.um.rows", 10**8)), "collected.um claims 100,000,000 rows"),
    ("utilisation over 100", rewrite(set_in("collected.nvml.columns.gpu_util_pct.0", 100.5)),
     "gpu_util_pct: 100.5 is more than 100%"),
    ("available as text", rewrite(set_in("collected.status.columns.available.0", "yes")),
     "collected.status column 'available' row 0 should be true or false, not the text \"yes\""),
    ("unavailable without reason", rewrite(set_in("collected.status.columns.reason.2", "")),
     "collector \"nvtx\" is unavailable but gives no reason"),
    ("collector twice", rewrite(set_in("collected.status.columns.name.1", "cupti")), "\"cupti\" is there twice"),
    ("negative overhead", rewrite(set_in("collected.status.columns.overhead_ns.0", -3)), "overhead_ns: -3"),
    ("simulated timeline", rewrite(set_in("timeline.source", "simulated")),
     "collected holds collector records, but the timeline is simulated"),
]


@pytest.mark.parametrize("make, expected", [b[1:] for b in BAD_COLLECTED], ids=[b[0] for b in BAD_COLLECTED])
def test_bad_collector_tables_are_one_session_error(recorded: Session, tmp_path: Path,
                                                    make: Callable[[bytes], bytes], expected: str) -> None:
    test_a_bad_file_is_one_session_error_naming_the_file_and_the_problem(recorded, tmp_path, make, expected)


def test_a_long_run_of_records_stays_small_on_disk(recorded: Session) -> None:
    """The 50 MB budget of a 20-iteration VGG-19 session with every collector on: a million
    unified-memory rows (thin()'s default cap) must compress to well under it."""
    tl, n = recorded.timeline, 200_000
    rng = np.random.default_rng(3)
    start = np.sort(rng.integers(0, int(tl.op_end_ns.max()), n))
    its = np.searchsorted(np.sort(tl.iteration_ns().cumsum()), start, "right").clip(0, tl.iterations - 1)
    base = recorded.collected
    assert base is not None
    c = dataclasses.replace(base, um_iteration=its, um_start_ns=start,
                            um_end_ns=start + rng.integers(500, 3000, n), um_kind=rng.integers(0, 3, n),
                            um_value=rng.choice([4096, 65536, 2 << 20], n), um_records=np.ones(n, np.int64))
    size = len(session_to_bytes(dataclasses.replace(recorded, collected=c)))
    assert size / n < 25, f"{size / n:.1f} bytes per record"  # 1M rows: under 25 MB


# --- what vmexplorer writes, it reads -------------------------------------------------------------

@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # one folder, a fresh file per example
@given(data=st.data())
def test_every_session_simulate_writes_loads_back_equal(tmp_path: Path, data: st.DataObject,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    model = data.draw(st.sampled_from(["alexnet", "resnet18", "vgg11"]))
    policy = data.draw(st.sampled_from(list(POLICIES)))
    capacity = data.draw(st.integers(1, 150).map(lambda p: f"{p}%") | st.sampled_from(
        ["1e19", "9223372036854775807", "1PiB", "2PiB", "3GiB", "1e400", "0.5GiB", "1"]))
    argv = ["simulate", "--model", model, "--batch", str(data.draw(st.integers(1, 16))), "--capacity", capacity,
            "--policy", policy, "--note", data.draw(st.text(max_size=30))]
    if policy == "autovm":
        argv += ["--prefetch-distance", str(data.draw(st.integers(1, 12))),
                 "--offload", data.draw(st.sampled_from(["needed", "all"])),
                 "--tensors", data.draw(st.sampled_from(["activations", "all"]))]
    out = tmp_path / "written.vms"
    out.unlink(missing_ok=True)
    status = main([*argv, "--out", str(out)])
    capsys.readouterr()
    assert status in (0, 2), (argv, status)
    if status == 2:  # refused up front: nothing written
        assert not out.exists(), argv
        return
    written = out.read_bytes()
    assert session_to_bytes(load_session(out)) == written, argv


# --- memory: bounded by what a file can make ------------------------------------------------------

# Runs argv[1:] and prints its peak RSS (KiB) and exit status: started from this small process, the
# child's ru_maxrss counts nothing of the test process's memory at the fork.
_PEAK = """
import json, os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read().decode(errors="replace")
_, status, usage = os.wait4(p.pid, 0)
print(json.dumps({"rss_kib": usage.ru_maxrss, "status": os.waitstatus_to_exitcode(status), "stderr": err}))
"""
_UPLOAD = """
import sys
from pathlib import Path
from vmexplorer.ui.page import Page
view = Page()
view.files.upload.on_file(Path(sys.argv[1]).read_bytes(), Path(sys.argv[1]).name)
sys.exit(2 if view.state.message else 0)
"""
_HEAD = b'{"format":"vmexplorer-session","schema_version":6,"created":"2026-01-01T00:00:00Z","x":['


def _hostile(path: Path, unit: bytes, count: int, head: bytes = _HEAD, tail: bytes = b"0]}") -> Path:
    with gzip.open(path, "wb") as f:  # written in pieces: the test process stays small
        f.write(head)
        for _ in range(count // 100_000):
            f.write(unit * 100_000)
        f.write(unit * (count % 100_000) + tail)
    return path


HOSTILE = [  # the worst each kind of JSON value can do within the loader's limits, and the bomb
    ("the issue's 194 KB bomb, 200 MB of {},", b"{},", 66_666_666),
    ("four million strings of two emoji (4 bytes a character in Python)", '"\U0001F600\U0001F600",'.encode(),
     session_module.MAX_VALUES - 100),
    ("four million floats", b"0.5,", session_module.MAX_VALUES - 100),
]


@pytest.mark.parametrize("unit, count", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_any_file_is_refused_by_vmexplorer_info_within_1_gb(tmp_path: Path, unit: bytes, count: int) -> None:
    path = _hostile(tmp_path / "hostile.vms", unit, count)
    done = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-m", "vmexplorer", "info", str(path)],
                          capture_output=True, text=True, check=True)
    r = json.loads(done.stdout)
    assert r["status"] == 2 and r["stderr"].startswith("vmexplorer: error: ") and r["stderr"].count("\n") == 1, r
    assert r["rss_kib"] < 2**20, f"{r['rss_kib'] / 1024:.0f} MB"


def test_the_worst_file_uploaded_to_the_app_is_refused_within_1_gb(tmp_path: Path) -> None:
    _, unit, count = HOSTILE[1]
    path = _hostile(tmp_path / "hostile.vms", unit, count)
    done = subprocess.run([sys.executable, "-c", _PEAK, sys.executable, "-c", _UPLOAD, str(path)],
                          capture_output=True, text=True, check=True)
    r = json.loads(done.stdout)
    assert r["status"] == 2, r
    assert r["rss_kib"] < 2**20, f"{r['rss_kib'] / 1024:.0f} MB"


def test_a_session_holds_at_most_max_iterations_and_a_run_asks_for_no_more(
        session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vmexplorer.session import format as schema
    from vmexplorer.session.files import iterations_that_fit

    save_session(session, tmp_path / "s.vms")
    monkeypatch.setattr(schema, "MAX_ITERATIONS", session.timeline.iterations - 1)
    with pytest.raises(SessionError, match=f"records {session.timeline.iterations} iterations; a session holds "
                                           f"at most {session.timeline.iterations - 1}"):
        load_session(tmp_path / "s.vms")
    assert iterations_that_fit(session.graph, session.plan) == session.timeline.iterations - 1


def test_workspaces_inside_the_capacity_are_kept_through_a_file() -> None:
    graph = build_graph("resnet18", 8, 64)
    for policy, mechanism in (("device", "uvm"), ("belady", "swap")):
        capacity = graph.footprint if policy == "device" else int(graph.footprint * 0.6)
        plan = compile_plan(graph, capacity, policy, mechanism=mechanism)
        s = new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)
        assert s.graph.workspaces and s.graph.capacity == plan.planned_with  # fitted to the room it was made in
        doc = json.loads(gzip.decompress(session_to_bytes(s)))
        assert doc["config"]["workspaces"] is True and "workspace" in doc["graph"]["tensors"]["columns"]["kind"]
        back = session_from_bytes(session_to_bytes(s))
        assert back.graph == s.graph and back.plan == plan and back.plan.config.workspaces


def test_a_file_whose_graph_is_not_its_workspaces_is_refused(session: Session) -> None:
    doc = json.loads(gzip.decompress(session_to_bytes(session)))
    doc["config"]["workspaces"] = True  # a graph without workspace tensors, said to have them
    with pytest.raises(SessionError, match="graph.tensors has"):
        session_from_bytes(gzip.compress(json.dumps(doc).encode()))
