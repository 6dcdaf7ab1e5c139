"""The Finder panel: a search box and a kind filter over tables of ops and tensors; a clicked row shows its
details and zooms the timeline in to it; a tap on the timeline shows what was tapped."""

from __future__ import annotations

import pytest

from vmexplorer.details import op_span_ms, tensor_span_ms, zoom_window
from vmexplorer.ui.finder import Finder
from vmexplorer.ui.state import AppState


@pytest.fixture
def state() -> AppState:
    s = AppState()
    assert s.open_sample("vgg19-b64-uvm-50pct.measured.vms"), s.message
    return s


def _row(table: object, column: str, value: object) -> int:
    return [i for i, v in enumerate(table.value[column]) if v == value][0]  # type: ignore[attr-defined]


def zooms(state: AppState) -> tuple[Finder, list[tuple[float, float]]]:
    asked: list[tuple[float, float]] = []
    return Finder(state=state, zoom=asked.append), asked


def test_the_tables_start_with_every_op_and_every_tensor(state: AppState) -> None:
    finder = Finder(state=state)
    g = state.session.graph
    assert list(finder.ops.value["op"]) == [op.name for op in g.ops]
    assert len(finder.tensors.value) == len(g.tensors)
    assert finder.count.object == f"{len(g.ops)} of {len(g.ops)} ops, {len(g.tensors)} of {len(g.tensors)} tensors"


def test_typing_a_name_in_any_case_filters_both_tables(state: AppState) -> None:
    finder = Finder(state=state)
    finder.search.value_input = "Classifier.3"
    assert list(finder.ops.value["op"]) == ["classifier.3", "classifier.3.backward", "classifier.3.sgd"]
    tensors = finder.tensors.value
    assert "classifier.3.weight" in list(tensors["tensor"])
    assert all("classifier.3" in n or layer == "classifier.3" for n, layer in zip(tensors["tensor"], tensors["layer"]))
    finder.search.value_input = ""
    assert len(finder.ops.value) == len(state.session.graph.ops)


def test_a_kind_filters_the_table_it_belongs_to_and_leaves_the_other(state: AppState) -> None:
    finder = Finder(state=state)
    finder.kind.value = "weight"
    assert set(finder.tensors.value["kind"]) == {"weight"}
    assert len(finder.ops.value) == len(state.session.graph.ops)
    finder.kind.value = "backward"
    assert set(finder.ops.value["phase"]) == {"backward"}
    assert "tensor: optimizer_state" in finder.kind.options and "op: conv2d" in finder.kind.options


def test_clicking_an_op_row_zooms_to_it_and_shows_its_details(state: AppState) -> None:
    finder, asked = zooms(state)
    finder.search.value_input = "features.10"
    finder.ops.selection = [_row(finder.ops, "op", "features.10.backward")]
    op = next(i for i, o in enumerate(state.session.graph.ops) if o.name == "features.10.backward")
    it = state.shown_iteration()
    assert finder.selected == ("op", op)
    assert asked == [pytest.approx(zoom_window(op_span_ms(state.session, op, it)))]
    start, end = op_span_ms(state.session, op, it)
    assert asked[0][0] <= start < end <= asked[0][1] and asked[0][1] - asked[0][0] <= 5 * max(end - start, 0.05)
    assert "features.10.backward (op" in finder.details.object and "NVTX range" in finder.details.object


def test_clicking_a_tensor_row_zooms_to_its_uses_lights_it_up_and_forgets_the_op(state: AppState) -> None:
    finder, asked = zooms(state)
    finder.ops.selection = [0]
    finder.tensors.selection = [_row(finder.tensors, "tensor", "features.1.out")]
    t = state.session.graph.tensor_id("features.1.out")
    assert (finder.selected, finder.ops.selection, state.picked) == (("tensor", t), [], t)
    assert asked[-1] == pytest.approx(zoom_window(tensor_span_ms(state.session, t, state.shown_iteration())))
    assert finder.details.object.startswith("tensor")


def test_the_same_row_clicked_again_asks_for_the_zoom_again(state: AppState) -> None:
    finder, asked = zooms(state)
    finder.ops.selection = [3]
    finder.ops.selection = []  # a click on a selected row deselects it
    finder.ops.selection = [3]
    assert len(asked) == 2 and asked[0] == asked[1]


def test_a_tap_on_the_timeline_shows_that_op_or_transfer_and_highlights_its_row(state: AppState) -> None:
    finder = Finder(state=state)
    finder.show_picked(("op", 5))
    assert finder.ops.selection == [5] and state.session.graph.ops[5].name in finder.details.object
    fault = next(r for r, i in enumerate(state.session.timeline.memop_index)
                 if state.session.plan.memops[int(i)].mode.value == "fault")
    finder.show_picked(("memop", fault))
    assert finder.ops.selection == []
    assert "demand fault" in finder.details.object and "to the GPU" in finder.details.object
    finder.show_picked(("memop", 10**9))
    assert "not found" in finder.details.object


def test_another_model_rebuilds_the_rows_and_forgets_the_selection(state: AppState) -> None:
    finder = Finder(state=state)
    finder.search.value_input = "layer3"
    finder.show_picked(("op", 3))
    assert len(finder.ops.value) == 0  # vgg19 has no layer3
    assert state.open_sample("resnet50-b64-uvm-50pct.measured.vms"), state.message
    finder.draw()
    names = list(finder.ops.value["op"])
    assert names and all("layer3" in n for n in names)
    assert finder.selected is None and finder.details.object == ""


def test_the_same_model_in_another_session_keeps_the_op_shown_with_that_sessions_figures(state: AppState) -> None:
    finder = Finder(state=state)
    finder.show_picked(("op", 40))
    before = finder.details.object
    assert state.open_sample("vgg19-b64-uvm-90pct.measured.vms"), state.message
    finder.draw()
    assert finder.selected == ("op", 40) and finder.ops.selection == [40]
    assert state.session.graph.ops[40].name in finder.details.object and finder.details.object != before
