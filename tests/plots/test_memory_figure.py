"""The memory figure: resident bytes stacked by tensor kind under the capacity line, the largest resident
tensors on hover, a selected tensor's share, and another session put into the same figure in place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bokeh.models import ColumnDataSource, HoverTool, Legend, Range1d, Span

from vmexplorer.graph import build_graph
from vmexplorer.plan import Direction
from vmexplorer.plots.axis import make_axis
from vmexplorer.plots.memory import KIND_LABELS, KINDS, highlight_tensor, resident_figure, update_resident
from vmexplorer.policies import compile_plan
from vmexplorer.session import Session, load_session, new_session
from vmexplorer.session.iterations import iteration_view
from vmexplorer.simulator import H100_DEFAULT, simulate

SAMPLES = Path(__file__).resolve().parents[2] / "sample_sessions"


def simulated(model: str = "resnet18", policy: str = "autovm", share: float = 0.5) -> Session:
    graph = build_graph(model, 64, 224)
    plan = compile_plan(graph, int(graph.footprint * share), policy, {"offload": "all"} if policy == "autovm" else None)
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)


def measured(name: str) -> Session:
    return load_session(SAMPLES / f"{name}.measured.vms")


@pytest.fixture(scope="module")
def session() -> Session:
    return simulated()


def draw(s: Session) -> Any:
    return resident_figure(s, make_axis(s, "time"), Range1d())


def part(fig: Any, name: str) -> Any:
    (found,) = [r for r in fig.renderers if r.name == name]
    return found


def source(fig: Any, name: str) -> dict[str, Any]:
    return fig.select_one({"name": name, "type": ColumnDataSource}).data


def kinds(fig: Any) -> dict[str, Any]:
    return source(fig, "resident_kinds")


def step_at(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """A step function (each y holds from its x on; the last of equal x wins) at `at`: 0 before it starts."""
    i = np.searchsorted(x, at, side="right") - 1
    return np.where(i >= 0, np.asarray(y, dtype=np.float64)[np.maximum(i, 0)], 0.0)


def ledger(s: Session, t_ns: int) -> np.ndarray:
    """Each tensor's bytes on the device at `t_ns` of a one-iteration session, read off the plan's
    definitions row by row: resident from the start, or from creation to last use, plus what was
    prefetched or faulted in from the copy's start, minus what was moved out from its end."""
    g, p, tl = s.graph, s.plan, s.timeline
    start = dict(zip(tl.op_index.tolist(), tl.op_start_ns.tolist()))
    end = dict(zip(tl.op_index.tolist(), tl.op_end_ns.tolist()))
    level = np.zeros(len(g.tensors), dtype=np.int64)
    for t, nbytes in p.resident_at_start:
        level[t] += nbytes
    for t, tensor in enumerate(g.tensors):
        if not tensor.persistent and start[tensor.producer] <= t_ns < end[g.last_use[t]]:
            level[t] += tensor.nbytes
    for row, i in enumerate(tl.memop_index.tolist()):
        m = p.memops[i]
        if m.direction is Direction.TO_DEVICE and tl.memop_start_ns[row] <= t_ns:
            level[m.tensor] += m.nbytes
        elif m.direction is Direction.TO_HOST and tl.memop_end_ns[row] <= t_ns:
            level[m.tensor] -= m.nbytes
    return level


@pytest.mark.parametrize("which", ["simulated resnet18 autovm", "simulated vgg11 uvm", "measured vgg19 uvm",
                                   "measured resnet50 autovm", "measured vgg19 uvm, iteration 4"])
def test_the_kinds_stack_up_to_the_sessions_resident_curve_at_every_instant(which: str) -> None:
    s = {"simulated resnet18 autovm": lambda: simulated(),
         "simulated vgg11 uvm": lambda: simulated("vgg11", "uvm", share=0.75),
         "measured vgg19 uvm": lambda: measured("vgg19-b64-uvm-50pct"),
         "measured resnet50 autovm": lambda: measured("resnet50-b64-autovm-50pct"),
         "measured vgg19 uvm, iteration 4": lambda: iteration_view(measured("vgg19-b64-uvm-50pct"), 4)}[which]()
    fig = draw(s)
    d, total = kinds(fig), source(fig, "resident")
    bands = [(d[f"{k.value}_lo"], d[f"{k.value}_hi"]) for k in KINDS]
    assert all(np.all(hi >= lo) for lo, hi in bands)
    assert np.allclose(bands[0][0], 0) and all(np.array_equal(a[1], b[0]) for a, b in zip(bands, bands[1:]))
    assert np.array_equal(bands[-1][1], d["total"])
    assert len(total["x"]) == len(s.timeline.resident_t_ns)
    instants = np.union1d(d["x"], total["x"])
    assert np.allclose(step_at(d["x"], d["total"], instants), step_at(total["x"], total["y"], instants))
    assert d["total"].max() > 0 and bands[KINDS.index(next(k for k in KINDS if k.value == "weight"))][1].min() > 0


