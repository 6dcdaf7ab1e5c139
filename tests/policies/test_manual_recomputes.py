"""A person's plan holds recomputes beside its moves: the `manual` policy runs the steps it is given (numbered in
the graph without re-runs) and plans the moves on the graph holding their re-runs (numbered there, as the
timeline shows them), so any recomputing plan can be written out and replayed as a manual one; a step the
graph cannot run is one clear PlanError, from a file, a link or a call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmexplorer.cli import main
from vmexplorer.graph import Phase, Recompute, build_graph
from vmexplorer.plan import PlanError
from vmexplorer.plan.moves import load_moves, parse_moves
from vmexplorer.policies import compile_plan

GRAPH = build_graph("resnet18", 8, 64)
CAPACITY = GRAPH.footprint // 2
CHECKPOINT = compile_plan(GRAPH, CAPACITY, "checkpoint", {"then": "belady"})
ACTIVATION = next(t for t, x in enumerate(GRAPH.tensors) if x.kind.value == "activation"
                  and any(GRAPH.ops[k].phase is Phase.BACKWARD for k in GRAPH.uses[t]))
FIRST_BACKWARD = min(k for k in GRAPH.uses[ACTIVATION] if GRAPH.ops[k].phase is Phase.BACKWARD)


def test_a_manual_plan_of_a_checkpoint_plans_moves_and_recomputes_is_that_plan() -> None:
    assert CHECKPOINT.recomputes and CHECKPOINT.moves
    manual = compile_plan(GRAPH, CAPACITY, "manual", moves=CHECKPOINT.moves, recomputes=CHECKPOINT.recomputes)
    assert set(manual.recomputes) == set(CHECKPOINT.recomputes)
    assert manual.moves == CHECKPOINT.moves and manual.memops == CHECKPOINT.memops


def test_a_manual_plans_recomputes_are_in_one_order_whatever_order_they_came_in() -> None:
    steps = list(CHECKPOINT.recomputes)
    one = compile_plan(GRAPH, CAPACITY, "manual", recomputes=steps)
    other = compile_plan(GRAPH, CAPACITY, "manual", recomputes=steps[::-1])
    assert one == other and set(one.recomputes) == set(steps)


def test_recomputes_are_a_manual_plan_that_another_policy_refuses() -> None:
    with pytest.raises(PlanError, match="recomputes are a manual plan; the autovm policy makes its own"):
        compile_plan(GRAPH, CAPACITY, "autovm", recomputes=[Recompute(ACTIVATION, FIRST_BACKWARD)])


@pytest.mark.parametrize("step, says", [
    (Recompute(10**6, 3), "names tensor 1000000, but the graph has"),
    (Recompute(0, 3), "cannot be recomputed"),  # the input image
    (Recompute(ACTIVATION, 10**6), "is not an op of the graph without re-runs"),
    (Recompute(ACTIVATION, 0), "which is not after its producer"),
    (Recompute(ACTIVATION, True), "its tensor and op are integers"),
])
def test_a_recompute_the_graph_cannot_run_is_one_plan_error(step: Recompute, says: str) -> None:
    with pytest.raises(PlanError, match=says) as e:
        compile_plan(GRAPH, CAPACITY, "manual", recomputes=[step])
    assert "\n" not in str(e.value)


def test_a_moves_file_holds_recomputes_by_name_and_its_moves_among_the_re_runs() -> None:
    tensor, before = GRAPH.tensors[ACTIVATION].name, GRAPH.ops[FIRST_BACKWARD].name
    moves, steps = load_moves(GRAPH, {"moves": [], "recomputes": [{"tensor": tensor, "before": before}]})
    assert (moves, steps) == ([], [Recompute(ACTIVATION, FIRST_BACKWARD)])


@pytest.mark.parametrize("recomputes, says", [
    ({"tensor": 1}, '"recomputes" is a list'),
    ([{"tensor": 1}], "recompute 0 needs 'tensor' and 'before'"),
    ([{"tensor": "nope", "before": 3}], "recompute 0: no tensor named 'nope'"),
    ([{"tensor": 5, "before": "nope"}], "recompute 0: no op named 'nope' \\(before\\)"),
    ([{"tensor": [1], "before": 3}], "recompute 0: tensor must be a tensor's name or index"),
    ([{"tensor": 0, "before": 3}], "cannot be recomputed"),
])
def test_a_bad_recompute_in_a_moves_file_is_one_plan_error(recomputes: object, says: str) -> None:
    raw = json.dumps({"moves": [], "recomputes": recomputes}).encode()
    with pytest.raises(PlanError, match=says) as e:
        parse_moves(GRAPH, raw)
    assert "\n" not in str(e.value)


def test_a_checkpoint_plan_written_by_the_cli_replays_through_the_manual_policy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--model", "resnet18", "--batch", "8", "--image-size", "64", "--capacity", "50%"]
    assert main([*args, "--policy", "checkpoint", "--then", "belady", "--format", "json"]) == 0
    checkpoint = json.loads(capsys.readouterr().out)["plan"]
    assert checkpoint["recomputes"] and checkpoint["moves"]
    path = tmp_path / "moves.json"
    path.write_text(json.dumps({"moves": checkpoint["moves"], "recomputes": checkpoint["recomputes"]}))
    assert main([*args, "--policy", "manual", "--moves", str(path), "--format", "json"]) == 0
    manual = json.loads(capsys.readouterr().out)["plan"]
    assert manual["moves"] == checkpoint["moves"] and manual["memops"] == checkpoint["memops"]
    assert sorted(manual["recomputes"], key=repr) == sorted(checkpoint["recomputes"], key=repr)
