"""A session whose plan recomputes activations (schema 14's `plan.recomputes`) keeps them through a file: the
steps are stored numbered in the graph without recomputation, the graph and the timeline are those of the
graph the plan runs (`Plan.graph_of`), older files load with none, and steps that are malformed or cannot run
are one clear SessionError."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vmexplorer.graph import Graph, Kind, Phase, build_graph
from vmexplorer.graph.recompute import Recompute, recomputed
from vmexplorer.policies import compile_plan
from vmexplorer.records import Timeline
from vmexplorer.session import Session, SessionError, load_session, new_session, save_session, session_from_bytes
from vmexplorer.session.files import session_to_bytes
from vmexplorer.session.session import SCHEMA_VERSION
from vmexplorer.simulator import H100_DEFAULT, simulate

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu1")  # a convolution, its batch norm and its ReLU


def _kept_for_backward(g: Graph, layers: tuple[str, ...]) -> list[Recompute]:
    """Every activation the forward ops of `layers` write that backward reads, made again before its first
    backward use: checkpointing those layers (as tests/graph/test_recompute.py does)."""
    return [Recompute(t, next(k for k in g.uses[t] if g.ops[k].phase is Phase.BACKWARD))
            for t, tensor in enumerate(g.tensors)
            if tensor.kind is Kind.ACTIVATION and not tensor.persistent
            and g.ops[tensor.producer].phase is Phase.FORWARD and g.ops[tensor.producer].layer in layers
            and any(g.ops[k].phase is Phase.BACKWARD for k in g.uses[t])]


def _simulated(policy: str) -> Session:
    g = build_graph("resnet18", 8, 64)
    steps = _kept_for_backward(g, LAYERS)
    room = (g.least_workspaces().min_capacity[0] + g.footprint) // 2  # between the least and all
    plan = compile_plan(recomputed(g, steps), room, policy)
    plan = dataclasses.replace(plan, recomputes=tuple(steps))
    return new_session(g, plan, simulate(g, plan, H100_DEFAULT), H100_DEFAULT, notes=("checkpointed layer1.0",))


@pytest.fixture(scope="module")
def session() -> Session:
    return _simulated("belady")


def _doc(s: Session) -> dict[str, Any]:
    return json.loads(gzip.decompress(session_to_bytes(s)))


def _load(doc: dict[str, Any], name: str = "the file") -> Session:
    return session_from_bytes(gzip.compress(json.dumps(doc).encode()), name)


def _same_timeline(a: Timeline, b: Timeline) -> None:
    for f in dataclasses.fields(Timeline):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, f.name


@pytest.mark.parametrize("policy", ["belady", "autovm"])
def test_a_simulated_session_whose_plan_recomputes_round_trips_through_a_file(policy: str, tmp_path: Path) -> None:
    s = _simulated(policy)
    assert s.plan.recomputes and any(op.phase is Phase.RECOMPUTE for op in s.graph.ops)
    save_session(s, tmp_path / "s.vms")
    back = load_session(tmp_path / "s.vms")
    assert back.plan == s.plan and back.plan.recomputes == s.plan.recomputes
    assert back.graph == s.graph and len(back.graph.ops) == len(s.graph.ops)
    _same_timeline(s.timeline, back.timeline)
    assert back.summary == s.summary
    save_session(back, tmp_path / "again.vms")
    assert (tmp_path / "again.vms").read_bytes() == (tmp_path / "s.vms").read_bytes()


def test_the_file_holds_the_steps_numbered_without_recomputation_and_the_graph_the_plan_runs(
        session: Session) -> None:
    doc = _doc(session)
    steps = session.plan.recomputes
    assert doc["schema_version"] == SCHEMA_VERSION >= 14
    assert doc["plan"]["recomputes"] == {"rows": len(steps), "columns": {
        "tensor": [s.tensor for s in steps], "before_op": [s.before for s in steps]}}
    plain = build_graph("resnet18", 8, 64)
    # a producer runs once before an op for all its tensors made again there (a batch norm's two statistics)
    reruns = len({(plain.tensors[s.tensor].producer, s.before) for s in steps})
    assert reruns < len(steps)
    assert doc["graph"]["ops"]["rows"] == len(plain.ops) + reruns
    assert doc["graph"]["ops"]["columns"]["phase"].count("recompute") == reruns
    assert len(session.timeline.op_index) == doc["graph"]["ops"]["rows"]  # every op of the run graph, once


def _simulated_plain(session: Session) -> Session:
    """The same model and capacity, planned without recomputation."""
    g = build_graph("resnet18", 8, 64)
    plan = compile_plan(g, session.plan.capacity, "belady")
    return new_session(g, plan, simulate(g, plan, H100_DEFAULT), H100_DEFAULT)


def test_a_plan_without_recomputation_stores_an_empty_table_and_loads_with_none(session: Session) -> None:
    doc = _doc(_simulated_plain(session))
    assert doc["plan"]["recomputes"] == {"rows": 0, "columns": {"tensor": [], "before_op": []}}
    assert _load(doc).plan.recomputes == ()


def test_a_schema_13_file_loads_with_no_recomputation_and_may_not_name_any(session: Session) -> None:
    doc = _doc(_simulated_plain(session))
    del doc["plan"]["recomputes"], doc["graph"]["definition"]  # and schema 15's field
    doc["schema_version"] = 13
    old = _load(doc)
    assert old.plan.recomputes == () and not any(op.phase is Phase.RECOMPUTE for op in old.graph.ops)
    doc["plan"]["recomputes"] = {"rows": 0, "columns": {"tensor": [], "before_op": []}}
    with pytest.raises(SessionError, match='plan has an unexpected field "recomputes"'):
        _load(doc)


OLDER_FILES = [*sorted((Path(__file__).parent / "data").glob("*.vms")),
               ROOT / "sample_sessions" / "h200-alexnet-b256-autovm-swap-50pct.measured.vms"]


@pytest.mark.parametrize("path", OLDER_FILES, ids=lambda p: p.name)
def test_files_of_older_schemas_still_load_unchanged_with_no_recomputation(path: Path) -> None:
    assert json.loads(gzip.decompress(path.read_bytes()))["schema_version"] < 14
    s = load_session(path)
    assert s.plan.recomputes == () and not any(op.phase is Phase.RECOMPUTE for op in s.graph.ops)


def _set(column: str, row: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["plan"]["recomputes"]["columns"][column][row] = value
    return change


def _steps(change: Callable[[list[list[int]]], list[list[int]]]) -> Callable[[dict[str, Any]], None]:
    """The plan's steps, as [tensor, before_op] pairs, changed; the graph stored stays the one they made."""
    def rewrite(doc: dict[str, Any]) -> None:
        cols = doc["plan"]["recomputes"]["columns"]
        pairs = change([list(p) for p in zip(cols["tensor"], cols["before_op"])])
        doc["plan"]["recomputes"] = {"rows": len(pairs), "columns": {"tensor": [p[0] for p in pairs],
                                                                     "before_op": [p[1] for p in pairs]}}
    return rewrite


