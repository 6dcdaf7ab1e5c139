"""The app on a session of a model imported from an ONNX file, opened where the file is not (its session
carries the graph): the policy switch, drags, the paging cliff, the baselines and comparisons re-plan it from
the session, as they do a built-in model's."""

from __future__ import annotations

import pytest
from onnx_models import Net, resnet18

from vmexplorer.config import Config
from vmexplorer.graph import import_onnx
from vmexplorer.session.files import session_to_bytes
from vmexplorer.session.planned import plan_for
from vmexplorer.simulator import H100_DEFAULT
from vmexplorer.ui import numbers
from vmexplorer.ui.configure import Configure
from vmexplorer.ui.state import AppState


@pytest.fixture(scope="module")
def upload() -> bytes:
    net = Net()
    graph = import_onnx(net.bytes(resnet18(net)), 8, image_size=64, name="mynet")
    config = Config(*graph.key, graph.footprint // 2, "autovm", {}, definition=graph.definition)
    return session_to_bytes(plan_for(config, H100_DEFAULT).simulated())


@pytest.fixture
def state(upload: bytes) -> AppState:
    s = AppState()
    assert s.load(upload, "mynet.vms"), s.message
    return s


def test_an_uploaded_session_of_an_imported_model_opens_with_its_moves(state: AppState) -> None:
    s = state.session
    assert s.graph.model == "mynet.onnx" and s.graph.definition is not None
    assert state.moves == list(s.plan.moves) and state.moves and state.message == ""


def test_switching_the_policy_re_plans_the_imported_model_from_the_session(state: AppState) -> None:
    definition = state.session.graph.definition
    assert state.simulate_config("mynet.onnx", 8, "60%", "uvm"), state.message
    s = state.session
    assert (s.plan.policy, s.graph.model, s.graph.definition) == ("uvm", "mynet.onnx", definition)
    assert not state.source.reproducible  # a link cannot name a model that is in a session only
    assert state.simulate_config("mynet.onnx", 4, "50%", "belady"), state.message  # another batch too
    assert state.session.graph.batch == 4


def test_a_drag_re_plans_the_imported_model_as_manual(state: AppState) -> None:
    move = state.moves[-1]
    lo, _ = state.marker_range("prefetch", move.tensor)
    assert state.drag("prefetch", move.tensor, lo), state.message
    assert state.session.plan.policy == "manual" and state.session.graph.definition is not None
    assert any(mv.tensor == move.tensor and mv.prefetch_after == lo for mv in state.session.plan.moves)


def test_the_paging_cliff_baselines_and_comparisons_of_an_imported_model(state: AppState) -> None:
    cliff = numbers.sweep(state, points=4)
    assert {line["policy"] for line in cliff["lines"]} >= {"uvm", "autovm", "device"}
    assert all(line["iteration_ms"] for line in cliff["lines"])
    assert numbers.baseline(state, "uvm") is not None and numbers.bound(state) is not None
    assert state.open_sweep_point("uvm", 70.0), state.message
    assert state.session.plan.policy == "uvm" and state.session.graph.model == "mynet.onnx"
    assert state.compare_mechanisms(), state.message
    assert state.comparison.graph.definition == state.session.graph.definition


def test_the_sidebar_offers_the_imported_model_while_its_session_is_shown(state: AppState) -> None:
    sidebar = Configure(state=state)
    sidebar.draw()
    assert sidebar.model.value == "mynet.onnx" and "mynet.onnx" in sidebar.model.options
    assert sidebar.capacity.value == "50%" and "minimum" in sidebar.capacity_help.object
    sidebar.batch.value = 4  # the capacity help follows a new batch of the same model
    assert "minimum" in sidebar.capacity_help.object
