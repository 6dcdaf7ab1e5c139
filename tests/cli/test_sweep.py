"""`vmexplorer sweep`: what a script reading its rows may rely on (docs/cli.md), checked in-process on a
small graph (ResNet-18 b8 at 64 px, AlexNet b8 at 64 px), each point's figures held to `simulate`'s."""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from vmexplorer.cli import UsageError, main, sweep
from vmexplorer.graph import build_graph

SMALL = ["--model", "resnet18:8", "--image-size", "64"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def rows_of(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_capacity_ranges_run_from_a_to_b_inclusive_by_their_step() -> None:
    items = sweep.parse_capacities("45%..60%:5%, 1GiB ,2GiB..3GiB:512MiB,7%..8%:0.5%")
    assert items == [("share", Decimal(45)), ("share", Decimal(50)), ("share", Decimal(55)), ("share", Decimal(60)),
                     ("bytes", 2**30), ("bytes", 2 * 2**30), ("bytes", 5 * 2**29), ("bytes", 3 * 2**30),
                     ("share", Decimal(7)), ("share", Decimal("7.5")), ("share", Decimal(8))]


def test_shares_are_taken_of_each_models_footprint_and_each_capacity_once() -> None:
    graph = build_graph("resnet18", 8, 64)
    got = sweep.capacities_for(sweep.parse_capacities("50%,50%,100%"), graph)
    assert got == [graph.footprint // 2, graph.footprint]


@pytest.mark.parametrize("spec", ["60%..45%:5%", "45%..60%", "45%..2GiB:5%", "45%..60%:0%", "lots..more:1",
                                  "1%..1000%:0.001%", "45%,,50%", "45%..60%:1e400%"])
def test_a_bad_capacity_list_is_one_line_and_exit_2(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sweep", *SMALL, "--policy", "uvm", "--capacity", spec)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("vmexplorer: error: --capacity")


@pytest.mark.parametrize("argv,says", [
    (["--model", "resnet18", "--policy", "uvm"], "has no batch"),
    (["--model", "resnet99:8", "--policy", "uvm"], "unknown model"),
    (["--model", "resnet18:0", "--policy", "uvm"], "positive integer"),
    ([*SMALL, "--policy", "uvm,best"], "unknown policy 'best'"),
    ([*SMALL, "--policy", "uvm", "--mechanism", "uvm,fast"], "unknown mechanism 'fast'"),
    ([*SMALL, "--policy", "uvm", "--jobs", "0"], "--jobs"),
])
def test_bad_models_policies_mechanisms_and_jobs_are_one_line_and_exit_2(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sweep", *argv, "--capacity", "50%")
    assert code == 2 and err.count("\n") == 1 and says in err


def test_each_row_holds_the_figures_simulate_reports_for_its_point(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    code, out, _ = run(capsys, "sweep", *SMALL, "--policy", "belady,autovm", "--mechanism", "uvm,swap",
                       "--capacity", "40%,70%", "--jobs", "1")
    assert code == 0
    rows = rows_of(out)
    assert [(r["policy"], r["mechanism"], r["capacity_pct"]) for r in rows] == [
        (p, m, c) for p in ("belady", "autovm") for m in ("uvm", "swap") for c in ("40.0", "70.0")]
    for row in rows:
        _, doc, _ = run(capsys, "simulate", "--model", "resnet18", "--batch", "8", "--image-size", "64",
                        "--policy", row["policy"], "--mechanism", row["mechanism"], "--capacity",
                        row["capacity_bytes"], "--out", str(tmp_path / "s.vms"), "--force", "--format", "json")
        simulated = json.loads(doc)
        s, b = simulated["summary"], simulated["bound"]
        expected = {"iteration_ns": s["iteration_ns"], "bound_ns": b["lower_bound_ns"],
                    "bytes_to_device": s["bytes_to_device"], "bytes_to_host": s["bytes_to_host"],
                    "bound_bytes_to_device": b["min_bytes_to_device"], "bound_bytes_to_host": b["min_bytes_to_host"],
                    "stall_ns": s["stall_ns"], "fault_bytes": s["fault_bytes"], "peak_bytes": s["peak_resident_bytes"]}
        assert {k: int(row[k]) for k in expected} == expected, row
        assert row["note"] == "" and (row["pool_bytes"] == "") == (row["mechanism"] == "uvm")


def test_capacities_below_the_least_are_rows_with_a_note_and_no_figures(capsys: pytest.CaptureFixture[str]) -> None:
    need, _ = build_graph("resnet18", 8, 64).min_capacity
    code, out, err = run(capsys, "sweep", *SMALL, "--policy", "belady", "--capacity", "5%,10%,50%", "--jobs", "1")
    assert code == 0
    rows = rows_of(out)
    assert [r["note"] for r in rows] == [f"skipped: below the least capacity ({need} bytes)"] * 2 + [""]
    assert all(r["iteration_ns"] == "" for r in rows[:2]) and rows[2]["iteration_ns"]
    assert err.count("vmexplorer: note:") == 1 and "are skipped: 5%, 10%" in err


def test_a_policy_that_refuses_a_point_is_a_row_holding_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sweep", *SMALL, "--policy", "device,uvm", "--mechanism", "uvm,swap",
                       "--capacity", "50%,100%", "--jobs", "1")
    assert code == 0
    notes = {(r["policy"], r["mechanism"], r["capacity_pct"]): r["note"] for r in rows_of(out)}
    assert notes[("device", "uvm", "50.0")].startswith("refused: the device policy needs the whole footprint")
    assert notes[("device", "uvm", "100.0")] == "" and notes[("uvm", "uvm", "50.0")] == ""
    assert notes[("uvm", "swap", "50.0")].startswith("refused: the uvm policy runs under uvm only")


def test_rows_come_in_one_order_whatever_the_number_of_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "--model", "alexnet:8,resnet18:8", "--image-size", "64", "--policy", "belady,uvm",
            "--mechanism", "uvm,swap", "--capacity", "70%..95%:25%"]
    one = run(capsys, *argv, "--jobs", "1")
    two = run(capsys, *argv, "--jobs", "2")
    assert one[0] == two[0] == 0 and one[1] == two[1]
    assert len(rows_of(one[1])) == 2 * 2 * 2 * 2


def test_json_rows_hold_integer_nanoseconds_and_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sweep", *SMALL, "--policy", "belady", "--capacity", "5%,50%", "--format", "json",
                       "--jobs", "1")
    doc = json.loads(out)
    assert code == 0 and doc["columns"] == list(sweep.COLUMNS) and doc["cost_model"] == "h100-uncalibrated"
    skipped, row = doc["rows"]
    assert skipped["iteration_ns"] is None and skipped["note"].startswith("skipped")
    assert all(type(row[k]) is int for k in sweep.COLUMNS if k.endswith(("_ns", "_bytes")) and k != "pool_bytes")
    assert row["capacity_pct"] == 50.0


def test_out_is_written_whole_once_every_point_is_done(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "sweep.csv"
    code, stdout, _ = run(capsys, "sweep", *SMALL, "--policy", "belady", "--capacity", "50%", "--out", str(out))
    assert code == 0 and stdout.startswith(f"wrote {out}: 1 points")
    assert rows_of(out.read_text())[0]["policy"] == "belady"
    code, _, err = run(capsys, "sweep", *SMALL, "--policy", "belady", "--capacity", "60%", "--out", str(out))
    assert code == 2 and "exists; pass --force" in err  # refused before the work
    code, _, err = run(capsys, "sweep", *SMALL, "--policy", "belady", "--capacity", "60%", "--out",
                       str(tmp_path / "no" / "sweep.csv"))
    assert code == 2 and "the folder" in err and "does not exist" in err


def test_a_sweep_that_fails_leaves_no_partial_file_and_keeps_the_one_there(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "sweep.csv"
    out.write_text("the last sweep\n")
    calls = []

    def interrupted(point: sweep.Point, cost: object) -> sweep.Row:
        calls.append(point)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {c: None for c in sweep.COLUMNS}

    monkeypatch.setattr(sweep, "point_row", interrupted)
    code, _, err = run(capsys, "sweep", *SMALL, "--policy", "belady,autovm", "--capacity", "50%", "--jobs", "1",
                       "--out", str(out), "--force")
    assert code == 130 and "interrupted" in err
    assert out.read_text() == "the last sweep\n" and [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]


def test_the_progress_bar_goes_to_stderr_when_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "sweep", *SMALL, "--policy", "uvm", "--capacity", "50%,60%", "--progress",
                         "--jobs", "1")
    assert code == 0 and "sweep" not in out
    assert re.fullmatch(r"\rsweep \[#{15}\.{15}\] 1/2 points \d+ s\rsweep \[#{30}\] 2/2 points \d+ s\n", err)
    _, _, quiet = run(capsys, "sweep", *SMALL, "--policy", "uvm", "--capacity", "50%", "--jobs", "1")
    assert quiet == ""  # stderr is no terminal here


@pytest.mark.parametrize("command", [["plan"], ["simulate", "--out", "{tmp}/s.vms"], ["run", "--out", "{tmp}/r.vms"]])
def test_a_bare_capacity_below_the_least_asks_whether_a_share_was_meant(
        command: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    need, _ = build_graph("vgg19", 64).min_capacity
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    code, _, err = run(capsys, argv[0], "--model", "vgg19", "--batch", "64", "--capacity", "50", "--policy", "uvm",
                       *argv[1:])
    assert code == 2 and err.count("\n") == 1
    assert "--capacity 50: 50 bytes? did you mean 50%?" in err and f"({need} bytes, 36.8% of its footprint)" in err
    assert list(tmp_path.iterdir()) == []


def test_sweep_asks_the_same_of_a_bare_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "sweep", "--model", "vgg19:64", "--policy", "uvm", "--capacity", "50")
    assert code == 2 and "--capacity 50: 50 bytes? did you mean 50%?" in err
    with pytest.raises(UsageError, match="3000 bytes is too few"):
        sweep.capacities_for(sweep.parse_capacities("3000"), build_graph("vgg19", 64))
