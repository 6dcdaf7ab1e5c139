"""The page built without a server: what a person's clicks, drags and taps do, drawn through the figures the
page built once; a failure shown, with the page as it was."""

from __future__ import annotations

import dataclasses
from typing import Any

import panel as pn
import pytest
from bokeh.models import Plot
from ui_helpers import UVM_TWIN, drag_first_marker

from vmexplorer.plots.timeline import timeline_source
from vmexplorer.session import load_session
from vmexplorer.session.samples import DEFAULT_SAMPLE, SAMPLES
from vmexplorer.ui.page import Page
from vmexplorer.ui.serving import served_template
from vmexplorer.ui.state import ALL_ITERATIONS, TABS


def test_the_page_builds_without_a_server_and_a_browser_drag_replans(page: Page) -> None:
    assert served_template() is not None
    assert page.gpu.run.disabled
    drag_first_marker(page.timeline.pane.object, "prefetch", 3)
    assert page.state.session.plan.policy == "manual" and page.state.message == ""
    page.configure.capacity.value = "nonsense"
    page.configure.simulate.clicks += 1
    assert page.alert.visible and "not a size" in page.alert.object


def test_every_session_goes_into_the_figures_built_once_and_the_measured_lanes_step_aside_for_a_simulation(
        page: Page) -> None:
    fig = page.timeline.pane.object
    models = {m.id for m in fig.references()}
    ops_before = list(timeline_source(fig, "ops").data["right"])
    assert any(child.visible for child in fig.children[3:]), "what the collectors recorded"
    drag_first_marker(fig, "prefetch", 3)
    assert page.timeline.pane.object is fig and {m.id for m in fig.references()} == models
    assert list(timeline_source(fig, "ops").data["right"]) != ops_before
    assert all(not child.visible for child in fig.children[3:]), "CUPTI's lanes are not the edit's simulation"
    assert page.state.open_sample("resnet50-b64-uvm-50pct.measured.vms"), page.state.message
    assert page.timeline.pane.object is fig and len(timeline_source(fig, "ops").data["left"]) == len(
        page.state.session.graph.ops)
    page.state.axis = "op"
    assert page.timeline.pane.object is fig and fig.children[0].xaxis[0].axis_label.startswith("op")


def test_an_edit_keeps_the_zoom_and_another_session_is_shown_whole(page: Page) -> None:
    x_range = page.timeline.pane.object.children[0].x_range
    whole = (x_range.start, x_range.end)
    x_range.update(start=100.0, end=200.0)  # a person zoomed in the browser
    drag_first_marker(page.timeline.pane.object, "prefetch", 3)
    assert (x_range.start, x_range.end) == (100.0, 200.0)
    assert page.state.open_sample(UVM_TWIN), page.state.message
    assert (x_range.start, x_range.end) != (100.0, 200.0) and x_range.start <= 0 < whole[1] <= x_range.end


def test_two_drags_in_a_row_both_take_effect_and_a_ghost_marks_where_each_marker_was(page: Page) -> None:
    fig = page.timeline.pane.object
    first, to_first = drag_first_marker(fig, "prefetch", 3)
    second, to_second = drag_first_marker(fig, "offload", -2)  # later: it may not go before its last use
    moves = {mv.tensor: mv for mv in page.state.moves}
    assert moves[first].prefetch_after == to_first and moves[second].offload_after == to_second
    ghosts = timeline_source(fig, "ghost_markers").data
    names = {page.state.session.graph.tensors[t].name for t in (first, second)}
    assert len(ghosts["x"]) >= 2 and all(any(n in w for w in ghosts["what"]) for n in names)
    page.editor.reset.clicks += 1
    assert len(timeline_source(fig, "ghost_markers").data["x"]) == 0


def test_after_a_drag_the_headline_says_the_edits_effect_against_the_same_schedule_unedited(page: Page) -> None:
    from vmexplorer.units import format_ns

    before = page.headline.text.object
    assert "measured" in before
    drag_first_marker(page.timeline.pane.object, "prefetch", 3)
    was = page.state.unedited().time_split().iteration_ns
    now = page.state.session.time_split().iteration_ns
    sign = "+" if now >= was else "-"
    text = page.headline.text.object
    assert f"{format_ns(now)} per iteration (simulated), {sign}{format_ns(abs(now - was))} against the same " \
           f"schedule unedited ({format_ns(was)}" in text


