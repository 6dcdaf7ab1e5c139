"""A tensor's choice (keep / move / recompute) in the app, as a specification: each switch re-plans the shown
plan as `manual` and re-simulates it, as a drag does; recomputes travel beside the moves wherever a person's
plan goes (drags, links, session files), so the ops the timeline numbers stay put."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vmexplorer.graph import Phase
from vmexplorer.graph.recompute import RERUN
from vmexplorer.plan import Move
from vmexplorer.plan.validate import validate_plan
from vmexplorer.session import session_from_bytes, session_to_bytes
from vmexplorer.ui import edits, link
from vmexplorer.ui.editor import Editor
from vmexplorer.ui.state import AppState


def _shown(policy: str, **options: str) -> AppState:
    s = AppState()
    assert s.simulate_config("resnet18", 32, "50%", policy, options), s.message
    return s


def _offered(s: AppState, choice: str, now: str = "keep") -> int:
    """The largest tensor the shown plan gives `now` that could be switched to `choice`."""
    g, offered = s.session.graph, edits.offered(s.session.graph)
    found = [t for t in range(len(g.tensors)) if choice in offered.get(g.tensors[t].name, ())
             and edits.choice_of(s.moves, s.recomputes, t) == now]
    return max(found, key=lambda t: g.tensors[t].nbytes)


def _reruns(s: AppState) -> list[str]:
    return [op.name for op in s.session.graph.ops if op.phase is Phase.RECOMPUTE]


def test_switching_a_tensor_to_recompute_replans_manual_with_its_step_and_the_timeline_runs_it_again() -> None:
    s = _shown("autovm")
    t = _offered(s, "recompute")
    g = s.session.graph
    name, producer = g.tensors[t].name, g.ops[g.tensors[t].producer].name
    first_backward = min(k for k in g.uses[t] if g.ops[k].phase is Phase.BACKWARD)
    assert s.choose(t, "recompute"), s.message
    assert s.session.plan.policy == "manual" and s.origin.endswith("(edited)")
    assert [(step.tensor, step.before) for step in s.recomputes] == [(t, first_backward)]
    assert s.session.plan.recomputes == tuple(s.recomputes)
    assert _reruns(s) == [producer + RERUN]
    ran = [s.session.graph.ops[k].name for k in s.session.timeline.op_index.tolist()]
    assert producer + RERUN in ran  # the simulated timeline runs the re-run
    assert s.status == f"{name} is recomputed before {g.ops[first_backward].name}"
    assert not any(mv.tensor == t for mv in s.moves)
    validate_plan(s.session.graph, s.session.plan)


def test_switching_a_recomputed_tensor_back_to_keep_removes_its_step_and_its_re_run() -> None:
    s = _shown("autovm")
    t = _offered(s, "recompute")
    assert s.choose(t, "recompute") and _reruns(s)
    assert s.choose(t, "keep"), s.message
    assert s.recomputes == [] and _reruns(s) == [] and s.session.plan.recomputes == ()
    assert not any(mv.tensor == t for mv in s.moves)


def test_switching_a_kept_tensor_to_move_gives_it_a_trip_over_its_gap_and_keep_takes_it_away() -> None:
    s = _shown("checkpoint")  # the driver pages what is left: no planned trips
    t = _offered(s, "move")
    assert s.choose(t, "move"), s.message
    (trip,) = [mv for mv in s.moves if mv.tensor == t]
    g = s.session.graph
    assert trip.offload_after in g.uses[t] and trip.prefetch_after is not None
    assert trip.offload_after < trip.prefetch_after < min(u for u in g.uses[t] if u > trip.offload_after)
    assert len(s.recomputes) == len(s.loaded.plan.recomputes) > 0, "the plan's recomputes stay"
    assert s.choose(t, "keep") and not any(mv.tensor == t for mv in s.moves)


def test_a_choice_a_tensor_does_not_have_is_refused_saying_why_and_the_plan_stays() -> None:
    s = _shown("autovm")
    g = s.session.graph
    weight = next(t for t, x in enumerate(g.tensors) if x.kind.value == "weight")
    before = (s.session, list(s.moves), list(s.recomputes))
    assert not s.choose(weight, "recompute")
    assert "cannot be recomputed: only an activation a forward op makes" in s.message
    assert not s.choose(weight, "discard") and "keep, move, recompute" in s.message
    assert (s.session, s.moves, s.recomputes) == before


def test_dragging_a_marker_on_a_checkpoint_plan_keeps_its_recomputes_and_its_op_numbers() -> None:
    s = _shown("checkpoint", then="belady")
    steps, ops = list(s.recomputes), [op.name for op in s.session.graph.ops]
    mv = next(mv for mv in s.moves if mv.prefetch_after is not None and mv.prefetch_after > mv.offload_after + 1)
    assert s.drag("prefetch", mv.tensor, mv.prefetch_after - 1, mv.prefetch_after), s.message
    assert s.session.plan.policy == "manual" and sorted(s.recomputes, key=repr) == sorted(steps, key=repr)
    assert [op.name for op in s.session.graph.ops] == ops
    assert any(m.tensor == mv.tensor and m.prefetch_after == mv.prefetch_after - 1 for m in s.moves)


def test_the_other_trips_stay_at_their_ops_when_a_re_run_comes_in_between() -> None:
    s = _shown("autovm")
    g = s.session.graph
    t = _offered(s, "recompute")
    was = {(g.tensors[mv.tensor].name, g.ops[mv.offload_after].name if mv.offload_after >= 0 else "",
            g.ops[mv.prefetch_after].name if mv.prefetch_after is not None and mv.prefetch_after >= 0 else "")
           for mv in s.moves if mv.tensor != t}
    assert s.choose(t, "recompute"), s.message
    h = s.session.graph
    now = {(h.tensors[mv.tensor].name, h.ops[mv.offload_after].name if mv.offload_after >= 0 else "",
            h.ops[mv.prefetch_after].name if mv.prefetch_after is not None and mv.prefetch_after >= 0 else "")
           for mv in s.moves}
    kept = now & was
    assert kept and (now - was) == set(), "a trip is the same trip, numbered among the re-runs"
    assert len(was - now) == 0 or "no longer fit" in s.status


def test_a_manual_plan_with_recomputes_saves_and_loads_and_its_moves_stay_numbered_among_the_re_runs() -> None:
    s = _shown("checkpoint", then="belady")
    assert s.choose(_offered(s, "recompute"), "recompute"), s.message
    loaded = session_from_bytes(session_to_bytes(s.session), "the edit")
    assert loaded.plan.recomputes == s.session.plan.recomputes and loaded.plan.moves == s.session.plan.moves
    again = AppState()
    assert again.load(session_to_bytes(s.session), "edit.vmx"), again.message
    assert again.recomputes == s.recomputes and again.moves == list(s.session.plan.moves)


def test_a_link_holds_the_switched_choices_and_opens_them_again() -> None:
    s = _shown("autovm")
    t = _offered(s, "recompute")
    assert s.choose(t, "recompute"), s.message
    assert s.choose(_offered(s, "move"), "move"), s.message
    fields = link.fields_of(s)
    assert f"r{t}:" in fields["edits"]
    again = AppState()
    link.apply(again, fields)
    assert again.message == "" and again.recomputes == s.recomputes and sorted(again.moves, key=repr) == sorted(
        s.moves, key=repr)
    assert again.session.timeline.iteration_ns().max() == s.session.timeline.iteration_ns().max()


@pytest.mark.parametrize("edit, says", [
    ("r99999:3", "names tensor 99999"),
    ("r0:5", "cannot be recomputed"),
    ("r{t}:99999", "is not an op of the graph without re-runs"),
    ("r{t}:x", "is not tensor:offload.prefetch (a round trip) or rtensor:op (a recompute)"),
    ("r{t}:{before},r{t}:{before}", "recompute twice"),
])
def test_a_bad_recompute_in_a_link_is_one_clear_message_and_the_plan_stays(edit: str, says: str) -> None:
    s = _shown("autovm")
    t = _offered(s, "recompute")
    before = min(k for k in s.session.graph.uses[t] if s.session.graph.ops[k].phase is Phase.BACKWARD)
    shown = s.session
    assert not s.apply_edits(edit.format(t=t, before=before))
    assert s.message.startswith("the link's edits cannot be applied: ") and says in s.message
    assert "\n" not in s.message and s.session is shown


def test_the_tensor_table_shows_each_choice_and_an_edited_cell_replans_as_a_click_does() -> None:
    s = _shown("autovm")
    editor = Editor(state=s)
    editor.draw()
    frame = editor.tensors.value
    assert {"choice", "choices"} <= set(frame.columns)
    assert set(frame["choice"]) <= set(edits.CHOICES) and "move" in set(frame["choice"])
    row = next(i for i in range(len(frame)) if frame["choice"].iloc[i] == "keep"
               and "recompute" in frame["choices"].iloc[i])
    t = int(frame["id"].iloc[row])
    for callback in editor.tensors._on_edit_callbacks:  # what Tabulator calls when a cell is edited
        callback(SimpleNamespace(column="choice", row=row, value="recompute", old="keep"))
    assert [step.tensor for step in s.recomputes] == [t]
    frame = editor.tensors.value
    assert frame.loc[frame["id"] == t, "choice"].tolist() == ["recompute"]


def test_a_refused_choice_in_the_table_goes_back_to_what_the_plan_does() -> None:
    s = _shown("autovm")
    editor = Editor(state=s)
    editor.draw()
    frame = editor.tensors.value
    row = next(i for i in range(len(frame)) if "recompute" not in frame["choices"].iloc[i])
    was = frame["choice"].iloc[row]
    editor.tensors.value.loc[row, "choice"] = "recompute"  # Tabulator has written the cell already
    for callback in editor.tensors._on_edit_callbacks:
        callback(SimpleNamespace(column="choice", row=row, value="recompute", old=was))
    assert "cannot be recomputed" in s.message
    assert editor.tensors.value["choice"].iloc[row] == was


def test_moves_keep_their_tensor_when_renumbered_between_graphs_of_one_model() -> None:
    s = _shown("checkpoint", then="belady")
    g = s.session.graph
    plain = (g.full or g).plain
    kept, dropped = edits.renumbered(g, plain, [Move(t, o, p) for t, o, p in
                                                [(mv.tensor, mv.offload_after, mv.prefetch_after) for mv in s.moves]])
    assert {g.tensors[mv.tensor].name for mv in s.moves} >= {plain.tensors[mv.tensor].name for mv in kept}
    assert len(kept) + len(dropped) == len(s.moves)
