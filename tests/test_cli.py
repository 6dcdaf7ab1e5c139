"""The `vmexplorer` command line: what scripts may rely on (docs/cli.md), checked in-process.

Every bad input is one line on stderr and exit status 2; JSON is valid and keyed as documented;
session files written by `simulate` open in `info`, `compare` and `export`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vmexplorer.cli import main
from vmexplorer.models import MODELS, build_graph

REPO = Path(__file__).resolve().parents[1]
VGG = ["--model", "vgg19", "--batch", "64"]
HALF = [*VGG, "--capacity", "50%"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Simulated vgg19 sessions under uvm and autovm, and a vgg16 one (a different graph)."""
    folder = tmp_path_factory.mktemp("sessions")
    paths = {}
    for name, args in {"uvm": [*HALF, "--policy", "uvm"], "autovm": [*HALF, "--policy", "autovm"],
                       "vgg16": ["--model", "vgg16", "--batch", "32", "--capacity", "50%",
                                 "--policy", "autovm"]}.items():
        paths[name] = folder / f"{name}.vms"
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["simulate", *args, "--out", str(paths[name]), "--note", f"{name} test"]) == 0
    return paths


# --- bad input: one line, exit 2, never a traceback -----------------------------------------------
# {tmp} is a scratch folder holding the files made by _scratch_files; {uvm} a good session file.
BAD_INPUTS = {
    "no command": [],
    "unknown command": ["frobnicate"],
    "unknown model": ["graph", "--model", "vgg99", "--batch", "64"],
    "batch zero": ["graph", "--model", "vgg19", "--batch", "0"],
    "batch negative": ["graph", "--model", "vgg19", "--batch", "-3"],
    "batch not a number": ["graph", "--model", "vgg19", "--batch", "many"],
    "batch missing": ["graph", "--model", "vgg19"],
    "image too small": ["graph", *VGG, "--image-size", "8"],
    "unknown flag": ["graph", *VGG, "--colour"],
    "unknown format": ["models", "--format", "xml"],
    "unknown policy": ["plan", *HALF, "--policy", "belady9000"],
    "unparsable capacity": ["plan", *VGG, "--capacity", "lots", "--policy", "uvm"],
    "capacity unit unknown": ["plan", *VGG, "--capacity", "4 parsecs", "--policy", "uvm"],
    "capacity zero": ["plan", *VGG, "--capacity", "0", "--policy", "uvm"],
    "capacity below minimum": ["plan", *VGG, "--capacity", "1MiB", "--policy", "autovm"],
    "device policy over capacity": ["plan", *HALF, "--policy", "device"],
    "option of another policy": ["plan", *HALF, "--policy", "uvm", "--prefetch-distance", "2"],
    "option value not a number": ["plan", *HALF, "--policy", "autovm", "--prefetch-distance", "far"],
    "option value out of range": ["plan", *HALF, "--policy", "autovm", "--prefetch-distance", "0"],
    "moves file missing": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/none.json"],
    "moves file is a folder": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}"],
    "moves file not JSON": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/not-json.json"],
    "moves file not text": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/garbage.vms"],
    "moves name no tensor": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/unknown-tensor.json"],
    "moves for a non-manual policy": ["plan", *HALF, "--policy", "autovm", "--moves", "{tmp}/moves.json"],
    "simulate without --out": ["simulate", *HALF, "--policy", "uvm"],
    "simulate into a missing folder": ["simulate", *HALF, "--policy", "uvm", "--out", "{tmp}/no/such/x.vms"],
    "simulate onto a folder": ["simulate", *HALF, "--policy", "uvm", "--out", "{tmp}", "--force"],
    "info of a missing file": ["info", "{tmp}/missing.vms"],
    "info of a garbage file": ["info", "{tmp}/garbage.vms"],
    "info of a folder": ["info", "{tmp}"],
    "compare with a missing file": ["compare", "{uvm}", "{tmp}/missing.vms"],
    "export with no target": ["export", "{uvm}"],
    "export to both targets": ["export", "{uvm}", "--html", "{tmp}/a.html", "--chrome-trace", "{tmp}/a.json"],
    "export onto an existing file": ["export", "{uvm}", "--html", "{tmp}/exists.html"],
    "export of a garbage file": ["export", "{tmp}/garbage.vms", "--html", "{tmp}/g.html"],
    "run with no GPU": ["run", *HALF, "--policy", "autovm", "--out", "{tmp}/run.vms"],
    "run with no output": ["run", *HALF, "--policy", "autovm"],
    "run with an unknown collector": ["run", *HALF, "--policy", "uvm", "--out", "{tmp}/run.vms",
                                      "--collectors", "kernels,sonar"],
    "run with no collector named": ["run", *HALF, "--policy", "uvm", "--out", "{tmp}/run.vms", "--collectors", ","],
    "run counting a negative number of iterations": ["run", *HALF, "--policy", "uvm", "--out", "{tmp}/run.vms",
                                                     "--counted", "-1"],
    "calibrate a simulated session": ["calibrate", "{uvm}", "--out", "{tmp}/c.vms"],
    "calibrate a paging session without --device": ["calibrate", "{sample}/vgg19-b64-uvm-50pct.measured.vms",
                                                    "--out", "{tmp}/c.vms"],
    "calibrate against another model's device run": ["calibrate", "{sample}/vgg19-b64-uvm-50pct.measured.vms",
                                                     "--device", "{sample}/alexnet-b256-device.measured.vms",
                                                     "--out", "{tmp}/c.vms"],
    "calibrate against a paging run as --device": ["calibrate", "{sample}/vgg19-b64-autovm-50pct.measured.vms",
                                                   "--device", "{sample}/vgg19-b64-uvm-50pct.measured.vms",
                                                   "--out", "{tmp}/c.vms"],
    "calibrate onto an existing file": ["calibrate", "{sample}/vgg19-b64-device.measured.vms",
                                        "--out", "{tmp}/exists.html"],
    "calibrate in place without --force": ["calibrate", "{sample}/vgg19-b64-device.measured.vms",
                                           "--out", "{sample}/vgg19-b64-device.measured.vms"],
}
SAMPLES = REPO / "sample_sessions"