def test_selecting_a_tensor_lights_up_its_transfers_and_markers_and_fades_the_rest(page: Page) -> None:
    page.complete(pn.Column())
    frame = page.editor.tensors.value
    row = int(frame.index[frame["offloaded"]][0])
    tensor = int(frame["id"].iloc[row])
    page.editor.tensors.selection = [row]
    fig = page.timeline.pane.object
    for name in ("memops", "prefetch_markers", "offload_markers"):
        data = timeline_source(fig, name).data
        lit = {i for i, a in enumerate(data["alpha"]) if a > 0.5}
        assert lit == {i for i, t in enumerate(data["tensor_id"]) if int(t) == tensor} != set()
    page.state.picked = None
    assert min(timeline_source(fig, "memops").data["alpha"]) > 0.5


def test_a_row_picked_in_the_finder_zooms_the_timeline_in_to_it(page: Page) -> None:
    from vmexplorer.details import op_span_ms

    x_range = page.timeline.pane.object.children[0].x_range
    whole = x_range.end - x_range.start
    page.finder.search.value_input = "features.10"
    row = [i for i, name in enumerate(page.finder.ops.value["op"]) if name == "features.10.backward"][0]
    page.finder.ops.selection = [row]
    op = page.state.session.graph.ops.index(next(o for o in page.state.session.graph.ops
                                                 if o.name == "features.10.backward"))
    start, end = op_span_ms(page.state.session, op, page.state.shown_iteration())
    origin = 0.0
    assert x_range.start <= start + origin < end + origin <= x_range.end, "the op is in view"
    assert x_range.end - x_range.start < 0.2 * whole, "zoomed in, not out"


def test_tapping_an_op_or_a_transfer_in_the_timeline_shows_its_details_and_lights_up_its_tensor(page: Page) -> None:
    from bokeh.events import Tap

    from vmexplorer.plots import LANES

    fig = page.timeline.pane.object
    lanes = fig.children[0]
    ops = timeline_source(fig, "ops").data
    x = (ops["left"][5] + ops["right"][5]) / 2
    assert page.finder_card.collapsed and not page.finder_card.objects  # not built for the first screen
    page.timeline._on_tap(Tap(lanes, x=x, y=LANES["compute"] + 0.4))
    name = page.state.session.graph.ops[int(page.timeline.drawn.timeline.op_index[5])].name
    assert name in page.finder.details.object
    assert not page.finder_card.collapsed and page.finder_card.objects  # opened, to show them
    memops = timeline_source(fig, "memops").data
    row = next(i for i, k in enumerate(memops["kind"]) if k == "prefetch")
    x = (memops["left"][row] + memops["right"][row]) / 2
    page.timeline._on_tap(Tap(lanes, x=x, y=LANES["to device"] + 0.4))
    tensor = int(memops["tensor_id"][row])
    assert page.state.session.graph.tensors[tensor].name in page.finder.details.object
    lit = {i for i, a in enumerate(timeline_source(fig, "memops").data["alpha"]) if a > 0.5}
    assert row in lit and all(int(memops["tensor_id"][i]) == tensor for i in lit)
    page.timeline._on_tap(Tap(lanes, x=x, y=LANES["to device"] - 0.1))  # between the lanes: nothing changes
    assert {i for i, a in enumerate(timeline_source(fig, "memops").data["alpha"]) if a > 0.5} == lit


def test_the_timeline_opens_on_the_time_axis_and_the_op_axis_is_one_click_away(page: Page) -> None:
    assert page.timeline.x_axis.value == "time" and "op" in page.timeline.x_axis.options

    def label() -> str:
        return str(page.timeline.pane.object.children[0].xaxis[0].axis_label)

    assert label() == "time (ms)"
    page.timeline.x_axis.value = "op"
    assert page.state.axis == "op" and label().startswith("op")


