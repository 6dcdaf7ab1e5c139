"""`vmexplorer compare A B C ...`: any number of sessions, each held against the first.

Two sessions print and write what they always did (`a`, `b`, `ratio`, `a_ns`, `b_ns`, `delta_ns`); every
document also holds each session's values in order (`sessions`, `values`, `ratios`, `ns`, `deltas_ns`), and
the table gains a column per session. A file that is not a session ends it in one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmexplorer.cli import main
from vmexplorer.graph import build_graph
from vmexplorer.session import load_session
from vmexplorer.session.compare import per_op_ns

SMALL = ["--model", "resnet18", "--batch", "8", "--image-size", "64", "--capacity", "50%"]


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("many")
    paths = []
    for policy in ("uvm", "belady", "autovm"):
        paths.append(folder / f"{policy}.vms")
        assert main(["simulate", *SMALL, "--policy", policy, "--out", str(paths[-1]), "--format", "json"]) == 0
    other = folder / "alexnet.vms"  # another graph: lined up by layer
    assert main(["simulate", "--model", "vgg11", "--batch", "4", "--image-size", "64", "--capacity", "90%",
                 "--policy", "belady", "--out", str(other), "--format", "json"]) == 0
    return [*paths, other]


def compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["compare", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_three_sessions_are_each_held_against_the_first(three: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = compare(capsys, *map(str, three[:3]), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert [s["path"] for s in doc["sessions"]] == [str(p) for p in three[:3]]
    assert (doc["a"], doc["b"]) == (doc["sessions"][0], doc["sessions"][1])
    sessions = [load_session(p) for p in three[:3]]
    it = doc["summary"]["iteration_ns"]
    assert it["values"] == [s.summary["iteration_ns"] for s in sessions]
    assert it["ratios"] == [pytest.approx(v / it["values"][0]) for v in it["values"][1:]]
    assert (it["a"], it["b"], it["ratio"]) == (it["values"][0], it["values"][1], it["ratios"][0])
    assert doc["aligned_by"] == "op" and len(doc["rows"]) == len(build_graph("resnet18", 8, 64).ops)
    per_op = [per_op_ns(s).round().astype(int).tolist() for s in sessions]  # each op's time, worked out apart
    for i, row in enumerate(doc["rows"]):
        assert row["ns"] == [p[i] for p in per_op]
        assert row["deltas_ns"] == [p[i] - per_op[0][i] for p in per_op[1:]]
        assert (row["a_ns"], row["b_ns"], row["delta_ns"]) == (row["ns"][0], row["ns"][1], row["deltas_ns"][0])


def test_the_table_has_a_column_per_session_and_a_ratio_to_the_first(
        three: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = compare(capsys, *map(str, three[:3]), "--top", "3")
    assert code == 0, err
    lines = out.splitlines()
    assert [line[:3] for line in lines[:3]] == ["A: ", "B: ", "C: "]
    head = next(line for line in lines if line.startswith("key"))
    assert head.split() == ["key", "A", "B", "C", "B/A", "C/A"]
    assert any(line.split()[:1] == ["op"] and line.split()[-2:] == ["b-a_ns", "c-a_ns"] for line in lines)


def test_two_sessions_print_as_they_always_did(three: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = compare(capsys, str(three[0]), str(three[1]), "--top", "2")
    assert code == 0
    assert next(line for line in out.splitlines() if line.startswith("key")).split() == ["key", "A", "B", "B/A"]
    assert any(line.split()[-1:] == ["delta_ns"] for line in out.splitlines())
    assert "C:" not in out and "C/A" not in out


def test_sessions_of_other_graphs_line_up_by_layer(three: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = compare(capsys, str(three[1]), str(three[2]), str(three[3]), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["aligned_by"] == "layer"
    rows = {r["name"]: r for r in doc["rows"]}
    assert rows["layer1.0.conv1"]["ns"][2] is None and rows["layer1.0.conv1"]["deltas_ns"] == [
        rows["layer1.0.conv1"]["ns"][1] - rows["layer1.0.conv1"]["ns"][0], None]
    assert rows["features.0"]["ns"][:2] == [None, None] and rows["features.0"]["deltas_ns"] == [None, None]


@pytest.mark.parametrize("files, says", [
    (["{0}"], "compare takes 2 to 26 session files, not 1"),
    (["{0}", "{tmp}/missing.vms", "{1}"], "missing.vms"),
    (["{0}", "{1}", "{tmp}/garbage.vms"], "garbage.vms is not a vmexplorer session"),
])
def test_a_bad_file_or_count_is_one_line_and_exit_2(three: list[Path], tmp_path: Path, files: list[str], says: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "garbage.vms").write_bytes(b"not a session")
    argv = [f.format(*three, tmp=tmp_path) for f in files]
    code, out, err = compare(capsys, *argv)
    assert (code, out) == (2, "") and err.count("\n") == 1 and says in err, err


def test_a_page_draws_every_session_s_typical_iteration_on_one_time_scale(
        three: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "three.html"
    code, out, err = compare(capsys, *map(str, three[:3]), "--html", str(page), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["html"] == str(page)
    html = page.read_text()
    policies = [load_session(p).plan.policy for p in three[:3]]
    for label, policy in zip("ABC", policies):
        assert f"{label}: {policy} on resnet18, simulated, its typical iteration" in html
    assert "<script src=" not in html  # Bokeh inline: it opens from a file, offline
    # an existing page is kept unless --force says to replace it
    code, _, err = compare(capsys, *map(str, three[:2]), "--html", str(page))
    assert code == 2 and "exists" in err and page.read_text() == html