def _weight(doc: dict[str, Any]) -> int:
    return doc["graph"]["tensors"]["columns"]["name"].index("conv1.weight")


BAD_STEPS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("no recomputes in a schema 14 plan", lambda doc: doc["plan"].pop("recomputes"),
     "plan has no 'recomputes' field"),
    ("recomputes as a list of pairs", lambda doc: doc["plan"].update(recomputes=[[1, 2]]),
     "plan.recomputes should be an object, not a list"),
    ("a tensor as text", _set("tensor", 0, "layer1.0.conv1.out"),
     "plan.recomputes column 'tensor' row 0 should be a whole number, not the text \"layer1.0.conv1.out\""),
    ("a fractional op", _set("before_op", 0, 1.5),
     "plan.recomputes column 'before_op' row 0 should be a whole number, not the number 1.5"),
    ("an op as true", _set("before_op", 0, True), "plan.recomputes column 'before_op' row 0 should be a whole number"),
    ("a tensor past the end", _set("tensor", 0, 10**6),
     "plan.recomputes row 0, tensor: 1000000 is not a tensor id of the graph without recomputation; expected 0 to"),
    ("a negative op", _set("before_op", 0, -1),
     "plan.recomputes row 0, before_op: -1 is not an op id of the graph without recomputation; expected 0 to"),
    ("an op of the recomputed graph past the plain one", _set("before_op", 0, 178),
     "plan.recomputes row 0, before_op: 178 is not an op id of the graph without recomputation; expected 0 to 177"),
    ("a short column", lambda doc: doc["plan"]["recomputes"]["columns"]["tensor"].pop(),
     "plan.recomputes column 'tensor' has"),
    ("more steps than tensors", _steps(lambda pairs: pairs * 200), "more than the graph's 446 tensors; each is "
     "recomputed at most once"),
    ("a step twice", _steps(lambda pairs: pairs + pairs[:1]), "is recomputed twice; once serves every use after it"),
    ("a weight recomputed", lambda doc: _set("tensor", 0, _weight(doc))(doc),
     "plan.recomputes: conv1.weight is not an activation a forward op writes: it cannot be recomputed"),
    ("a step before its producer", _set("before_op", 0, 0), "which is not after its producer"),
    ("a graph without the plan's last step", _steps(lambda pairs: pairs[:-1]),
     "with the plan's 3 recomputations has"),
]


@pytest.mark.parametrize("change, expected", [b[1:] for b in BAD_STEPS], ids=[b[0] for b in BAD_STEPS])
def test_recompute_steps_that_are_malformed_or_cannot_run_are_one_clear_session_error(
        session: Session, change: Callable[[dict[str, Any]], None], expected: str) -> None:
    assert len(session.plan.recomputes) == 4, "the steps the messages above count"
    doc = _doc(session)
    change(doc)
    with pytest.raises(SessionError) as info:
        _load(doc, "bad.vms")
    message = str(info.value)
    assert message.startswith("bad.vms is not a valid session: ") and "\n" not in message
    assert expected in message


def test_a_session_whose_graph_is_not_the_one_its_plan_runs_is_refused_when_saving(session: Session) -> None:
    plain = build_graph("resnet18", 8, 64).fitted(session.plan.planned_with)
    with pytest.raises(SessionError, match=r"the graph's recomputations are not the plan's \(0 in the graph, 4 in "
                                           r"the plan\); use the graph the plan runs"):
        session_to_bytes(dataclasses.replace(session, graph=plain))
