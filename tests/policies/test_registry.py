"""The policy registry: a policy is one module and one registry line, and the rest follows from it.

A throwaway policy, registered in these tests alone, compiles, appears in `vmexplorer plan --help` with
an option flag generated from its declaration, runs from the command line, is offered by the app's
policy picker with a knob for its option, and survives a session file; the shipped registry is
unchanged afterwards. Each shipped policy's module declares what the registry reads.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

import vmexplorer.policies
from vmexplorer.cli import main
from vmexplorer.graph import Graph, Kind, build_graph
from vmexplorer.plan import Move, PlanError
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import POLICIES, OptionSpec, PolicySpec, compile_plan
from vmexplorer.policies.common import reuse_gaps
from vmexplorer.session.samples import DEFAULT_SAMPLE, SAMPLES

SHIPPED = ("device", "uvm", "autovm", "belady", "vdnn", "tuned", "checkpoint", "joint", "exact", "manual")
SMALL = ["--model", "resnet18", "--batch", "8", "--image-size", "64"]


def _offload_weights(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    """The `count` largest weights leave over their longest reuse gap and come back one op before it ends."""
    n, out = len(graph.ops), []
    weights = sorted((t for t, x in enumerate(graph.tensors) if x.kind is Kind.WEIGHT),
                     key=lambda t: -graph.tensors[t].nbytes)
    for t in weights[:options["count"]]:
        last, use = max(reuse_gaps(graph, t), key=lambda gap: gap[1] - gap[0])
        out.append(Move(t, last, use - n - 1 if use >= n else use - 1))
    return out


THROWAWAY = PolicySpec("offload_weights", "the largest weights leave between their uses (a test's policy)",
                       _offload_weights, {"count": OptionSpec(int, 1, "how many of the largest weights leave",
                                                              minimum=0)})


def _simulation() -> Any:
    from vmexplorer.policies import Simulation
    from vmexplorer.simulator import H100_DEFAULT, simulate
    from vmexplorer.simulator.bound import lower_bound

    return Simulation(simulate, lower_bound, H100_DEFAULT)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[PolicySpec]:
    monkeypatch.setitem(POLICIES, THROWAWAY.name, THROWAWAY)
    yield THROWAWAY


def _largest_weights(graph: Graph, count: int) -> set[int]:
    weights = [t for t, x in enumerate(graph.tensors) if x.kind is Kind.WEIGHT]
    return set(sorted(weights, key=lambda t: -graph.tensors[t].nbytes)[:count])


def test_a_registered_policy_compiles_with_its_options_checked_and_defaulted(registered: PolicySpec) -> None:
    g = build_graph("resnet18", 8, 64)
    plan = compile_plan(g, g.footprint // 2, "offload_weights", {"count": 3})
    validate_plan(g, plan)
    assert (plan.policy, plan.options) == ("offload_weights", {"count": 3})
    assert {mv.tensor for mv in plan.moves} == _largest_weights(g, 3)
    assert compile_plan(g, g.footprint // 2, "offload_weights").options == {"count": 1}
    with pytest.raises(PlanError, match="count must be at least 0"):
        compile_plan(g, g.footprint // 2, "offload_weights", {"count": -1})
    with pytest.raises(PlanError, match="moves are a manual plan; the offload_weights policy makes its own"):
        compile_plan(g, g.footprint // 2, "offload_weights", moves=[Move(0, 0, None)])


def test_plan_help_lists_a_registered_policy_and_its_generated_option_flag(
        registered: PolicySpec, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["plan", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines wherever the width falls
    assert f"offload_weights: {THROWAWAY.summary}" in text
    assert "--count INT [offload_weights] how many of the largest weights leave (default 1)" in text


def test_plan_runs_a_registered_policy_with_its_option_from_the_command_line(
        registered: PolicySpec, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", *SMALL, "--capacity", "60%", "--policy", "offload_weights", "--count", "2",
                 "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["config"]["policy"], doc["config"]["options"]) == ("offload_weights", {"count": 2})
    g = build_graph("resnet18", 8, 64)
    names = {g.tensors[t].name for t in _largest_weights(g, 2)}
    assert {mv["tensor"] for mv in doc["plan"]["moves"]} == names
    # the flag belongs to its policy: given with another, it is refused naming the owner
    assert main(["plan", *SMALL, "--capacity", "60%", "--policy", "uvm", "--count", "2"]) == 2
    assert "--count is an option of offload_weights, not of uvm" in capsys.readouterr().err


@pytest.mark.skipif(not (SAMPLES / DEFAULT_SAMPLE).is_file(), reason="sample sessions are missing")
def test_the_app_offers_a_registered_policy_with_a_knob_and_its_session_file_loads(registered: PolicySpec) -> None:
    from vmexplorer.session import session_from_bytes
    from vmexplorer.ui.page import Page

    view = Page()
    assert list(view.configure.policy.options) == list(POLICIES)
    view.configure.policy.value = "offload_weights"
    assert list(view.configure.knob_widgets) == ["count"] and view.configure.knob_widgets["count"].value == 1
    assert THROWAWAY.summary in view.configure.policy_help.object
    view.configure.model.value, view.configure.batch.value, view.configure.capacity.value = "resnet18", 8, "60%"
    view.configure.knob_widgets["count"].value = 2
    view.configure.simulate.clicks += 1
    shown = view.state.session
    assert not view.alert.visible, view.alert.object
    assert (shown.plan.policy, shown.plan.options) == ("offload_weights", {"count": 2})
    saved = view.files._session_bytes()
    assert saved is not None  # the loader holds a file's policy and options to the registry
    assert session_from_bytes(saved.getvalue(), "saved.vms").plan.options == {"count": 2}


def test_the_registry_is_the_shipped_one_after_a_test_registers_a_policy() -> None:
    before = list(POLICIES.items())
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(POLICIES, THROWAWAY.name, THROWAWAY)
        assert compile_plan(build_graph("resnet18", 8, 64), 10**10, "offload_weights").policy == "offload_weights"
    assert list(POLICIES.items()) == before and tuple(POLICIES) == SHIPPED
    shipped = ", ".join(SHIPPED)
    with pytest.raises(PlanError, match=f"unknown policy 'offload_weights'; choose one of: {shipped}"):
        compile_plan(build_graph("resnet18", 8, 64), 10**10, "offload_weights")


@pytest.mark.parametrize("name", SHIPPED)
def test_every_registered_policy_module_declares_what_the_registry_reads(name: str) -> None:
    spec = POLICIES[name]
    module = importlib.import_module(f"vmexplorer.policies.{name}")
    assert module.SPEC is spec and spec.name == name
    assert spec.summary and "\n" not in spec.summary
    assert spec.plan_moves is module.plan_moves
    assert list(inspect.signature(spec.plan_moves).parameters) == ["graph", "capacity", "options", "moves"]
    for option, opt in spec.options.items():
        assert option.isidentifier() and option.islower(), option  # it becomes the flag --option-name
        assert isinstance(opt, OptionSpec) and opt.help, option
        assert opt.minimum is None or opt.default >= opt.minimum, option
        assert not opt.choices or opt.default in opt.choices, option
        assert isinstance(opt.default, opt.type), option
    g = build_graph("resnet18", 8, 64)
    plan = compile_plan(g, g.footprint, name, simulation=_simulation() if spec.searches else None)
    validate_plan(g, plan)
    assert plan.options == {option: opt.default for option, opt in spec.options.items()}


def test_every_policy_module_in_the_package_is_registered() -> None:
    declared = []
    for info in pkgutil.iter_modules(vmexplorer.policies.__path__):
        module = importlib.import_module(f"vmexplorer.policies.{info.name}")
        if isinstance(getattr(module, "SPEC", None), PolicySpec):
            declared.append(module.SPEC.name)
            assert info.name == module.SPEC.name  # the module is named after its policy
    assert sorted(declared) == sorted(POLICIES) == sorted(SHIPPED)
