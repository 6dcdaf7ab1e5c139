"""The timeline figure: one glyph per op and memory operation, markers where plans issue transfers,
linked axes, and the same small set of renderers however large the session."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from bokeh.models import GlyphRenderer, Legend, Span
from bokeh.models.widgets import Div

from vmexplorer.graph import Phase, build_graph
from vmexplorer.plan import Direction, Origin
from vmexplorer.plots import MEMOP_COLORS, PHASE_COLORS, summary_table
from vmexplorer.plots.timeline import timeline_figure, timeline_source
from vmexplorer.policies import compile_plan
from vmexplorer.records import Timeline
from vmexplorer.records.collected import UM_KINDS, Collected, CollectorStatus
from vmexplorer.session import Session, new_session
from vmexplorer.simulator import H100_DEFAULT, simulate

NAMES = ("ops", "memops", "offload_markers", "prefetch_markers", "faults", "resident")


def make_session(model: str, batch: int, size: int, share: float = 0.5) -> Session:
    graph = build_graph(model, batch, size)
    plan = compile_plan(graph, int(graph.footprint * share), "autovm", {"offload": "all"})
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)


@pytest.fixture(scope="module")
def session() -> Session:
    return make_session("resnet18", 64, 224)


SHIFT_NS = 10**9  # the second iteration of `two_iterations` starts this much later


def two_iterations(s: Session) -> Session:
    """The simulated iteration twice, back to back, as a measured session records it."""
    tl = s.timeline
    assert max(tl.op_end_ns.max(), tl.memop_end_ns.max()) < SHIFT_NS

    def rep(a: np.ndarray, shift: bool = False) -> np.ndarray:
        return np.concatenate([a, a + SHIFT_NS if shift else a])

    def its(a: np.ndarray) -> np.ndarray:
        return np.repeat(np.arange(2), len(a))

    return dataclasses.replace(s, timeline=Timeline(
        "measured", its(tl.op_iteration), rep(tl.op_index), rep(tl.op_start_ns, True), rep(tl.op_end_ns, True),
        rep(tl.op_stall_ns), rep(tl.op_fault_bytes), its(tl.memop_iteration), rep(tl.memop_index),
        rep(tl.memop_start_ns, True), rep(tl.memop_end_ns, True), rep(tl.resident_t_ns, True),
        rep(tl.resident_bytes)))


def data(layout: Any, name: str) -> dict[str, Any]:
    return timeline_source(layout, name).data


def planned(s: Session, direction: Direction) -> list[int]:
    """Timeline rows of plan-origin memory operations in one direction."""
    ms = s.plan.memops
    return [r for r, i in enumerate(s.timeline.memop_index)
            if ms[i].origin is Origin.PLAN and ms[i].direction is direction]


@pytest.mark.parametrize("x_axis", ["time", "op"])
def test_every_op_memop_marker_fault_and_resident_step_is_drawn(session: Session, x_axis: str) -> None:
    tl = session.timeline
    fig = timeline_figure(session, x_axis)
    assert len(data(fig, "ops")["left"]) == len(tl.op_index)
    assert len(data(fig, "memops")["left"]) == len(tl.memop_index)
    offloads, prefetches = planned(session, Direction.TO_HOST), planned(session, Direction.TO_DEVICE)
    assert offloads and prefetches, "the fixture should plan round trips"
    assert len(data(fig, "offload_markers")["x"]) == len(offloads)
    assert len(data(fig, "prefetch_markers")["x"]) == len(prefetches)
    assert len(data(fig, "faults")["left"]) == int((tl.op_fault_bytes > 0).sum()) > 0
    assert len(data(fig, "resident")["x"]) == len(tl.resident_t_ns)


def test_every_phase_an_op_can_have_has_a_colour_of_its_own() -> None:
    assert set(PHASE_COLORS) == {p.value for p in Phase}
    assert len(set(PHASE_COLORS.values())) == len(PHASE_COLORS)


def test_ops_are_coloured_by_phase_and_the_drivers_transfers_as_demand_faults_and_evictions(session: Session) -> None:
    fig = timeline_figure(session)
    ops = data(fig, "ops")
    assert set(ops["phase"]) == set(PHASE_COLORS) - {Phase.RECOMPUTE.value}  # autovm recomputes nothing
    assert all(c == PHASE_COLORS[p] for c, p in zip(ops["color"], ops["phase"]))
    memops = data(fig, "memops")
    driver = memops["origin"] == Origin.DRIVER.value
    to_device = memops["direction"] == Direction.TO_DEVICE.value
    assert (driver & to_device).any() and (driver & ~to_device).any()
    assert set(memops["kind"][driver & to_device]) == {"demand fault"}
    assert set(memops["kind"][driver & ~to_device]) == {"driver eviction"}
    assert all(c == MEMOP_COLORS[k] for c, k in zip(memops["color"], memops["kind"]))
    assert all("demand fault" in w for w in memops["what"][driver & to_device])


def test_the_legend_names_each_phase_and_kind_of_transfer_and_hides_it_on_a_click(session: Session) -> None:
    (legend,) = timeline_figure(session).children[0].select({"type": Legend})
    labels = [item.label["value"] for item in legend.items]
    assert set(PHASE_COLORS) | set(MEMOP_COLORS) <= set(labels)
    assert not any("forced" in label for label in labels)
    assert legend.click_policy == "hide"
    assert all(len(item.renderers) == 1 for item in legend.items)  # each entry hides its own kind only


def test_a_legend_entry_with_nothing_to_show_is_left_out_and_comes_back_with_what_it_names(session: Session) -> None:
    from vmexplorer.plots.timeline import update_timeline

    graph = session.graph
    plain = compile_plan(graph, int(graph.footprint * 0.5), "uvm")  # no planned moves: the driver's alone
    uvm = new_session(graph, plain, simulate(graph, plain, H100_DEFAULT), H100_DEFAULT)
    fig = timeline_figure(uvm)
    (legend,) = fig.children[0].select({"type": Legend})

    def shown() -> set[str]:
        return {item.label["value"] for item in legend.items if item.visible}

    assert {"driver eviction", "demand fault"} <= shown()
    assert not shown() & {"prefetch", "offload", "offload issued", "prefetch issued", "before the edits"}
    update_timeline(fig, session, "time")
    assert {"prefetch", "offload", "offload issued", "prefetch issued"} <= shown()


@pytest.fixture(scope="module")
def checkpointed() -> Session:
    graph = build_graph("resnet18", 16, 112)
    plan = compile_plan(graph, int(graph.footprint * 0.6), "checkpoint", {"segments": 4})
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)


def legend_shown(fig: Any) -> set[str]:
    (legend,) = fig.children[0].select({"type": Legend})
    return {item.label["value"] for item in legend.items if item.visible}


def test_a_plan_that_recomputes_draws_its_re_runs_as_compute_of_their_own_colour_hatched(checkpointed: Session) -> None:
    from vmexplorer.graph.recompute import RERUN

    fig = timeline_figure(checkpointed)
    ops = data(fig, "ops")
    reruns = ops["phase"] == Phase.RECOMPUTE.value
    ran = [checkpointed.graph.ops[k] for k in checkpointed.timeline.op_index.tolist()]
    assert reruns.sum() == sum(o.phase is Phase.RECOMPUTE for o in ran) > 0
    assert all(name.endswith(RERUN) for name in ops["name"][reruns])
    assert set(ops["color"][reruns]) == {PHASE_COLORS["recompute"]}
    assert set(ops["phase"]) == set(PHASE_COLORS)
    (lane,) = [r for r in fig.children[0].renderers if r.name == "ops_recompute"]
    others = [r for r in fig.children[0].renderers if r.name.startswith("ops_") and r is not lane]
    assert lane.glyph.hatch_pattern and not any(r.glyph.hatch_pattern for r in others)
    assert lane.glyph.bottom == others[0].glyph.bottom, "re-runs are compute: they run in the compute lane"


def test_the_legend_names_recompute_only_for_a_plan_that_recomputes(session: Session, checkpointed: Session) -> None:
    from vmexplorer.plots.timeline import update_timeline

    assert "recompute" in legend_shown(timeline_figure(checkpointed))
    fig = timeline_figure(session)
    assert "recompute" not in legend_shown(fig)
    source = timeline_source(fig, "ops")
    update_timeline(fig, checkpointed, "time")
    assert timeline_source(fig, "ops") is source, "the new session arrives as data"
    assert "recompute" in legend_shown(fig)


def test_the_legend_can_follow_its_sources_in_a_later_message(session: Session) -> None:
    # BokehJS draws a legend entry shown in the same message as its glyph's new rows with the glyph's old
    # colours (none, for rows that were not there): the page shows the entries a message later
    from vmexplorer.plots.timeline import label_legend, update_timeline

    graph = session.graph
    plain = compile_plan(graph, int(graph.footprint * 0.5), "uvm")
    fig = timeline_figure(new_session(graph, plain, simulate(graph, plain, H100_DEFAULT), H100_DEFAULT))
    (legend,) = fig.children[0].select({"type": Legend})
    issued = [item for item in legend.items if item.label["value"] == "prefetch issued"]
    update_timeline(fig, session, "time", legend=False)
    assert len(timeline_source(fig, "prefetch_markers").data["x"]) > 0
    assert not any(item.visible for item in issued), "the legend left as it was"
    label_legend(fig, session)
    assert all(item.visible for item in issued)


def test_the_time_axis_is_in_milliseconds(session: Session) -> None:
    ops = data(timeline_figure(session, "time"), "ops")
    assert np.allclose(ops["left"], session.timeline.op_start_ns / 1e6)
    assert np.allclose(ops["right"], session.timeline.op_end_ns / 1e6)


def test_the_op_axis_gives_each_op_one_unit_and_markers_sit_after_their_issue_op(session: Session) -> None:
    fig = timeline_figure(session, "op")
    ops = data(fig, "ops")
    assert np.array_equal(ops["left"], session.timeline.op_index) and np.all(ops["right"] - ops["left"] == 1)
    rows = planned(session, Direction.TO_HOST)
    after = [session.plan.memops[session.timeline.memop_index[r]].issue_after for r in rows]
    assert np.array_equal(data(fig, "offload_markers")["x"], np.array(after) + 1)


def test_markers_sit_at_the_end_of_the_op_they_are_issued_after(session: Session) -> None:
    tl, memops = session.timeline, session.plan.memops
    xs = data(timeline_figure(session, "time"), "prefetch_markers")["x"]
    for x, r in zip(xs, planned(session, Direction.TO_DEVICE)):
        after = memops[tl.memop_index[r]].issue_after
        expected = tl.op_start_ns.min() if after < 0 else tl.op_end_ns[list(tl.op_index).index(after)]
        assert x == pytest.approx(expected / 1e6)


def visible(fig: Any, name: str) -> bool:
    """Whether the part named `name` (a note, or a renderer) is drawn: it, and the figure holding it, visible."""
    for child in fig.children:
        if child.name == name:
            return bool(child.visible)
        for r in getattr(child, "renderers", []):
            if r.name == name:
                return bool(child.visible and r.visible)
    return False


def test_all_figures_share_one_x_range_and_show_the_capacity(session: Session) -> None:
    fig = timeline_figure(session)
    ranges = {id(child.x_range) for child in fig.children if hasattr(child, "x_range")}
    assert len(fig.children) == 6 and len(ranges) == 1
    assert [child.visible for child in fig.children] == [True] * 3 + [False] * 3  # nothing measured to show
    spans = list(fig.select({"type": Span}))
    assert len(spans) == 1
    unit = 2**30 if session.plan.capacity >= 2**30 else 2**20
    assert spans[0].location == pytest.approx(session.plan.capacity / unit)


def test_several_iterations_draw_side_by_side(session: Session) -> None:
    twice = two_iterations(session)
    fig = timeline_figure(twice, "op")
    ops = data(fig, "ops")
    assert len(ops["left"]) == 2 * len(session.timeline.op_index)
    assert ops["left"].max() == 2 * len(session.graph.ops) - 1
    assert len(data(fig, "offload_markers")["x"]) == 2 * len(planned(session, Direction.TO_HOST))
    memops = data(fig, "memops")
    assert memops["left"].min() >= 0 and memops["right"].max() <= 2 * len(session.graph.ops)
    xs = data(timeline_figure(twice, "time"), "prefetch_markers")["x"]
    first, second = np.split(xs, 2)
    assert np.allclose(second - first, SHIFT_NS / 1e6)


def test_names_from_a_shared_file_cannot_inject_html(session: Session) -> None:
    evil = "<script>alert(1)</script>"
    s = dataclasses.replace(session, graph=dataclasses.replace(session.graph, model=evil),
                            plan=dataclasses.replace(session.plan, config=dataclasses.replace(
                                session.plan.config, model=evil, policy=evil)))
    text = summary_table(s).text
    assert "<script>" not in text and "&lt;script&gt;" in text


def test_every_title_shows_as_written_never_as_tex(session: Session) -> None:
    from bokeh.models import PlainText, Plot

    named = "$$x^2$$ \\(y\\) <b>from a file's name</b>"
    measured = two_iterations(session)
    ok = (CollectorStatus("cupti", True, "", 0, 0), CollectorStatus("nvml", True, "", 0, 0))
    fig = timeline_figure(dataclasses.replace(measured, collected=_collected(measured, ok)), "op", title=named)
    titles = [p.title.text for p in fig.select({"type": Plot}) if p.title.text]
    assert len(titles) == 3 and all(isinstance(t, PlainText) for t in titles)  # lanes, CUPTI, NVML
    assert named in [t.text for t in titles]


def test_hover_shows_names_as_text(session: Session) -> None:
    from bokeh.models import HoverTool

    tips = [field for tool in timeline_figure(session).select({"type": HoverTool}) for _, field in tool.tooltips]
    assert tips and not [f for f in tips if "{safe}" in f]  # Bokeh escapes a field unless it says {safe}


def test_a_collector_note_from_a_shared_file_shows_as_text(session: Session) -> None:
    evil = "<img src=x onerror=alert(1)> $$x^2$$"
    measured = two_iterations(session)
    off = (CollectorStatus(evil, False, evil, 0, 0), CollectorStatus("nvml", True, "", 0, 0))
    fig = timeline_figure(dataclasses.replace(measured, collected=_collected(measured, off)), "op")
    (note,) = fig.select({"name": "collector_notes"})
    assert note.disable_math and "<img" not in note.text and note.text.count("&lt;img src=x") == 2
    assert summary_table(session).disable_math


def test_a_larger_session_uses_the_same_renderers(session: Session) -> None:
    big = make_session("resnet152", 64, 224)
    counts = [len(list(timeline_figure(s).select({"type": GlyphRenderer}))) for s in (session, big)]
    assert counts[0] == counts[1]
    assert len(data(timeline_figure(big), "ops")["left"]) == len(big.graph.ops)


def test_a_session_that_never_pages_still_draws(session: Session) -> None:
    whole = make_session("alexnet", 2, 64, share=1.0)
    assert len(whole.plan.memops) == 0
    fig = timeline_figure(whole)
    assert len(data(fig, "memops")["left"]) == 0 and len(data(fig, "offload_markers")["x"]) == 0


def test_an_unknown_axis_is_refused_with_the_choices(session: Session) -> None:
    with pytest.raises(ValueError, match="x_axis has to be 'time' or 'op', not 'bytes'"):
        timeline_figure(session, "bytes")


@pytest.mark.parametrize("source", ["simulated", "measured"])
def test_the_summary_table_says_whether_figures_are_simulated_or_measured(session: Session,
                                                                          source: str) -> None:
    s = session if source == "simulated" else two_iterations(session)
    table = summary_table(s)
    assert isinstance(table, Div)
    assert source in table.text
    for label in ("iteration time", "compute", "waiting on demand faults", "waiting on evictions", "idle",
                  "demand-faulted", "moved to host", "moved to device", "peak resident", "capacity", "footprint"):
        assert label in table.text


def test_the_summary_says_how_long_recomputing_took_only_for_a_plan_that_recomputes(
        session: Session, checkpointed: Session) -> None:
    from vmexplorer.units import format_ns

    text = summary_table(checkpointed).text
    assert "recomputing" in text and format_ns(checkpointed.time_split().recompute_ns) in text
    assert "recomputing" not in summary_table(session).text  # a row of zeros on every other session's


def _collected(s: Session, status: tuple[CollectorStatus, ...]) -> Collected:
    tl = s.timeline
    start = tl.op_start_ns.astype(np.int64)
    n = len(start)
    return Collected(
        kernel_iteration=tl.op_iteration, kernel_start_ns=start, kernel_end_ns=start + 1,
        kernel_stream=np.ones(n, dtype=np.int64), kernel_name=np.zeros(n, dtype=np.int64), kernel_names=("k",),
        um_iteration=tl.op_iteration[[0, 0]], um_start_ns=start[[0, 0]], um_end_ns=start[[0, 0]] + 1,
        um_kind=np.array([UM_KINDS.index("bytes_htod"), UM_KINDS.index("gpu_page_fault_groups")]),
        um_value=np.array([3 << 20, 7]), nvml_t_ns=[0, 10**6], nvml_memory_used_bytes=[1, 1],
        nvml_pcie_tx_bytes_per_s=[0, 1e9], nvml_pcie_rx_bytes_per_s=[2e9, 0], nvml_gpu_util_pct=[50, 60],
        status=status)


def test_a_measured_session_shows_what_cupti_and_nvml_recorded_under_the_modelled_lanes(session: Session) -> None:
    measured = two_iterations(session)
    ok = (CollectorStatus("cupti", True, "", 0, 0), CollectorStatus("nvml", True, "", 0, 0))
    fig = timeline_figure(dataclasses.replace(measured, collected=_collected(measured, ok)), "op")
    htod = data(fig, "measured_htod")
    assert htod["top"].max() == pytest.approx(3.0) and htod["groups"].tolist() == ["7"]
    assert data(fig, "nvml_rx")["y"].tolist() == [2.0, 0.0]
    assert visible(fig, "measured_htod") and visible(fig, "nvml_rx") and not visible(fig, "collector_notes")


def test_the_migration_lane_says_how_much_of_the_bytes_moved_cupti_accounted_for(session: Session) -> None:
    from bokeh.models import Plot

    from vmexplorer.records.collected import migration_shares

    measured = two_iterations(session)
    ok = (CollectorStatus("cupti", True, "", 0, 0), CollectorStatus("nvml", True, "", 0, 0))
    s = dataclasses.replace(measured, collected=_collected(measured, ok))
    shares = migration_shares(s.plan, s.timeline, s.collected)
    assert 0 < shares["htod_share"] < 1 and shares["dtoh_share"] == 0  # the records hold 3 MiB in, none out
    titles = [p.title.text.text for p in timeline_figure(s, "op").select({"type": Plot})
              if p.title.text and p.title.text.text.startswith("CUPTI's migrations per op")]
    assert len(titles) == 1
    assert f"only {100 * shares['htod_share']:.0f}% in and 0% out of the bytes moved" in titles[0]


def test_a_collector_that_did_not_run_is_named_in_place_of_its_lane(session: Session) -> None:
    measured = two_iterations(session)
    off = (CollectorStatus("cupti", False, "CUPTI refused: another profiler is attached", 0, 0),
           CollectorStatus("nvml", True, "", 0, 0))
    fig = timeline_figure(dataclasses.replace(measured, collected=_collected(measured, off)), "op")
    notes = list(fig.select({"name": "collector_notes"}))
    assert len(notes) == 1 and "another profiler is attached" in notes[0].text and notes[0].visible
    assert not visible(fig, "measured_htod") and visible(fig, "nvml_rx")
    assert not visible(timeline_figure(session), "collector_notes")  # simulated: nothing to say


def test_one_iteration_of_a_measured_session_is_drawn_from_its_own_start(session: Session) -> None:
    from vmexplorer.session.iterations import iteration_view

    measured = two_iterations(session)
    second = iteration_view(measured, 1)
    tl = second.timeline
    assert tl.iterations == 1 and len(tl.op_index) == len(session.graph.ops)
    assert min(tl.op_start_ns.min(), tl.memop_start_ns.min()) == 0
    assert tl.iteration_ns()[0] == session.timeline.iteration_ns()[0]
    assert np.array_equal(tl.op_end_ns - tl.op_start_ns, session.timeline.op_end_ns - session.timeline.op_start_ns)
    with pytest.raises(ValueError, match="no iteration 2"):
        iteration_view(measured, 2)


def test_a_timed_iteration_names_the_counted_one_in_place_of_the_migration_lane(session: Session) -> None:
    from vmexplorer.session.iterations import iteration_view

    measured = two_iterations(session)
    ok = (CollectorStatus("cupti", True, "", 0, 0), CollectorStatus("nvml", True, "", 0, 0))
    both = dataclasses.replace(measured, collected=_collected(measured, ok))
    counted = dataclasses.replace(both, timeline=dataclasses.replace(both.timeline, counted=1))
    timed = timeline_figure(iteration_view(counted, 0), "op")
    notes = list(timed.select({"name": "collector_notes"}))
    assert len(notes) == 1 and "counted unified memory in iteration 2 only" in notes[0].text and notes[0].visible
    assert not visible(timed, "measured_htod") and visible(timed, "nvml_rx")
    # the same iteration of a session counted throughout draws its lane
    assert visible(timeline_figure(iteration_view(both, 0), "op"), "measured_htod")
    assert not visible(timeline_figure(iteration_view(counted, 1), "op"), "collector_notes")


def test_counted_iterations_are_left_out_of_the_timing_figures(session: Session) -> None:
    from vmexplorer.records import summarize

    tl = two_iterations(session).timeline
    slow = dataclasses.replace(tl, op_end_ns=np.where(tl.op_iteration == 1, tl.op_end_ns + 10**8, tl.op_end_ns),
                               counted=1)
    s = summarize(session.graph, session.plan, slow)
    assert (s["iterations"], s["counted_iterations"], slow.typical_iteration()) == (1, 1, 0)
    assert s["iteration_ns"] == slow.iteration_ns()[0] != int(np.median(slow.iteration_ns()))
    assert s["busy_ns"] == int((tl.op_end_ns - tl.op_start_ns)[tl.op_iteration == 0].sum())
    assert summarize(session.graph, session.plan, tl)["iterations"] == 2


def test_the_typical_iteration_is_the_one_of_median_duration(session: Session) -> None:
    tl = session.timeline
    n = len(tl.op_index)
    stretch = np.array([5, 1, 3])  # the three copies run 5x, 1x and 3x as long
    starts = np.concatenate([[0], np.cumsum(stretch * (tl.op_end_ns.max() + 1))])[:3]
    three = Timeline("measured", np.repeat(np.arange(3), n), np.tile(tl.op_index, 3),
                     np.concatenate([starts[i] + stretch[i] * tl.op_start_ns for i in range(3)]),
                     np.concatenate([starts[i] + stretch[i] * tl.op_end_ns for i in range(3)]),
                     np.tile(tl.op_stall_ns, 3), np.tile(tl.op_fault_bytes, 3), np.zeros(0, dtype=np.int64),
                     np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                     np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    assert three.typical_iteration() == 2


def _bar(label: str, compute: float, faults: float, recompute: float = 0.0) -> dict[str, Any]:
    return {"label": label, "source": "simulated", "compute_ms": compute, "recompute_ms": recompute,
            "fault_wait_ms": faults, "transfer_wait_ms": 0.0, "idle_ms": 0.0,
            "iteration_ms": compute + faults + recompute}


def test_where_the_time_goes_is_one_stacked_bar_per_row_the_first_row_on_top() -> None:
    from vmexplorer.plots import breakdown_figure

    fig = breakdown_figure([_bar("this session (uvm), simulated", 10, 90), _bar("device, simulated", 10, 0)])
    assert list(fig.y_range.factors) == ["device, simulated", "this session (uvm), simulated"]
    data = fig.select_one({"name": "breakdown"}).data
    assert list(data["fault_wait_ms"]) == [90, 0] and list(data["compute_ms"]) == [10, 10]
    assert [item.label.value for item in fig.legend[0].items] == [
        "compute", "recomputing", "waiting on demand faults", "waiting on evictions and prefetches",
        "idle and launch gaps"]


def test_recomputing_stacks_after_compute_in_the_timelines_recompute_colour_and_hatch() -> None:
    from vmexplorer.plots import breakdown_figure

    fig = breakdown_figure([_bar("checkpoint, simulated", 10, 5, recompute=3)])
    assert fig.select_one({"name": "breakdown"}).data["recompute_ms"] == [3]
    bars = {item.label.value: item.renderers[0].glyph for item in fig.legend[0].items}
    assert bars["recomputing"].fill_color == PHASE_COLORS["recompute"]
    assert bars["recomputing"].left.expr.fields == ("compute_ms",), "it starts where compute ends"
    assert bars["recomputing"].hatch_pattern and not bars["compute"].hatch_pattern


def test_new_rows_go_into_the_same_bars_not_a_new_figure() -> None:
    from vmexplorer.plots import breakdown_figure, update_breakdown

    fig = breakdown_figure([_bar("a", 1, 1)])
    source = fig.select_one({"name": "breakdown"})
    update_breakdown(fig, [_bar("b", 2, 3), _bar("c", 4, 0)])
    assert fig.select_one({"name": "breakdown"}) is source
    assert list(source.data["label"]) == ["b", "c"] and list(fig.y_range.factors) == ["c", "b"]


def _sweep(scale: float) -> dict[str, Any]:
    return {"lines": [{"policy": "uvm", "capacity_pct": [40.0, 100.0], "iteration_ms": [900 * scale, 60.0]},
                      {"policy": "device", "capacity_pct": [100.0], "iteration_ms": [60.0]}],
            "measured": [{"name": "uvm-50.vms", "policy": "uvm", "capacity_pct": 50.0, "iteration_ms": 800.0}]}


def test_the_paging_cliff_draws_a_line_per_policy_and_the_measured_samples_as_larger_points() -> None:
    from vmexplorer.plots import sweep_figure

    fig = sweep_figure(_sweep(1))
    lines = fig.select_one({"name": "sweep_lines"}).data
    assert lines["policy"] == ["uvm (simulated)", "device (simulated)"] and lines["ys"][0] == [900.0, 60.0]
    points = fig.select_one({"name": "sweep_points"}).data
    measured = points["name"].index("uvm-50.vms")
    assert points["marker"][measured] == "diamond" and points["size"][measured] > max(points["size"][:3])
    assert points["label"][measured] == "uvm, measured sample"


def test_a_new_sweep_goes_into_the_same_sources() -> None:
    from vmexplorer.plots import sweep_figure, update_sweep

    fig = sweep_figure(_sweep(1))
    source = fig.select_one({"name": "sweep_lines"})
    update_sweep(fig, _sweep(2))
    assert fig.select_one({"name": "sweep_lines"}) is source and source.data["ys"][0] == [1800.0, 60.0]