def _scratch_files(tmp: Path) -> None:
    (tmp / "not-json.json").write_text('{"moves": [')
    (tmp / "unknown-tensor.json").write_text('{"moves": [{"tensor": "nope", "offload_after": 1}]}')
    (tmp / "moves.json").write_text('{"moves": [{"tensor": "features.1.out", "offload_after": 2}]}')
    (tmp / "garbage.vms").write_bytes(b"\x1f\x8b\xff\xfe not really gzip")
    (tmp / "exists.html").write_text("keep me")


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path, sessions: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    _scratch_files(tmp_path)
    argv = [a.format(tmp=tmp_path, uvm=sessions["uvm"], sample=SAMPLES) for a in BAD_INPUTS[case]]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("vmexplorer: error: ")
    assert "Traceback" not in err
    assert (tmp_path / "exists.html").read_text() == "keep me"


def test_capacity_below_minimum_names_the_op_and_the_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    need, op = build_graph("vgg19", 64).min_capacity
    _, _, err = run(capsys, "plan", *VGG, "--capacity", "1MiB", "--policy", "autovm")
    assert build_graph("vgg19", 64).ops[op].name in err
    assert str(need) in err


def test_run_with_no_gpu_says_so_and_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here; the no-GPU path is for machines without it")
    except ImportError:
        pass
    code, _, err = run(capsys, "run", *HALF, "--policy", "autovm", "--out", str(tmp_path / "run.vms"))
    assert code == 2
    assert "needs CuPy" in err and not (tmp_path / "run.vms").exists()


