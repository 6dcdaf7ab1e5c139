"""A link holds a plan's edits as text: what `format_edits` writes `parse_edits` reads back, and
anything else typed into a URL is refused with one clear PlanError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmexplorer.graph import build_graph
from vmexplorer.plan import Move, PlanError
from vmexplorer.plan.moves import MAX_EDITS_CHARS, format_edits, parse_edits
from vmexplorer.policies import compile_plan

GRAPH = build_graph("vgg19", 64)
BEFORE = list(compile_plan(GRAPH, GRAPH.footprint // 2, "autovm").moves)


def test_no_edits_is_the_empty_text_and_gives_back_the_plan() -> None:
    assert format_edits(BEFORE, BEFORE) == ""
    assert parse_edits(GRAPH, BEFORE, "") == (BEFORE, [])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_drag_and_a_removal_survive_the_round_trip(data: st.DataObject) -> None:
    moves = list(BEFORE)
    k = data.draw(st.integers(0, len(moves) - 1))
    mv = moves[k]
    if mv.prefetch_after is not None and mv.prefetch_after - 1 > mv.offload_after:
        moves[k] = Move(mv.tensor, mv.offload_after, data.draw(st.integers(mv.offload_after + 1, mv.prefetch_after)))
    if data.draw(st.booleans()):
        moves.pop(data.draw(st.integers(0, len(moves) - 1)))
    text = format_edits(BEFORE, moves)
    assert set(text) <= set("0123456789:.~,-")
    assert sorted(parse_edits(GRAPH, BEFORE, text)[0], key=repr) == sorted(moves, key=repr)


def test_a_tensor_with_no_trip_left_is_written_with_nothing_after_its_colon() -> None:
    text = format_edits(BEFORE, BEFORE[1:])
    assert text == f"{BEFORE[0].tensor}:"
    assert BEFORE[0] not in parse_edits(GRAPH, BEFORE, text)[0]


@pytest.mark.parametrize("text, says", [
    ("<script>", "is not tensor:offload.prefetch"),
    ("1:2", "is not tensor:offload.prefetch"),
    ("99999:1.2", "names tensor 99999"),
    ("3:1.2,3:4.5", "twice"),
    ("0:" + "9" * 12 + ".1", "is not tensor:offload.prefetch"),
    ("1," * (MAX_EDITS_CHARS // 2 + 1), "at most"),
])
def test_text_that_is_not_edits_is_refused_with_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(PlanError, match=says):
        parse_edits(GRAPH, BEFORE, text)


def test_edits_the_graph_refuses_are_refused_as_moves_are() -> None:
    mv = next(mv for mv in BEFORE if mv.prefetch_after is not None)
    with pytest.raises(PlanError):
        parse_edits(GRAPH, BEFORE, f"{mv.tensor}:{len(GRAPH.ops) + 5}.{mv.prefetch_after}")
