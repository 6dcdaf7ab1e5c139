"""The named cost models (`--cost-model h200`, `h100`): the samples' calibrations, shipped with the package.

They are data written from the samples (bench/named_cost_models.py), never by hand: regenerating them from
sample_sessions/ gives the files byte for byte. A sample's configuration simulated with its GPU's named model
gives the figures the sample's own calibrated model gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vmexplorer
from bench import named_cost_models
from vmexplorer.cli import main
from vmexplorer.graph import build_graph
from vmexplorer.session import load_session
from vmexplorer.session.planned import plan_for
from vmexplorer.simulator import H100_DEFAULT
from vmexplorer.simulator.named import DATA, GPUS, calibrated_graphs, named_cost_model

SAMPLES = Path(__file__).resolve().parents[2] / "sample_sessions"


def test_the_shipped_files_are_what_the_samples_give() -> None:
    assert DATA.parent == Path(vmexplorer.__file__).parent / "simulator"  # inside the package, not the repo
    made = named_cost_models.files(SAMPLES)
    assert set(made) == set(GPUS)
    for name, text in made.items():
        assert (DATA / f"{name}.json").read_text(encoding="utf-8") == text, \
            f"{name}.json is stale: run `python -m bench.named_cost_models`"


def test_the_package_declares_the_files_as_its_data() -> None:
    pyproject = (Path(vmexplorer.__file__).parents[1] / "pyproject.toml").read_text()
    assert '"vmexplorer.simulator" = ["calibrated/*.json"]' in pyproject


@pytest.mark.parametrize("sample", ["h200-vgg19-b64-belady-50pct.measured.vms",
                                    "h200-resnet50-b64-autovm-swap-50pct.measured.vms",
                                    "h200-alexnet-b256-uvm-50pct.measured.vms"])
def test_cost_model_h200_simulates_a_samples_configuration_as_its_calibration_does(
        sample: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    s = load_session(SAMPLES / sample)
    c = s.plan.config
    assert s.cost_model is not None
    expected = plan_for(c, s.cost_model).simulated()
    code = main(["simulate", "--model", c.model, "--batch", str(c.batch), "--capacity", str(c.capacity),
                 "--policy", c.policy, "--mechanism", str(c.mechanism), "--cost-model", "h200",
                 "--out", str(tmp_path / "s.vms"), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["config"] == c.as_json()
    assert doc["cost_model"].startswith("h200: ") and "H200" in doc["cost_model_gpu"]
    for key in ("iteration_ns", "bytes_to_device", "bytes_to_host", "peak_resident_bytes"):
        if key in expected.summary:
            assert doc["summary"][key] == expected.summary[key], key
    assert doc["bound"] == expected.bound.as_json()  # type: ignore[union-attr]


def test_a_graph_no_sample_ran_takes_the_gpus_rates_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    graph = build_graph("vgg16", 32)
    assert graph.key not in calibrated_graphs("h200")
    cost = named_cost_model("h200", graph)
    assert cost.op_ns == {} and cost.evict_bytes_per_ns != H100_DEFAULT.evict_bytes_per_ns
    assert "no sample ran this graph" in cost.name
    code = main(["plan", "--model", "vgg16", "--batch", "32", "--capacity", "50%", "--policy", "uvm",
                 "--cost-model", "h100", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0 and "its samples ran" in err and json.loads(out)["cost_model"].startswith("h100: ")


def test_the_default_says_which_gpu_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--help"])
    out, _ = capsys.readouterr()
    assert code == 0 and "h200 or h100" in " ".join(out.split()) and "an H100, uncalibrated" in " ".join(out.split())
    assert main(["plan", "--model", "vgg11", "--batch", "8", "--capacity", "80%", "--policy", "uvm"]) == 0
    out, _ = capsys.readouterr()
    assert "h100-uncalibrated (an H100, uncalibrated" in out


def test_an_unknown_name_is_a_file_that_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--model", "vgg11", "--batch", "8", "--capacity", "80%", "--policy", "uvm",
                 "--cost-model", "h300"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "h300" in err


def test_without_the_samples_a_run_is_judged_by_the_model_written_from_them(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    from vmexplorer.session import samples

    sample = load_session(SAMPLES / "h200-vgg19-b64-device.measured.vms")
    graph = build_graph("vgg19", 64)
    monkeypatch.setattr(samples, "SAMPLES", tmp_path / "none")  # an installed package: no sample_sessions/
    samples._index.cache_clear()
    try:
        assert samples.gpu_cost_model(graph, "NVIDIA H200") == sample.cost_model
        assert samples.gpu_cost_model(graph, "NVIDIA B200") is None
    finally:
        samples._index.cache_clear()