def test_a_marker_dragged_on_the_time_axis_is_issued_after_the_op_boundary_it_is_dropped_on(page: Page) -> None:
    tensor, to = drag_first_marker(page.timeline.pane.object, "prefetch", 3)
    assert page.state.message == ""
    assert next(mv for mv in page.state.moves if mv.tensor == tensor).prefetch_after == to
    shown = page.state.session
    src = timeline_source(page.timeline.pane.object, "prefetch_markers")
    data = dict(src.data)
    data["x"] = [data["x"][0] + 1e-6, *list(data["x"])[1:]]  # nudged within its op: nothing to re-plan
    src.data = data
    assert page.state.session is shown


def test_a_marker_release_from_an_earlier_drawing_is_not_read_as_a_drag(page: Page) -> None:
    """The browser may send a release made on the markers it held before the server's redraw reached it:
    read against the new drawing it would move some other marker. It is told apart by where its markers
    were drawn (`x0`) and left alone."""
    src = timeline_source(page.timeline.pane.object, "prefetch_markers")
    stale = {k: list(v) for k, v in src.data.items()}
    tensor, to = drag_first_marker(page.timeline.pane.object, "prefetch", 3)
    assert next(mv for mv in page.state.moves if mv.tensor == tensor).prefetch_after == to
    moves, shown = list(page.state.moves), page.state.session
    assert list(src.data["x0"]) != stale["x0"], "the edit must move the drawn markers for this test"
    stale["x"] = [x + 5.0 for x in stale["x"]]  # every marker somewhere else: a drag, if it were current
    src.data = stale
    assert page.state.moves == moves and page.state.session is shown


def test_a_measured_session_is_drawn_one_iteration_at_a_time_the_typical_first_and_all_on_request(
        page: Page) -> None:
    s = page.state.session
    n, picker = s.timeline.iterations, page.timeline.iteration
    assert n > 1 and picker.visible
    assert list(picker.options.values()) == [ALL_ITERATIONS, *map(str, range(1, n + 1))]
    # the sample counted unified memory in its last iteration, after the timed ones: named in the list
    assert s.timeline.counted == 1 and list(picker.options)[-1] == f"{n} (UM counted)"
    assert picker.value == str(s.timeline.typical_iteration() + 1)
    fig = page.timeline.pane.object
    assert f"counted unified memory in iteration {n} only" in fig.children[3].text and fig.children[3].visible
    picker.value = str(n)  # the counted iteration says in its title that it ran slower
    assert page.state.iteration == str(n)
    titles = [p.title.text.text for p in fig.select({"type": Plot}) if p.title.text]
    assert any("(unified memory counted: slower than the timed ones)" in t for t in titles)
    assert fig.children[4].visible, "CUPTI's migrations of the counted iteration"
    assert len(timeline_source(fig, "ops").data["left"]) == len(s.graph.ops)  # one iteration's ops
    picker.value = ALL_ITERATIONS
    assert len(timeline_source(fig, "ops").data["left"]) == n * len(s.graph.ops)
    picker.value = "1"
    drag_first_marker(fig, "prefetch", 3)  # a drag in the shown iteration re-plans like any other
    assert page.state.session.plan.policy == "manual" and page.state.message == ""
    assert not picker.visible  # the simulated edit has one iteration


def test_the_iteration_picker_the_browser_holds_names_the_iteration_the_timeline_draws(page: Page) -> None:
    from bokeh.document import Document

    model = page.timeline.iteration.get_root(Document())  # what the browser is sent
    page.timeline.iteration.value = "2"
    assert model.value == "2"
    assert page.state.open_sample(UVM_TWIN), page.state.message
    s = page.state.session
    typical = str(s.timeline.typical_iteration() + 1)
    assert page.timeline.iteration.value == typical and model.value == typical
    assert f"iteration {typical} of {s.timeline.iterations}" in page.timeline.pane.object.children[0].title.text.text


def test_a_checkpoint_session_shows_its_re_runs_in_the_timeline_and_their_time_in_the_bars(page: Page) -> None:
    fig, bars = page.timeline.pane.object, page.bars.figure.select_one({"name": "breakdown"})
    assert page.state.simulate_config("resnet18", 16, "60%", "checkpoint", {"segments": 4}), page.state.message
    ops = timeline_source(fig, "ops").data
    assert page.timeline.pane.object is fig and "recompute" in set(ops["phase"])
    split = page.state.session.time_split()
    assert bars.data["label"][0] == "this session (checkpoint), simulated"
    assert bars.data["recompute_ms"][0] == split.recompute_ns / 1e6 > 0


