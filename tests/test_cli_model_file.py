"""`--model-file FILE`: the command line on a CNN from an ONNX file (docs/cli.md). A file that mirrors a
built-in model gives the built-in's figures; its sessions carry its graph, so every command that reads a
session opens them where the file is not; bad files and unsupported nodes are one line and exit 2, never a
traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from onnx_models import Net, resnet18, small
from test_cli import run, run_json

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("onnx")
    net = Net()
    out = resnet18(net)
    paths = {"resnet18": folder / "resnet18.onnx", "small": folder / "small.onnx",
             "sigmoid": folder / "sigmoid.onnx", "garbage": folder / "garbage.onnx",
             "truncated": folder / "truncated.onnx"}
    paths["resnet18"].write_bytes(net.bytes(out))
    net = Net(params="initializers")
    paths["small"].write_bytes(net.bytes(small(net)))
    paths["truncated"].write_bytes(paths["small"].read_bytes()[:-200])
    net = Net()
    x = net.relu(net.conv("input", "conv", 8, 3), "relu")
    x = net.node("Sigmoid", "gate", [x], net.shape[x])
    paths["sigmoid"].write_bytes(net.bytes(net.linear(net.flatten(net.adaptive_avgpool(x, "avgpool", 1)), "fc", 10)))
    paths["garbage"].write_bytes(b"\x1f\x8b not a model" * 20)
    return paths


def test_graph_of_a_model_file_has_the_built_in_twins_totals(files: dict[str, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    imported = run_json(capsys, "graph", "--model-file", str(files["resnet18"]), "--batch", "8")
    built = run_json(capsys, "graph", "--model", "resnet18", "--batch", "8")
    assert imported["model"] == "resnet18.onnx"  # named after the file, never taking the built-in's name
    assert imported["totals"] == built["totals"]
    assert [op["kind"] for op in imported["ops"]] == [op["kind"] for op in built["ops"]]


@pytest.mark.parametrize("policy", [["uvm"], ["autovm"], ["belady"], ["tuned", "--search-steps", "20"]],
                         ids=lambda p: p[0])
def test_plan_of_a_model_file_gives_the_built_in_twins_figures(policy: list[str], files: dict[str, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # tuned searches in the simulator, under the same cost model and from the same seed: the same plan
    args = ["--batch", "4", "--image-size", "112", "--capacity", "50%", "--policy", *policy]
    imported = run_json(capsys, "plan", "--model-file", str(files["resnet18"]), *args)
    built = run_json(capsys, "plan", "--model", "resnet18", *args)
    assert imported["config"] == {**built["config"], "model": "resnet18.onnx"}
    assert imported["summary"] == built["summary"]
    assert imported["bound"] == built["bound"]
    assert _unnamed(imported["plan"]) == _unnamed(built["plan"])


def _unnamed(plan: dict) -> dict:
    """A plan's figures without the tensor and op names (torch's `relu` where the built-in says `relu1`)."""
    memops = [{k: v for k, v in m.items() if k not in ("tensor", "issue_after_op", "complete_before_op")}
              for m in plan["memops"]]
    return {"memops": memops, "moves": len(plan["moves"]), "recomputes": len(plan["recomputes"]),
            "resident_at_start": [r["nbytes"] for r in plan["resident_at_start"]],
            **{k: plan[k] for k in ("peak_resident_bytes", "room_bytes")}}


def test_an_image_size_resizes_a_model_file(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "graph", "--model-file", str(files["resnet18"]), "--batch", "2", "--image-size", "112")
    assert doc["image_size"] == 112
    assert doc["totals"] == run_json(capsys, "graph", "--model", "resnet18", "--batch", "2",
                                     "--image-size", "112")["totals"]


BAD = {
    "unsupported node": (["graph", "--model-file", "{sigmoid}", "--batch", "2"],
                         'node "/gate/Sigmoid" has op type "Sigmoid"'),
    "garbage file": (["graph", "--model-file", "{garbage}", "--batch", "2"], "not an ONNX model"),
    "truncated file": (["plan", "--model-file", "{truncated}", "--batch", "2", "--capacity", "50%",
                        "--policy", "uvm"], "not an ONNX model"),
    "missing file": (["graph", "--model-file", "{folder}/none.onnx", "--batch", "2"], "cannot be read"),
    "a folder": (["graph", "--model-file", "{folder}", "--batch", "2"], "cannot be read"),
    "both a model and a file": (["graph", "--model", "vgg11", "--model-file", "{small}", "--batch", "2"],
                                "not allowed with argument"),
    "neither": (["graph", "--batch", "2"], "one of the arguments --model --model-file is required"),
    "bad batch": (["graph", "--model-file", "{small}", "--batch", "0"], "batch must be a positive integer"),
    "an unsupported node to simulate": (["simulate", "--model-file", "{sigmoid}", "--batch", "2", "--capacity",
                                         "50%", "--policy", "uvm", "--out", "{folder}/s.vms"], "Sigmoid"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_model_files_are_one_line_and_exit_2(case: str, files: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv, says = BAD[case]
    names = {k: str(v) for k, v in files.items()}
    code, out, err = run(capsys, *[a.format(folder=files["small"].parent, **names) for a in argv])
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("vmexplorer: error: "), err
    assert says in err and "Traceback" not in err
    assert not list(files["small"].parent.glob("*.vms"))


def test_a_model_file_without_onnx_installed_says_how_to_install_it(files: dict[str, Path]) -> None:
    # as a program, with `import onnx` failing as it does where the extra is not installed
    code = ("import sys; sys.modules['onnx'] = None; from vmexplorer.cli import main; "
            f"sys.exit(main(['graph', '--model-file', {str(files['small'])!r}, '--batch', '2']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("vmexplorer: error: importing a model from an ONNX file needs the onnx package: "
                                   "pip install 'vmexplorer[onnx]'")


def test_a_simulated_session_of_a_model_file_opens_compares_and_exports_after_the_file_is_gone(
        files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "mynet.onnx"
    model.write_bytes(files["resnet18"].read_bytes())
    args = ["--batch", "8", "--image-size", "64", "--capacity", "50%"]
    made = run_json(capsys, "simulate", "--model-file", str(model), *args, "--policy", "autovm",
                    "--out", str(tmp_path / "a.vms"))
    run_json(capsys, "simulate", "--model-file", str(model), *args, "--policy", "uvm", "--out", str(tmp_path / "b.vms"))
    model.unlink()  # another machine: only the sessions
    info = run_json(capsys, "info", str(tmp_path / "a.vms"))
    assert info["config"]["model"] == "mynet.onnx"  # named by its file
    assert (info["summary"], info["bound"]) == (made["summary"], made["bound"])
    compared = run_json(capsys, "compare", str(tmp_path / "a.vms"), str(tmp_path / "b.vms"))
    assert compared["a"]["config"]["model"] == compared["b"]["config"]["model"] == "mynet.onnx"
    code, _, err = run(capsys, "export", str(tmp_path / "a.vms"), "--html", str(tmp_path / "a.html"))
    assert code == 0 and "mynet.onnx" in (tmp_path / "a.html").read_text(), err


def test_run_takes_a_model_file_and_hands_the_engine_its_graph_with_every_kernels_attributes(
        files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # no GPU here: the run stops where the GPU would start, with the graph the engine would execute
    from vmexplorer.engine import executor, gpu
    from vmexplorer.graph.ops import op_attrs

    handed = []

    def execute(graph: Any, plan: Any, settings: Any, **kwargs: Any) -> None:
        handed.append(graph)
        raise OSError("stopped where the GPU would start")

    monkeypatch.setattr(gpu, "cupy", lambda: None)
    monkeypatch.setattr(executor, "execute", execute)
    code, _, err = run(capsys, "run", "--model-file", str(files["small"]), "--batch", "2", "--capacity", "80%",
                       "--policy", "autovm", "--out", str(tmp_path / "r.vms"))
    assert code == 2 and "stopped where the GPU would start" in err
    (graph,) = handed
    assert graph.model == "small.onnx" and graph.definition is not None
    assert all(op_attrs(graph, i) for i in range(len(graph.ops)))  # no op lacks what its kernel reads