def test_calibrate_stores_a_fitted_model_in_a_copy_of_a_measured_session(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vmexplorer.session import load_session

    source = tmp_path / "uvm.vms"
    shutil.copy(SAMPLES / "vgg19-b64-uvm-50pct.measured.vms", source)
    before = source.read_bytes()
    out = tmp_path / "calibrated.vms"
    doc = run_json(capsys, "calibrate", str(source), "--device", str(SAMPLES / "vgg19-b64-device.measured.vms"),
                   "--out", str(out))
    assert source.read_bytes() == before  # the input is left as it was
    cost = load_session(out).cost_model
    assert cost.name == doc["cost_model"] and doc["rates"]["evict_bytes_per_ns"] == cost.evict_bytes_per_ns
    # VGG-19's uvm run faults in weights (SGD), feature maps (backward) and more: each kind gets its rate
    assert doc["rates"]["fault_bytes_per_ns_by_kind"] == cost.fault_bytes_per_ns_by_kind
    assert {"sgd_momentum", "conv2d_backward"} <= set(cost.fault_bytes_per_ns_by_kind)
    assert set(cost.op_ns) == {op.name for op in load_session(out).graph.ops}
    assert doc["simulated_iteration_ns"] == pytest.approx(doc["measured_iteration_ns"], rel=0.1)
    assert load_session(out).timeline.iteration_ns().tolist() == load_session(source).timeline.iteration_ns().tolist()


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("vmexplorer ")
    for command in ("models", "graph", "plan", "simulate", "info", "compare", "export", "run"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0 and "usage: vmexplorer " + command in out


# --- models and graph ------------------------------------------------------------------------------
def test_models_lists_every_model_with_its_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "models")
    assert (doc["batch"], doc["image_size"]) == (64, 224)
    assert [m["name"] for m in doc["models"]] == list(MODELS)
    vgg19 = next(m for m in doc["models"] if m["name"] == "vgg19")
    graph = build_graph("vgg19", 64)
    assert vgg19 == {"name": "vgg19", "param_count": 143_667_240, "ops": len(graph.ops),
                     "tensors": len(graph.tensors), "footprint_bytes": graph.footprint,
                     "min_capacity_bytes": graph.min_capacity[0]}


def test_models_table_names_every_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models")
    assert code == 0
    assert all(name in out for name in MODELS)


def test_graph_json_has_ops_tensors_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "graph", "--model", "resnet18", "--batch", "8", "--image-size", "64")
    graph = build_graph("resnet18", 8, 64)
    assert (doc["model"], doc["batch"], doc["image_size"]) == ("resnet18", 8, 64)
    assert len(doc["ops"]) == len(graph.ops) and len(doc["tensors"]) == len(graph.tensors)
    assert set(doc["ops"][0]) == {"index", "name", "kind", "phase", "layer", "flops", "bytes_touched",
                                  "reads", "writes"}
    assert set(doc["tensors"][0]) == {"index", "name", "kind", "dtype", "shape", "nbytes", "producer",
                                      "consumers"}
    need, op = graph.min_capacity
    assert doc["totals"] == {
        "footprint_bytes": graph.footprint, "min_capacity_bytes": need,
        "min_capacity_op": {"index": op, "name": graph.ops[op].name}, "param_count": graph.param_count,
        "bytes_by_kind": graph.bytes_by_kind(), "flops": sum(o.flops for o in graph.ops),
        "ops": len(graph.ops), "tensors": len(graph.tensors)}
    images = next(t for t in doc["tensors"] if t["name"] == "input.images")
    assert images["producer"] is None and images["shape"] == [8, 3, 64, 64]
    assert images["consumers"] == ["conv1", "conv1.backward"]  # wgrad reads the input


def test_graph_json_is_stable(capsys: pytest.CaptureFixture[str]) -> None:
    first = run(capsys, "graph", *VGG, "--format", "json")[1]
    assert run(capsys, "graph", *VGG, "--format", "json")[1] == first


def test_graph_table_shows_totals_ops_and_tensors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "graph", "--model", "alexnet", "--batch", "4")
    assert code == 0
    assert "footprint_bytes" in out and "features.0.backward" in out and "input.images" in out


# --- plan ----------------------------------------------------------------------------------------
def test_autovm_plan_simulates_faster_than_uvm(capsys: pytest.CaptureFixture[str]) -> None:
    autovm = run_json(capsys, "plan", *HALF, "--policy", "autovm")
    uvm = run_json(capsys, "plan", *HALF, "--policy", "uvm")
    assert autovm["summary"]["iteration_ns"] < uvm["summary"]["iteration_ns"]
    graph = build_graph("vgg19", 64)
    for doc, policy in ((autovm, "autovm"), (uvm, "uvm")):
        assert doc["config"]["policy"] == policy
        assert doc["config"]["capacity_bytes"] == graph.footprint // 2
        assert doc["summary"]["source"] == "simulated"
        assert set(doc["plan"]) == {"peak_resident_bytes", "resident_at_start", "memops", "moves"}
    assert autovm["plan"]["moves"] and not uvm["plan"]["moves"]
    memop = autovm["plan"]["memops"][0]
    assert set(memop) == {"tensor", "nbytes", "direction", "mode", "origin", "issue_after",
                          "issue_after_op", "complete_before", "complete_before_op"}
    assert 0 < memop["nbytes"] <= graph.tensors[graph.tensor_id(memop["tensor"])].nbytes  # may be partial
    resident = autovm["plan"]["resident_at_start"][0]
    assert set(resident) == {"tensor", "nbytes"}


def test_policy_options_reach_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "plan", *HALF, "--policy", "autovm", "--prefetch-distance", "5")
    assert doc["config"]["options"]["prefetch_distance"] == 5


