"""Policies and models from other packages: a package outside the repository, installed here as an
installer would (its module on the path beside a `*.dist-info` holding its entry points: no pip, no
network), is listed by `vmexplorer plan --help` and `vmexplorer models`, plans and simulates from the
command line, survives a session file and is offered by the app's policy picker. A broken plugin is one
warning line naming it, and the rest works; a plugin named like a built-in is refused with a warning.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmexplorer import plugins
from vmexplorer.cli import main
from vmexplorer.graph import MODELS, build_graph
from vmexplorer.policies import POLICIES

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vmexplorer_example_plugin"
SHIPPED = ("device", "uvm", "autovm", "belady", "vdnn", "tuned", "checkpoint", "joint", "exact", "manual")


def install(site: Path, name: str, entry_points: dict[str, dict[str, str]]) -> None:
    """What pip leaves in site-packages for a package's metadata: a dist-info with its entry points."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for group, eps in entry_points.items()))


def _reload() -> None:
    POLICIES.reload()
    MODELS.reload()
    for name in [m for m in sys.modules if m.startswith(("vmx_example_plugin", "vmx_broken"))]:
        del sys.modules[name]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty site directory on the path, the registries read again from it and again after the test."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(plugins, "warnings_given", [])
    _reload()
    yield folder
    _reload()  # read again on next use, once the path is back as it was


@pytest.fixture
def example(site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example package of tests/fixtures installed with the entry points its pyproject.toml declares."""
    project = tomllib.loads((FIXTURE / "pyproject.toml").read_text())["project"]
    install(site, project["name"], project["entry-points"])
    monkeypatch.syspath_prepend(str(FIXTURE))
    return site


def test_a_plugins_policy_and_model_join_the_registries_after_the_built_in_ones(example: Path) -> None:
    assert tuple(POLICIES)[:len(SHIPPED)] == SHIPPED and list(POLICIES)[len(SHIPPED):] == ["largest_first"]
    assert list(MODELS)[-1] == "tinynet" and POLICIES.plugins == ["largest_first"] and MODELS.plugins == ["tinynet"]
    assert build_graph("tinynet", 4, 32).key == ("tinynet", 4, 32)
    assert plugins.warnings_given == []


def test_plan_help_and_models_list_them(example: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["plan", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"largest_first: {POLICIES['largest_first'].summary}" in text
    assert "--lead INT [largest_first] ops before its backward use each comes back (default 2)" in text
    assert "tinynet" in text
    assert main(["models", "--batch", "4", "--image-size", "32", "--format", "json"]) == 0
    assert "tinynet" in [m["name"] for m in json.loads(capsys.readouterr().out)["models"]]


def test_a_plugin_policy_plans_a_plugin_model_and_its_session_loads_back(
        example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny.vms"
    code = main(["simulate", "--model", "tinynet", "--batch", "8", "--image-size", "32", "--capacity", "60%",
                 "--policy", "largest_first", "--count", "2", "--out", str(out), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert (doc["config"]["model"], doc["config"]["policy"], doc["config"]["options"]) == \
        ("tinynet", "largest_first", {"count": 2, "lead": 2})
    assert main(["info", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"] == doc["config"]


def test_a_sweep_takes_a_plugin_policy_and_a_plugin_model_as_it_takes_the_built_in_ones(
        example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "--model", "tinynet:8", "--image-size", "32", "--policy", "largest_first,belady",
                 "--mechanism", "uvm", "--capacity", "60%,80%", "--jobs", "1", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = json.loads(captured.out)["rows"]
    assert [(r["model"], r["policy"]) for r in rows] == [("tinynet", "largest_first")] * 2 + [("tinynet", "belady")] * 2
    assert all(r["iteration_ns"] > 0 and not r["note"] for r in rows)


@pytest.mark.parametrize("entry, says", [
    ("vmx_broken_missing:SPEC", "could not be loaded, so it is skipped: ModuleNotFoundError"),
    ("json:dumps", "is skipped: it gives a function, not a PolicySpec"),
])
def test_a_broken_policy_plugin_is_one_warning_line_and_the_rest_works(
        site: Path, entry: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    install(site, "vmx-broken", {"vmexplorer.policies": {"broken": entry}})
    code = main(["plan", "--model", "resnet18", "--batch", "4", "--image-size", "32", "--capacity", "60%",
                 "--policy", "belady", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0
    warned = [line for line in captured.err.splitlines() if line.startswith("vmexplorer: warning:")]
    assert len(warned) == 1 and "'broken'" in warned[0] and says in warned[0], captured.err
    assert tuple(POLICIES) == SHIPPED


def test_a_plugin_named_like_a_built_in_is_refused(example: Path, site: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    install(site, "vmx-clash", {"vmexplorer.models": {"vgg19": "vmx_example_plugin:tinynet"},
                                "vmexplorer.policies": {"belady": "vmx_example_plugin:SPEC"}})
    assert MODELS["vgg19"] is not None and build_graph("vgg19", 2, 32).model == "vgg19"
    assert list(MODELS).count("vgg19") == 1
    assert any("'vgg19'" in w and "has the name of a built-in one" in w for w in plugins.warnings_given)
    # the policy entry point named belady gives the spec named largest_first: the spec's name is the policy's
    assert list(POLICIES).count("largest_first") == 1


def test_a_plugin_model_that_fails_to_build_is_a_one_line_error(site: Path, capsys: pytest.CaptureFixture[str]
                                                                ) -> None:
    install(site, "vmx-broken", {"vmexplorer.models": {"oops": "json:loads"}})
    code = main(["graph", "--model", "oops", "--batch", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "the model 'oops' (a plugin) failed to build" in err


def test_the_apps_policy_picker_offers_a_plugin_policy_with_its_knobs(example: Path) -> None:
    from vmexplorer.ui.page import Page

    view = Page()
    assert "largest_first" in list(view.configure.policy.options)
    view.configure.policy.value = "largest_first"
    assert list(view.configure.knob_widgets) == ["count", "lead"]