def test_the_page_tells_the_story_first_then_offers_the_cliff_the_lesson_and_compare(page: Page) -> None:
    assert list(page.tabs._names) == list(TABS)
    session = page.tabs[0]
    story = session[1]
    assert story[0][0] is page.timeline.pane and story[1][0] is page.bars.pane
    sidebar = pn.Column()
    assert not page._below.objects and not sidebar.objects  # the first screen's document: the story alone
    page.complete(sidebar)
    assert page._below.objects and page.files.sample in sidebar.select(pn.widgets.Select)
    assert page._cliff is None
    page.tabs.active = 1
    assert page.state.tab == "Paging cliff" and page.cliff.live and page.cliff.points.data["name"]
    page.state.tab = "Compare"
    assert TABS[page.tabs.active] == "Compare" and page._comparison is not None


def test_the_bars_draw_the_bound_of_the_shown_configuration(page: Page) -> None:
    from vmexplorer.ui import numbers

    span = next(a for a in page.bars.figure.center if a.name == "bound")
    b = numbers.bound(page.state)
    assert span.visible and span.location == pytest.approx(b.lower_bound_ns / 1e6)
    assert page.state.open_sample("h200-vgg19-b64-tuned-swap-50pct.measured.vms")
    assert span.location == pytest.approx(numbers.bound(page.state).lower_bound_ns / 1e6) != b.lower_bound_ns / 1e6


def test_the_default_samples_uvm_twin_is_one_click_away_and_shown_in_the_compare_tab(page: Page) -> None:
    assert page.compare_twin.visible
    page.compare_twin.clicks += 1
    assert page.state.comparison is not None and TABS[page.tabs.active] == "Compare" == page.state.tab


def test_comparing_while_an_error_is_shown_compares_and_clears_the_error(page: Page) -> None:
    page.configure.capacity.value = "nonsense"
    page.configure.simulate.clicks += 1
    assert page.alert.visible
    page.comparison.go.clicks += 1  # clears the message and sets the status in one batch
    assert page.state.message == "" and not page.alert.visible
    assert page.state.comparison is not None and "comparing with" in page.state.status


def test_a_problem_the_page_finds_also_takes_the_last_status_away(page: Page) -> None:
    assert page.state.status
    page.editor.toggle.clicks += 1  # no tensor selected
    assert "select a tensor" in page.alert.object and page.state.status == "" and page.info.object == ""


def test_the_picker_and_the_sidebar_follow_the_session_shown(page: Page) -> None:
    assert page.state.open_sample(UVM_TWIN)
    assert page.files.sample.value == UVM_TWIN and page.configure.policy.value == "uvm"
    assert page.state.simulate_config("alexnet", 64, "60%", "belady")
    assert page.configure.model.value == "alexnet" and page.configure.capacity.value == "60%"


# --- sessions the page cannot draw: refused, with the page as it was and a clear message
def crafted(policy: str) -> Any:
    s = load_session(SAMPLES / DEFAULT_SAMPLE)
    config = dataclasses.replace(s.plan.config, policy=policy)
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, config=config))