@pytest.mark.parametrize("which", ["simulated resnet18 autovm", "measured vgg19 uvm, iteration 4"])
def test_the_hover_names_the_largest_resident_tensors_at_that_instant(which: str) -> None:
    session = simulated() if which.startswith("simulated") else iteration_view(measured("vgg19-b64-uvm-50pct"), 4)
    d = kinds(draw(session))
    names = [t.name for t in session.graph.tensors]
    rows = sorted({int(np.argmax(d["total"])), *range(0, len(d["x"]), max(1, len(d["x"]) // 40))})
    for row in rows:
        level = ledger(session, int(round(d["x"][row] * 1e6)))
        shown = [d[f"top{i}"][row] for i in range(3)]
        named = [names.index(text.rsplit(" (", 1)[0]) for text in shown if text]
        expected = sorted(level[level > 0], reverse=True)[:3]
        assert [level[t] for t in named] == expected, (row, shown)


def test_the_hover_tells_bytes_per_kind_and_escapes_what_the_session_names() -> None:
    fig = draw(simulated())
    (hover,) = fig.select({"type": HoverTool})
    assert hover.mode == "vline" and hover.renderers == [part(fig, "resident_hover")]
    labels = [label for label, _ in hover.tooltips]
    assert labels[:1 + len(KINDS)] == ["resident", *(KIND_LABELS[k] for k in KINDS)]
    assert not any("{safe}" in field for _, field in hover.tooltips)  # tensor names stay text
    d = kinds(fig)
    assert all(len(d[field.lstrip("@")]) == len(d["x"]) for _, field in hover.tooltips)


def test_the_legend_has_every_kind_in_a_fixed_order_and_hides_one_on_a_click() -> None:
    for s in (simulated(), measured("alexnet-b256-device")):  # alexnet has no batch-norm statistics
        (legend,) = draw(s).select({"type": Legend})
        assert [item.label["value"] for item in legend.items] == [KIND_LABELS[k] for k in KINDS]
        assert legend.click_policy == "hide"


def test_the_capacity_line_sits_at_the_plans_capacity_and_always_shows() -> None:
    for s in (simulated(share=0.5), measured("vgg19-b64-device"), simulated("vgg11", "uvm", share=0.9)):
        fig = draw(s)
        (span,) = fig.select({"type": Span})
        unit = 2**30 if max(s.plan.capacity, s.timeline.resident_bytes.max()) >= 2**30 else 2**20
        assert fig.yaxis.axis_label == f"resident ({'GiB' if unit == 2**30 else 'MiB'})"
        assert span.location == pytest.approx(s.plan.capacity / unit)
        assert fig.select_one({"name": "capacity_label"}).y == span.location
        assert fig.y_range.start == 0 and fig.y_range.end > max(span.location, kinds(fig)["total"].max())


def test_update_resident_puts_another_session_into_the_same_figure_and_sources(session: Session) -> None:
    fig = draw(session)
    sources = [r.data_source for r in fig.renderers]
    renderers, y_range = list(fig.renderers), fig.y_range
    other = iteration_view(measured("vgg19-b64-autovm-50pct"), 2)
    update_resident(fig, other, make_axis(other, "time"))
    assert list(fig.renderers) == renderers and [r.data_source for r in fig.renderers] == sources
    assert fig.y_range is y_range
    assert np.allclose(kinds(fig)["x"], kinds(draw(other))["x"])
    assert np.array_equal(source(fig, "resident")["y"],
                          source(draw(other), "resident")["y"])
    (span,) = fig.select({"type": Span})
    assert span.location == pytest.approx(other.plan.capacity / 2**30) != session.plan.capacity / 2**30
    assert fig.y_range.end == draw(other).y_range.end


def test_the_highlighted_tensor_is_its_bytes_while_resident_and_zero_outside(session: Session) -> None:
    g, p = session.graph, session.plan
    offloaded = {m.tensor for m in p.memops if m.direction is Direction.TO_HOST}
    t = next(t for t in offloaded if not g.tensors[t].persistent)  # created, moved out and back, released
    fig = draw(session)
    highlight_tensor(fig, session, make_axis(session, "time"), t)
    d = kinds(fig)
    h = part(fig, "tensor_resident").data_source.data
    scale = 2**30 if fig.yaxis.axis_label.endswith("(GiB)") else 2**20
    drawn = step_at(h["x"], h["y"], d["x"]) * scale
    expected = np.array([ledger(session, int(round(x * 1e6)))[t] for x in d["x"]])
    assert np.allclose(drawn, expected)
    tl = session.timeline
    born = tl.op_start_ns[list(tl.op_index).index(g.tensors[t].producer)] / 1e6
    gone = tl.op_end_ns[list(tl.op_index).index(g.last_use[t])] / 1e6
    assert np.all(drawn[(d["x"] < born) | (d["x"] >= gone)] == 0)
    assert np.any(drawn == g.tensors[t].nbytes) and np.any((drawn == 0) & (d["x"] > born) & (d["x"] < gone))
    highlight_tensor(fig, session, make_axis(session, "time"), None)
    assert len(part(fig, "tensor_resident").data_source.data["x"]) == 0