def test_plan_moves_round_trip_through_a_manual_plan(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    autovm = run_json(capsys, "plan", *HALF, "--policy", "autovm")
    moves = tmp_path / "moves.json"
    moves.write_text(json.dumps({"moves": autovm["plan"]["moves"]}))
    manual = run_json(capsys, "plan", *HALF, "--policy", "manual", "--moves", str(moves))
    assert manual["plan"]["moves"] == autovm["plan"]["moves"]
    assert manual["plan"]["memops"] == autovm["plan"]["memops"]


def test_capacity_above_footprint_works_and_notes_nothing_will_page(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", *VGG, "--capacity", "200%", "--policy", "uvm", "--format", "json")
    assert code == 0
    assert json.loads(out)["summary"]["fault_bytes"] == 0
    assert err.startswith("vmexplorer: note: ") and "nothing will page" in err


def test_capacity_in_bytes_and_units(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "plan", *VGG, "--capacity", "4GiB", "--policy", "autovm")
    assert doc["config"]["capacity_bytes"] == 4 * 2**30
    doc = run_json(capsys, "plan", *VGG, "--capacity", "3000000000", "--policy", "autovm")
    assert doc["config"]["capacity_bytes"] == 3_000_000_000


def test_plan_table_shows_summary_and_memops(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", *HALF, "--policy", "autovm")
    assert code == 0
    assert "iteration_ns" in out and "to_host" in out and "features.1.out" in out


# --- sessions: simulate, info, compare, export -----------------------------------------------------
def test_info_shows_config_environment_summary_and_notes(sessions: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "info", str(sessions["autovm"]))
    assert set(doc) == {"path", "config", "created", "cost_model", "environment", "notes", "summary"}
    assert doc["config"]["policy"] == "autovm" and doc["config"]["model"] == "vgg19"
    assert doc["notes"] == ["autovm test"]
    assert doc["summary"]["source"] == "simulated"
    code, out, _ = run(capsys, "info", str(sessions["autovm"]))
    assert code == 0 and "autovm test" in out and "iteration_ns" in out


def test_simulate_saves_what_plan_predicts(sessions: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    planned = run_json(capsys, "plan", *HALF, "--policy", "uvm")
    assert run_json(capsys, "info", str(sessions["uvm"]))["summary"] == planned["summary"]


def test_compare_same_graph_aligns_by_op_with_ratios(sessions: dict[str, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "compare", str(sessions["uvm"]), str(sessions["autovm"]))
    it = doc["summary"]["iteration_ns"]
    assert it["ratio"] == pytest.approx(it["b"] / it["a"]) and it["ratio"] < 1
    assert doc["summary"]["source"]["ratio"] is None  # not a number
    assert doc["aligned_by"] == "op"
    assert [r["name"] for r in doc["rows"]] == [op.name for op in build_graph("vgg19", 64).ops]
    assert all(r["delta_ns"] == r["b_ns"] - r["a_ns"] for r in doc["rows"])


def test_compare_different_graphs_aligns_by_layer(sessions: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "compare", str(sessions["vgg16"]), str(sessions["autovm"]))
    assert doc["aligned_by"] == "layer"
    rows = {r["name"]: r for r in doc["rows"]}
    assert rows["features.0"]["delta_ns"] is not None
    assert rows["features.36"]["a_ns"] is None  # vgg16 has no 37th feature layer
    code, out, _ = run(capsys, "compare", str(sessions["vgg16"]), str(sessions["autovm"]), "--top", "3")
    assert code == 0 and "by layer" in out


def test_export_html_and_chrome_trace(sessions: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    html, trace = tmp_path / "s.html", tmp_path / "s.trace.json"
    assert run(capsys, "export", str(sessions["autovm"]), "--html", str(html))[0] == 0
    assert run(capsys, "export", str(sessions["autovm"]), "--chrome-trace", str(trace))[0] == 0
    assert "<html" in html.read_text().lower()
    assert json.loads(trace.read_text())
    assert run(capsys, "export", str(sessions["autovm"]), "--html", str(html), "--force")[0] == 0


def test_existing_out_is_refused_without_force_and_left_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.vms"
    out.write_bytes(b"precious")
    code, _, err = run(capsys, "simulate", *HALF, "--policy", "uvm", "--out", str(out))
    assert code == 2 and "--force" in err
    assert out.read_bytes() == b"precious"
    code, _, _ = run(capsys, "simulate", *HALF, "--policy", "uvm", "--out", str(out), "--force")
    assert code == 0 and out.read_bytes() != b"precious"
    assert run_json(capsys, "info", str(out))["config"]["policy"] == "uvm"


# --- as a program ---------------------------------------------------------------------------------
def _program() -> list[str]:
    return [sys.executable, "-m", "vmexplorer"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_closed_stdout_pipe_is_not_a_traceback() -> None:
    cmd = [*_program(), "graph", "--model", "resnet152", "--batch", "64", "--format", "json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(100)
    proc.stdout.close()  # like `| head -c 100`
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert proc.returncode in (0, 1)


def test_bad_input_as_a_program_is_one_line_and_exit_2() -> None:
    proc = subprocess.run([*_program(), "graph", "--model", "vgg99", "--batch", "1"], capture_output=True,
                          text=True, env=_env(), timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("vmexplorer: error: ")


@pytest.mark.skipif(shutil.which("vmexplorer") is None, reason="the package is not installed")
def test_installed_entry_point_runs() -> None:
    proc = subprocess.run(["vmexplorer", "models", "--format", "json"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [m["name"] for m in json.loads(proc.stdout)["models"]] == list(MODELS)