def test_a_session_of_a_policy_the_page_has_no_knobs_for_is_not_half_drawn(page: Page,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader refuses such a file; a session that reaches the page anyway leaves it as it was."""
    before = page.state.shown()
    monkeypatch.setattr("vmexplorer.ui.state._open", lambda source, name=None: (crafted("mystery"), "mystery.vms"))
    page.files.upload.on_file(b"\x1f\x8b", "mystery.vms")
    assert page.state.shown() == before and page.alert.visible
    assert "mystery.vms` cannot be shown" in page.state.message and "unexpected error" not in page.state.message
    assert page.timeline.drawn.plan.policy == page.configure.policy.value == "autovm"


def test_a_session_the_page_cannot_draw_leaves_the_one_shown_before_with_a_clear_message(
        page: Page, monkeypatch: pytest.MonkeyPatch) -> None:
    import vmexplorer.ui.timeline as panel

    before = page.state.shown()
    draw = panel.update_timeline

    def only_autovm(layout: Any, session: Any, *args: Any, **kwargs: Any) -> Any:
        if session.plan.policy != "autovm":
            raise ValueError("no glyph for this")
        return draw(layout, session, *args, **kwargs)

    monkeypatch.setattr(panel, "update_timeline", only_autovm)
    page.files.sample.value = UVM_TWIN
    page.files.open.clicks += 1
    assert page.state.shown() == before and page.state.status == ""
    assert page.alert.visible and "unexpected error" not in page.state.message
    assert f"{UVM_TWIN}` cannot be shown (ValueError: no glyph for this)" in page.state.message
    assert page.timeline.drawn.plan.policy == page.configure.policy.value == "autovm"  # drawn again, widgets too
    assert page.files.sample.value == DEFAULT_SAMPLE, "the picker shows what the page shows"


def test_a_bug_in_an_action_is_said_and_the_page_stays_as_it_was(page: Page, monkeypatch: pytest.MonkeyPatch) -> None:
    before = page.state.shown()

    def broken(*args: Any) -> bool:
        raise KeyError("a bug")

    monkeypatch.setattr(page.state, "open_sample", broken)
    page.files.open.clicks += 1
    assert page.state.shown() == before and "unexpected error (KeyError)" in page.alert.object


def test_an_edited_session_saves_and_exports_from_the_page(page: Page) -> None:
    from vmexplorer.session import session_from_bytes

    move = page.state.moves[0]
    assert page.state.drag("prefetch", move.tensor, move.offload_after + 1)
    saved = page.files._session_bytes()
    assert saved is not None
    again = session_from_bytes(saved.getvalue(), "saved.vms")
    assert again.plan.policy == "manual" and again.plan.moves == page.state.session.plan.moves
    assert b"traceEvents" in page.files._trace_bytes().getvalue()
    assert b"<html" in page.files._html_bytes().getvalue().lower()


def test_the_apps_exported_page_holds_the_story_with_the_bound_beside_the_summary_and_the_timeline(
        page: Page) -> None:
    from vmexplorer.ui.story import headline

    html = page.files._html_bytes().getvalue().decode()
    for name in ("summary", "breakdown", "bound", "sweep_lines", "sweep_points", "sweep_bound", "prefetch_markers"):
        assert f'"name":"{name}"' in html, name
    assert headline(page.state).split(":")[0] in html


def test_an_export_that_fails_says_why_and_downloads_nothing(page: Page, monkeypatch: pytest.MonkeyPatch) -> None:
    import vmexplorer.ui.files as files

    def broken(*args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError("Patched curdoc has been previously destroyed")

    monkeypatch.setattr(files, "standalone_html", broken)
    assert page.files._html_bytes() is None
    assert page.alert.visible and "the page could not be made (RuntimeError)" in page.alert.object


def test_the_export_is_made_in_a_document_of_its_own_even_when_bokehs_current_one_was_destroyed(
        page: Page) -> None:
    import weakref

    import bokeh.io.doc
    from bokeh.document import Document

    # what a closed tab can leave as Bokeh's current document in a server: one that is gone
    bokeh.io.doc._PATCHED_CURDOCS.append(weakref.ref(Document()))
    try:
        with pytest.raises(RuntimeError, match="previously destroyed"):
            bokeh.io.doc.curdoc()
        assert b"<html" in page.files._html_bytes().getvalue().lower() and not page.alert.visible
    finally:
        bokeh.io.doc._PATCHED_CURDOCS.pop()


def test_the_projector_switch_sets_large_type_in_every_figure_and_the_headline(page: Page) -> None:
    lanes = page.timeline.pane.object.children[0]
    assert lanes.xaxis[0].major_label_text_font_size == "12px"
    page.projector.value = True
    assert page.state.projector
    for fig in (lanes, page.bars.figure):
        for ax in (*fig.xaxis, *fig.yaxis):
            assert int(ax.major_label_text_font_size.removesuffix("px")) >= 16
            assert int(ax.axis_label_text_font_size.removesuffix("px")) >= 16
    assert int(page.headline.text.styles["font-size"].removesuffix("px")) >= 24
    page.projector.value = False
    assert lanes.xaxis[0].major_label_text_font_size == "12px"
