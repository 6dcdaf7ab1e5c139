"""The `vmexplorer` command line: what scripts may rely on (docs/cli.md), checked in-process.

Every bad input is one line on stderr and exit status 2; JSON is valid and keyed as documented;
session files written by `simulate` open in `info`, `compare` and `export`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vmexplorer import cli
from vmexplorer.cli import main, tables
from vmexplorer.fileio import OutputError, atomic_write, refuse_unless_replaceable
from vmexplorer.graph import MODELS, build_graph
from vmexplorer.units import MAX_BYTES, parse_bytes

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
    "a run longer than a session holds": ["run", "--model", "resnet152", "--batch", "8", "--capacity", "50%",
                                          "--policy", "uvm", "--iterations", "1000", "--out", "{tmp}/big.vms"],
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
    "cost model from a missing file": ["plan", *HALF, "--policy", "uvm", "--cost-model", "{tmp}/missing.vms"],
    "cost model from a folder": ["plan", *HALF, "--policy", "uvm", "--cost-model", "{tmp}"],
    "cost model from a garbage file": ["plan", *HALF, "--policy", "uvm", "--cost-model", "{tmp}/garbage.vms"],
    "cost model from a moves file": ["plan", *HALF, "--policy", "uvm", "--cost-model", "{tmp}/moves.json"],
    "cost model from a simulated session": ["plan", *HALF, "--policy", "uvm", "--cost-model", "{uvm}"],
    "simulate with the cost model of a simulated session": ["simulate", *HALF, "--policy", "uvm", "--out",
                                                            "{tmp}/big.vms", "--cost-model", "{uvm}"],
    "cost model for run, which measures": ["run", *HALF, "--policy", "uvm", "--out", "{tmp}/run.vms",
                                           "--cost-model", "{uvm}"],
    # hostile or mistaken input: each of these was a traceback or a silent success
    "moves file nested 100k deep": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/deep.json"],
    "moves file with a list as an op": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/list-op.json"],
    "moves file with an object as a tensor": ["plan", *HALF, "--policy", "manual", "--moves",
                                              "{tmp}/object-tensor.json"],
    "moves file with true as an op": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/true-op.json"],
    "moves file with a 5000-digit op": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/long-op.json"],
    "moves file with NaN": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/nan.json"],
    "moves file over the size limit": ["plan", *HALF, "--policy", "manual", "--moves", "{tmp}/huge.json"],
    "capacity 1e400": ["plan", *VGG, "--capacity", "1e400", "--policy", "uvm"],
    "capacity 1e19": ["simulate", *VGG, "--capacity", "1e19", "--policy", "uvm", "--out", "{tmp}/big.vms"],
    "capacity 2**63-1": ["simulate", *VGG, "--capacity", "9223372036854775807", "--policy", "uvm",
                         "--out", "{tmp}/big.vms"],
    "capacity above MAX_BYTES in a unit": ["plan", *VGG, "--capacity", "1025TiB", "--policy", "uvm"],
    "capacity inf": ["plan", *VGG, "--capacity", "inf", "--policy", "uvm"],
    "capacity nan": ["plan", *VGG, "--capacity", "nan", "--policy", "uvm"],
    "compare --top negative": ["compare", "{uvm}", "{uvm}", "--top", "-3"],
    "models at a batch no model takes": ["models", "--batch", "0"],
    "simulate --force onto a symbolic link": ["simulate", *HALF, "--policy", "uvm", "--out", "{tmp}/link.vms",
                                              "--force"],
    "simulate --force onto a named pipe": ["simulate", *HALF, "--policy", "uvm", "--out", "{tmp}/fifo",
                                           "--force"],
    "export --force onto a symbolic link": ["export", "{uvm}", "--html", "{tmp}/link.vms", "--force"],
    "calibrate --force onto a named pipe": ["calibrate", "{sample}/vgg19-b64-device.measured.vms",
                                            "--out", "{tmp}/fifo", "--force"],
    "an unknown mechanism": ["plan", *HALF, "--policy", "belady", "--mechanism", "paging"],
    "swap for the uvm policy": ["plan", *HALF, "--policy", "uvm", "--mechanism", "swap"],
    "swap for the device policy": ["simulate", *VGG, "--capacity", "100%", "--policy", "device",
                                   "--mechanism", "swap", "--out", "{tmp}/big.vms"],
}
SAMPLES = REPO / "sample_sessions"


def _scratch_files(tmp: Path) -> None:
    (tmp / "not-json.json").write_text('{"moves": [')
    (tmp / "unknown-tensor.json").write_text('{"moves": [{"tensor": "nope", "offload_after": 1}]}')
    (tmp / "moves.json").write_text('{"moves": [{"tensor": "features.1.out", "offload_after": 2}]}')
    (tmp / "garbage.vms").write_bytes(b"\x1f\x8b\xff\xfe not really gzip")
    (tmp / "exists.html").write_text("keep me")
    (tmp / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp / "list-op.json").write_text('{"moves": [{"tensor": "features.1.out", "offload_after": [2]}]}')
    (tmp / "object-tensor.json").write_text('{"moves": [{"tensor": {"name": "x"}, "offload_after": 2}]}')
    (tmp / "true-op.json").write_text('{"moves": [{"tensor": "features.1.out", "offload_after": true}]}')
    (tmp / "long-op.json").write_text('{"moves": [{"tensor": "features.1.out", "offload_after": %s}]}' % ("9" * 5000))
    (tmp / "nan.json").write_text('{"moves": [{"tensor": "features.1.out", "offload_after": NaN}]}')
    with open(tmp / "huge.json", "wb") as f:
        f.truncate(5 << 20)  # sparse: refused by its size, so its bytes are never read
    (tmp / "link.vms").symlink_to(tmp / "exists.html")
    os.mkfifo(tmp / "fifo")


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
    assert (tmp_path / "link.vms").is_symlink() and (tmp_path / "fifo").is_fifo()
    assert not (tmp_path / "big.vms").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_the_mechanism_is_in_the_plan_the_session_and_every_table(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    plan = run_json(capsys, "plan", *HALF, "--policy", "belady", "--mechanism", "swap")
    assert plan["config"]["mechanism"] == "swap"
    assert {m["mode"] for m in plan["plan"]["memops"]} <= {"async", "sync"}
    assert run_json(capsys, "plan", *HALF, "--policy", "belady")["config"]["mechanism"] == "uvm"
    path = tmp_path / "swap.vms"
    sim = run_json(capsys, "simulate", *HALF, "--policy", "belady", "--mechanism", "swap", "--out", str(path))
    assert sim["config"]["mechanism"] == "swap"
    info = run_json(capsys, "info", str(path))
    assert info["config"]["mechanism"] == "swap" and info["bound"] == sim["bound"]
    code, out, _ = run(capsys, "info", str(path))
    assert code == 0 and "belady --min-bytes 2097152 through swap" in out
    code, out, _ = run(capsys, "plan", *HALF, "--policy", "autovm", "--mechanism", "swap")
    assert code == 0 and "through swap" in out.splitlines()[0]


def test_the_swap_bound_is_below_the_uvm_bound_of_the_same_graph_and_capacity(
        capsys: pytest.CaptureFixture[str]) -> None:
    swap = run_json(capsys, "plan", *HALF, "--policy", "belady", "--mechanism", "swap")["bound"]
    uvm = run_json(capsys, "plan", *HALF, "--policy", "belady")["bound"]
    assert swap["min_bytes_to_host"] == uvm["min_bytes_to_host"]
    assert swap["lower_bound_ns"] < uvm["lower_bound_ns"]


def test_capacity_below_minimum_names_the_op_and_the_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    need, op = build_graph("vgg19", 64).min_capacity  # with the smallest workspaces: they shrink with the room
    _, _, err = run(capsys, "plan", *VGG, "--capacity", "1MiB", "--policy", "autovm")
    assert build_graph("vgg19", 64).ops[op].name in err
    assert str(need) in err


# --- untrusted input: what a shared file, a file name or a typo can hold ----------------------------
def _moves(tmp_path: Path, *moves: str) -> str:
    path = tmp_path / "moves.json"
    path.write_text('{"moves": [' + ", ".join(moves) + "]}")  # as written: 1e400 must reach the parser
    return str(path)


@pytest.mark.parametrize("move,spelled", [
    ('{"tensor": null, "offload_after": 2}', "not null"),
    ('{"tensor": true, "offload_after": 2}', "not true"),
    ('{"tensor": "features.1.out", "offload_after": false}', "not false"),
    ('{"tensor": "features.1.out", "offload_after": 2, "prefetch_after": true}', "not true"),
    ('{"tensor": "features.1.out", "offload_after": [2, null]}', "not [2, null]"),
    ('{"tensor": "features.1.out", "offload_after": 1e400}', "not 1e400"),
])
def test_moves_errors_spell_values_as_the_json_file_does(move: str, spelled: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", *HALF, "--policy", "manual", "--moves", _moves(tmp_path, move))
    assert code == 2 and spelled in err, err
    assert not re.search(r"\b(None|True|False|inf)\b", err)  # Python's spelling, not the file's


def test_an_offload_before_the_iteration_start_is_refused_with_the_range_from_minus_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    last = len(build_graph("vgg19", 64).ops) - 1
    code, _, err = run(capsys, "plan", *HALF, "--policy", "manual", "--moves",
                       _moves(tmp_path, '{"tensor": "features.1.out", "offload_after": -2}'))
    assert code == 2 and f"offload_after -2 is not an op (-1..{last}" in err


def test_a_moves_file_over_the_limit_is_refused_by_its_size_naming_the_limit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(64 << 20)  # sparse: reading it whole would cost 64 MiB of memory for nothing
    code, _, err = run(capsys, "plan", *HALF, "--policy", "manual", "--moves", str(path))
    assert code == 2 and str(64 << 20) in err and "4.00 MiB" in err


def test_sizes_are_read_exactly_and_refused_beyond_max_bytes() -> None:
    assert parse_bytes("4.1GB") == 4_100_000_000  # through a float, 4099999999
    assert parse_bytes(str(MAX_BYTES)) == parse_bytes("1024TiB") == MAX_BYTES
    for text in (str(MAX_BYTES + 1), "9223372036854775807", "1e19", "1e400", "1e999999999", "1025TiB"):
        with pytest.raises(ValueError, match=r"is more than 1024.00 TiB \(1125899906842624 bytes\)"):
            parse_bytes(text)
    for text in ("inf", "nan", "Infinity", "-1"):
        with pytest.raises(ValueError, match="not a size: write a finite number of bytes"):
            parse_bytes(text)


# Characters a terminal acts on, in a note, a path, a name: ESC sequences (OSC retitles the window or
# writes the clipboard), BEL, one-byte CSI, DEL, bidi overrides and isolates, a line separator, a lone
# surrogate (which no encoder takes), a tab and a newline (which would break a table's layout).
HOSTILE = ("osc\x1b]0;pwned\x07 csi\x9b2J del\x7f rlo\u202e iso\u2066 ls\u2028 lone\ud800 tab\t nl\n "
           "nel\x85 alm\u061c.")
ESCAPED = (r"osc\x1b]0;pwned\x07 csi\x9b2J del\x7f rlo\u202e iso\u2066 ls\u2028 lone\ud800 tab\x09 nl\x0a "
           r"nel\x85 alm\u061c.")


def _unsafe(text: str) -> list[str]:
    """What a terminal would act on: everything below space but the newline, DEL, C1, bidi controls,
    separators, surrogates (an oracle written apart from the CLI's own list)."""
    bidi = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029}
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or ord(c) in bidi
            or 0xD800 <= ord(c) <= 0xDFFF]


def _hostile_docs() -> dict[str, tuple[str, dict]]:
    config = {"model": HOSTILE, "batch": 1, "image_size": 224, "policy": HOSTILE, "capacity_bytes": 2**30,
              "options": {HOSTILE: HOSTILE}}
    summary = {"source": HOSTILE, "iteration_ns": 5, HOSTILE: HOSTILE}
    bound = {"min_bytes_to_host": 1, "min_bytes_to_device": 2, "lower_bound_ns": 3, "set_by": HOSTILE}
    rates = {"prefetch_bytes_per_ns": 1.0, "evict_bytes_per_ns": 1.0, "fault_bytes_per_ns": 1.0, "host_block": 1.0,
             "fault_bytes_per_ns_by_kind": {HOSTILE: 1.0}}
    return {
        "info": ("info", {"path": HOSTILE, "config": config, "created": HOSTILE, "cost_model": HOSTILE,
                          "environment": {HOSTILE: HOSTILE}, "notes": [HOSTILE], "summary": summary,
                          "bound": bound, "bound_stored": False, "bound_cost_model": HOSTILE}),
        "environment as a string": ("info", {"path": "s", "config": config, "created": "c", "cost_model": None,
                                             "environment": HOSTILE, "notes": [], "summary": {}, "bound": None,
                                             "bound_stored": False, "bound_cost_model": "-"}),
        "compare": ("compare", {"a": {"path": HOSTILE, "config": config}, "b": {"path": HOSTILE, "config": config},
                                "summary": {HOSTILE: {"a": HOSTILE, "b": 1, "ratio": None}}, "aligned_by": "op",
                                "rows": [{"name": HOSTILE, "a_ns": 1, "b_ns": 2, "delta_ns": 1},
                                         {"name": HOSTILE, "a_ns": None, "b_ns": 2, "delta_ns": None}]}),
        "simulate": ("simulate", {"path": HOSTILE, "config": config, "summary": summary, "bound": bound,
                                  "notes": [HOSTILE]}),
        "calibrate": ("calibrate", {"path": HOSTILE, "config": config, "cost_model": HOSTILE, "rates": rates,
                                    "not_fitted": [], "ops_timed": 3, "measured_iteration_ns": 5,
                                    "simulated_iteration_ns": 5, "bound": bound}),
        "export": ("export", {"path": HOSTILE, "format": "html", "source": HOSTILE}),
    }


@pytest.mark.parametrize("case", _hostile_docs())
def test_every_table_shows_control_characters_escaped(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    command, doc = _hostile_docs()[case]
    table = {"info": cli.table_info, "simulate": cli.table_simulate, "calibrate": cli.table_calibrate,
             "export": cli.table_export, "compare": None}[command]
    tables._emit(argparse.Namespace(format="table", command=command, table=table, top=0), doc)
    out = capsys.readouterr().out
    assert not _unsafe(out), _unsafe(out)
    assert ESCAPED in out or ESCAPED.replace("\\x0a", " ") in out


def test_a_session_note_and_file_name_are_shown_escaped_in_info_and_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    note = HOSTILE.replace("\ud800", "")  # a session cannot even be saved with a lone surrogate
    path = tmp_path / "s\x1b]0;pwned\x07.vms"
    assert run(capsys, "simulate", *HALF, "--policy", "uvm", "--out", str(path), "--note", note)[0] == 0
    code, out, err = run(capsys, "info", str(path))
    assert code == 0 and not _unsafe(out + err)
    assert ESCAPED.replace("lone\\ud800 ", "lone ") in out and r"s\x1b]0;pwned\x07.vms" in out
    code, out, err = run(capsys, "info", str(tmp_path / "missing\x1b[2J\u202e.vms"))
    assert code == 2 and err.count("\n") == 1 and not _unsafe(err)
    assert r"missing\x1b[2J\u202e.vms" in err


def test_force_replaces_only_regular_files(tmp_path: Path) -> None:
    keep = tmp_path / "keep.txt"
    keep.write_text("keep me")
    link, fifo = tmp_path / "link", tmp_path / "fifo"
    link.symlink_to(keep)
    os.mkfifo(fifo)
    for target, kind in ((link, "a symbolic link"), (fifo, "a named pipe"), (tmp_path, "a folder")):
        with pytest.raises(OutputError, match=kind):
            atomic_write(target, b"new", force=True)
    with pytest.raises(OutputError, match=r"/dev/null exists and is a device, not a regular file"):
        refuse_unless_replaceable("/dev/null", force=True)  # checked without writing: as root it would be replaced
    assert link.is_symlink() and fifo.is_fifo() and keep.read_text() == "keep me"
    atomic_write(keep, b"new", force=True)
    assert keep.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "keep.txt", "link"]  # no .partial left


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


def test_run_with_no_gpu_says_so_before_tuned_searches(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here; the no-GPU path is for machines without it")
    except ImportError:
        pass
    from vmexplorer.policies import tuned

    def search(*args: object, **kwargs: object) -> None:
        raise AssertionError("tuned searched for a run that cannot happen")

    monkeypatch.setattr(tuned, "tune", search)
    code, _, err = run(capsys, "run", *HALF, "--policy", "tuned", "--out", str(tmp_path / "run.vms"))
    assert code == 2 and "needs CuPy" in err and not (tmp_path / "run.vms").exists()


def test_a_run_longer_than_a_session_holds_is_refused_before_the_gpu_works(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vmexplorer.engine import executor, gpu

    def execute(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(gpu, "cupy", lambda: None)  # a GPU, as far as the check goes
    monkeypatch.setattr(executor, "execute", execute)
    code, _, err = run(capsys, "run", "--model", "resnet152", "--batch", "8", "--capacity", "50%", "--policy", "uvm",
                       "--iterations", "1000", "--out", str(tmp_path / "big.vms"))
    assert code == 2 and "would not fit in one session" in err and not (tmp_path / "big.vms").exists()


@pytest.mark.parametrize("given, discard", [((), False), (("--dead-pages", "keep"), False),
                                             (("--dead-pages", "discard"), True)])
def test_run_keeps_dead_pages_on_the_device_unless_told_to_discard_them(
        given: tuple[str, ...], discard: bool, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vmexplorer.engine import executor, gpu

    seen = []

    def execute(graph: object, plan: object, settings: executor.RunSettings, **kwargs: object) -> None:
        seen.append(settings.discard)
        raise OSError("stopped where the GPU would start")

    monkeypatch.setattr(gpu, "cupy", lambda: None)  # a GPU, as far as the checks before the run go
    monkeypatch.setattr(executor, "execute", execute)
    code, _, err = run(capsys, "run", *HALF, "--policy", "belady", *given, "--out", str(tmp_path / "run.vms"))
    assert seen == [discard] and code == 2 and "stopped where the GPU would start" in err
    assert not (tmp_path / "run.vms").exists()


def test_run_refuses_an_unknown_way_with_dead_pages(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "run", *HALF, "--policy", "belady", "--dead-pages", "evict",
                       "--out", str(tmp_path / "run.vms"))
    assert code == 2 and "--dead-pages" in err and not (tmp_path / "run.vms").exists()


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


def test_calibrate_works_the_bound_out_again_with_the_new_rates(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    from vmexplorer.session import load_session, save_session
    from vmexplorer.simulator.bound import Bound, lower_bound

    stale = tmp_path / "stale.vms"  # a bound worked out with other rates, which calibration must not keep
    save_session(dataclasses.replace(load_session(SAMPLES / "vgg19-b64-uvm-50pct.measured.vms"),
                                     bound=Bound(1, 1, 1, "compute")), stale)
    out = tmp_path / "calibrated.vms"
    doc = run_json(capsys, "calibrate", str(stale), "--device", str(SAMPLES / "vgg19-b64-device.measured.vms"),
                   "--out", str(out))
    session = load_session(out)
    expected = lower_bound(session.graph, session.plan.capacity, session.cost_model)
    assert session.bound == expected and doc["bound"] == expected.as_json()
    code, table, _ = run(capsys, "calibrate", str(stale), "--device", str(SAMPLES / "vgg19-b64-device.measured.vms"),
                         "--out", str(out), "--force")
    ratio = doc["measured_iteration_ns"] / expected.lower_bound_ns
    assert code == 0 and f"the measured iteration is {ratio:.1f}x the bound, set by {expected.set_by}" in table


def test_info_holds_the_session_against_its_bound(sessions: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    from vmexplorer.session import load_session, save_session
    from vmexplorer.simulator import H100_DEFAULT
    from vmexplorer.simulator.bound import lower_bound
    from vmexplorer.units import format_ns

    simulated = load_session(sessions["autovm"])
    doc = run_json(capsys, "info", str(sessions["autovm"]))
    assert doc["bound"] == simulated.bound.as_json() and doc["bound_stored"] is True
    code, table, _ = run(capsys, "info", str(sessions["autovm"]))
    ratio = simulated.summary["iteration_ns"] / simulated.bound.lower_bound_ns
    assert code == 0 and (f"lower bound {format_ns(simulated.bound.lower_bound_ns)}, set by migration bandwidth"
                          in table) and f"this simulated iteration is {ratio:.1f}x it" in table
    # a file with no bound stored (older than the bound) gets one worked out under its cost model, and says so
    bare = tmp_path / "bare.vms"
    measured = load_session(SAMPLES / "vgg19-b64-uvm-50pct.measured.vms")
    save_session(dataclasses.replace(measured, bound=None), bare)
    doc = run_json(capsys, "info", str(bare))
    expected = lower_bound(measured.graph, measured.plan.capacity, measured.cost_model)
    assert (doc["bound"], doc["bound_stored"], doc["bound_cost_model"]) == (expected.as_json(), False,
                                                                            measured.cost_model.name)
    code, table, _ = run(capsys, "info", str(bare))
    ratio = measured.summary["iteration_ns"] / expected.lower_bound_ns
    assert f"this measured iteration is {ratio:.1f}x it" in table and "worked out now" in table
    # a measured one with no cost model has no bound: the default is another GPU's (an H100's, uncalibrated)
    save_session(dataclasses.replace(measured, cost_model=None, bound=None), bare, force=True)
    doc = run_json(capsys, "info", str(bare))
    assert (doc["bound"], doc["bound_cost_model"]) == (None, None)
    code, table, _ = run(capsys, "info", str(bare))
    assert code == 0 and "lower bound: none (no cost model of the GPU it ran on" in table
    assert H100_DEFAULT.name not in table


def test_calibrating_a_device_run_says_its_transfer_rates_were_not_fitted_and_times_are_integers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    device = str(SAMPLES / "vgg19-b64-device.measured.vms")
    doc = run_json(capsys, "calibrate", device, "--out", str(tmp_path / "c.vms"))
    assert type(doc["measured_iteration_ns"]) is int and type(doc["simulated_iteration_ns"]) is int
    assert doc["not_fitted"] == ["prefetch_bytes_per_ns", "evict_bytes_per_ns", "fault_bytes_per_ns", "host_block"]
    code, out, _ = run(capsys, "calibrate", device, "--out", str(tmp_path / "c.vms"), "--force")
    assert code == 0 and "not fitted: the run moved nothing" in out and "GB/s" not in out


def test_calibrating_a_swap_run_reports_the_copy_rates_it_fitted(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    swap = str(SAMPLES / "h200-vgg19-b64-belady-swap-50pct.measured.vms")
    device = ("--device", str(SAMPLES / "h200-vgg19-b64-device.measured.vms"))
    doc = run_json(capsys, "calibrate", swap, *device, "--out", str(tmp_path / "c.vms"))
    assert not {"swap_to_device_bytes_per_ns", "swap_to_host_bytes_per_ns"} & set(doc["not_fitted"])
    code, out, _ = run(capsys, "calibrate", swap, *device, "--out", str(tmp_path / "c.vms"), "--force")
    into = doc["rates"]["swap_to_device_bytes_per_ns"]
    assert code == 0 and f"copies in {into:.1f} GB/s" in out and "moved nothing" not in out


H200_PLANS = REPO / "bench" / "results" / "h200" / "conv_plans.json"


def test_calibrating_with_the_gpus_timed_plans_times_each_convolution_by_its_workspace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    swap = str(SAMPLES / "h200-vgg19-b64-belady-swap-90pct.measured.vms")
    device = ("--device", str(SAMPLES / "h200-vgg19-b64-device.measured.vms"))
    plain = run_json(capsys, "calibrate", swap, *device, "--out", str(tmp_path / "a.vms"))
    timed = run_json(capsys, "calibrate", swap, *device, "--conv-plans", str(H200_PLANS),
                     "--out", str(tmp_path / "b.vms"))
    assert plain["ops_timed_by_workspace"] == 0 and timed["ops_timed_by_workspace"] > 0
    from vmexplorer.graph import Kind
    from vmexplorer.session import load_session
    from vmexplorer.simulator import simulate

    session, with_plans = load_session(swap), load_session(tmp_path / "b.vms").cost_model
    without = load_session(tmp_path / "a.vms").cost_model
    assert with_plans is not None and without is not None and with_plans.workspace_ns
    # timed by the workspaces the sample's run had, the model is no further from its measurement
    measured = timed["measured_iteration_ns"]
    assert abs(timed["simulated_iteration_ns"] - measured) <= abs(plain["simulated_iteration_ns"] - measured)
    # and a run giving its convolutions almost no workspace is simulated slower under it, the same without
    g = session.graph.sized_for(session.plan.planned_with)
    starved = g.with_workspaces({t: 4096 for t, x in enumerate(g.tensors)
                                 if x.kind is Kind.WORKSPACE and g.workspace_bytes[x.producer]})
    (timed_ran, timed_short), (plain_ran, plain_short) = (
        (simulate(g, session.plan, m).iteration_ns().max(), simulate(g, session.plan, m, starved).iteration_ns().max())
        for m in (with_plans, without))
    assert timed_short > timed_ran and plain_short == plain_ran
    code, out, _ = run(capsys, "calibrate", swap, *device, "--conv-plans", str(H200_PLANS),
                       "--out", str(tmp_path / "b.vms"), "--force")
    assert code == 0 and "convolutions timed by their workspace" in out


@pytest.mark.parametrize("table, says", [
    ("not json", "cannot be read as JSON"),
    ('{"models": 3}', 'has no "models" list'),
    ('{"models": [{"model": "alexnet", "batch": 256, "problems": []}]}', "holds no plans of vgg19 batch 64"),
    ('{"models": [{"model": "vgg19", "batch": 64, "problems": [{"ops": [99999], "plans": []}]}]}',
     'its "ops" should be op indices'),
    ('{"models": [{"model": "vgg19", "batch": 64, "problems": [{"ops": [0], "plans": [{"index": 0, '
     '"workspace_bytes": -1, "ms": 1.0}]}]}]}', 'each plan should have a whole "index"'),
])
def test_a_table_of_plans_that_does_not_fit_is_one_line_and_exit_2(
        table: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plans = tmp_path / "<b>plans.json"
    plans.write_text(table)
    device = str(SAMPLES / "h200-vgg19-b64-device.measured.vms")
    code, out, err = run(capsys, "calibrate", device, "--conv-plans", str(plans), "--out", str(tmp_path / "c.vms"))
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and out == ""
    assert not (tmp_path / "c.vms").exists()


def test_help_lists_the_choices_of_policy_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--help")
    assert code == 0
    assert "--offload {needed,all}" in out and "--tensors {activations,all}" in out


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("vmexplorer ")
    for command in ("models", "graph", "plan", "simulate", "info", "compare", "export", "run", "serve"):
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


def test_models_at_a_size_some_cannot_take_lists_the_others_and_says_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "models", "--image-size", "32", "--batch", "2")
    assert [m["name"] for m in doc["models"]] == [m for m in MODELS if m != "alexnet"]
    [(name, reason)] = [(u["name"], u["reason"]) for u in doc["unavailable"]]
    assert name == "alexnet" and "image size 32 is too small" in reason
    code, out, _ = run(capsys, "models", "--image-size", "32", "--batch", "2")
    assert code == 0 and "vgg19" in out and "alexnet: image size 32 is too small" in out


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
        assert set(doc["plan"]) == {"peak_resident_bytes", "room_bytes", "resident_at_start", "memops", "moves",
                                    "recomputes"}
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


def test_manual_policy_without_moves_notes_that_the_plan_is_uvms(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", *HALF, "--policy", "manual", "--format", "json")
    assert code == 0 and err.startswith("vmexplorer: note: --policy manual without --moves")
    assert json.loads(out)["plan"] == run_json(capsys, "plan", *HALF, "--policy", "uvm")["plan"]


def test_plan_table_shows_summary_and_memops(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", *HALF, "--policy", "autovm")
    assert code == 0
    assert "iteration_ns" in out and "to_host" in out and "features.1.out" in out


# --- the bound and --cost-model -----------------------------------------------------------------
def test_plan_and_simulate_hold_the_plan_against_the_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vmexplorer.session import load_session
    from vmexplorer.simulator import H100_DEFAULT
    from vmexplorer.simulator.bound import lower_bound

    graph = build_graph("vgg19", 64)
    expected = lower_bound(graph, graph.footprint // 2, H100_DEFAULT)
    planned = run_json(capsys, "plan", *HALF, "--policy", "autovm")
    assert planned["bound"] == expected.as_json() and planned["bound"]["set_by"] == "migration bandwidth"
    assert 0 < planned["bound"]["lower_bound_ns"] <= planned["summary"]["iteration_ns"]
    out = tmp_path / "s.vms"
    simulated = run_json(capsys, "simulate", *HALF, "--policy", "autovm", "--out", str(out))
    assert simulated["bound"] == planned["bound"] and simulated["cost_model"] == "h100-uncalibrated"
    assert load_session(out).bound == expected
    code, table, _ = run(capsys, "plan", *HALF, "--policy", "autovm")
    ratio = planned["summary"]["iteration_ns"] / expected.lower_bound_ns
    assert code == 0 and f"the simulated iteration is {ratio:.1f}x the bound, set by migration bandwidth" in table
    code, table, _ = run(capsys, "simulate", *HALF, "--policy", "autovm", "--out", str(out), "--force")
    assert code == 0 and f"{ratio:.1f}x the bound, set by migration bandwidth" in table


def test_at_the_footprint_compute_sets_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "plan", *VGG, "--capacity", "100%", "--policy", "device")
    assert doc["bound"]["set_by"] == "compute" and doc["bound"]["min_bytes_to_device"] == 0


def test_cost_model_takes_a_measured_sessions_calibrated_model(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from vmexplorer.session import load_session
    from vmexplorer.simulator.bound import lower_bound

    sample = SAMPLES / "vgg19-b64-autovm-50pct.measured.vms"
    cost = load_session(sample).cost_model
    graph = build_graph("vgg19", 64)
    doc = run_json(capsys, "plan", *HALF, "--policy", "uvm", "--cost-model", str(sample))
    default = run_json(capsys, "plan", *HALF, "--policy", "uvm")
    assert doc["cost_model"] == cost.name != default["cost_model"]
    assert doc["bound"] == lower_bound(graph, graph.footprint // 2, cost).as_json() != default["bound"]
    assert doc["summary"]["iteration_ns"] != default["summary"]["iteration_ns"]
    out = tmp_path / "c.vms"
    run_json(capsys, "simulate", *HALF, "--policy", "uvm", "--cost-model", str(sample), "--out", str(out))
    assert load_session(out).cost_model == cost


def test_a_cost_model_of_another_graph_lends_its_rates_not_its_op_times(capsys: pytest.CaptureFixture[str]) -> None:
    sample = SAMPLES / "vgg19-b64-autovm-50pct.measured.vms"
    code, out, err = run(capsys, "plan", "--model", "alexnet", "--batch", "256", "--capacity", "50%", "--policy",
                         "uvm", "--cost-model", str(sample), "--format", "json")
    assert code == 0 and "its transfer rates are used" in err and err.startswith("vmexplorer: note: ")
    assert json.loads(out)["cost_model"].endswith("its rates only")


def test_a_measured_session_without_a_cost_model_is_refused_saying_how_to_make_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    from vmexplorer.session import load_session, save_session

    bare = tmp_path / "bare.vms"
    save_session(dataclasses.replace(load_session(SAMPLES / "vgg19-b64-uvm-50pct.measured.vms"), cost_model=None),
                 bare)
    code, out, err = run(capsys, "plan", *HALF, "--policy", "uvm", "--cost-model", str(bare))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "a measured session with no cost model" in err and "vmexplorer calibrate" in err
    code, _, err = run(capsys, "plan", *HALF, "--policy", "uvm", "--cost-model", str(SAMPLES / "none.vms"))
    assert code == 2 and "none.vms" in err


def test_tuned_searches_in_the_simulator_and_reports_how_far_it_ends_from_the_bound(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vmexplorer.session import load_session

    tuned = run_json(capsys, "plan", *HALF, "--policy", "tuned", "--search-steps", "40")
    belady = run_json(capsys, "plan", *HALF, "--policy", "belady")
    # belady is where the search starts: a tuned plan that is belady's is one that was never searched
    assert tuned["plan"]["moves"] != belady["plan"]["moves"]
    assert tuned["summary"]["iteration_ns"] < belady["summary"]["iteration_ns"]
    (report,) = tuned["notes"]
    ratio = tuned["summary"]["iteration_ns"] / tuned["bound"]["lower_bound_ns"]
    assert report.startswith("tuned: from belady") and f"{ratio:.2f}x the lower bound" in report
    assert "of 40 changes kept in" in report and belady["notes"] == []
    def unclocked(text: str) -> str:  # the seconds the search took differ from run to run
        return re.sub(r"in [\d.]+ s", "in - s", text)

    code, table, _ = run(capsys, "plan", *HALF, "--policy", "tuned", "--search-steps", "40")
    assert code == 0 and unclocked(report) in unclocked(table)
    out = tmp_path / "tuned.vms"
    simulated = run_json(capsys, "simulate", *HALF, "--policy", "tuned", "--search-steps", "40", "--out", str(out),
                         "--note", "mine")
    assert [unclocked(n) for n in simulated["notes"]] == [unclocked(report)]
    assert load_session(out).notes == (simulated["notes"][0], "mine")
    assert simulated["summary"]["iteration_ns"] == tuned["summary"]["iteration_ns"]


def test_tuned_searches_with_the_cost_model_it_is_simulated_with(capsys: pytest.CaptureFixture[str]) -> None:
    from vmexplorer.session import load_session
    from vmexplorer.simulator.bound import lower_bound
    from vmexplorer.units import format_ns

    sample = SAMPLES / "vgg19-b64-autovm-50pct.measured.vms"
    graph = build_graph("vgg19", 64)
    calibrated = lower_bound(graph, graph.footprint // 2, load_session(sample).cost_model).lower_bound_ns
    doc = run_json(capsys, "plan", *HALF, "--policy", "tuned", "--search-steps", "20", "--cost-model", str(sample))
    default = run_json(capsys, "plan", *HALF, "--policy", "tuned", "--search-steps", "20")
    assert f"the lower bound ({format_ns(calibrated)})" in doc["notes"][0]
    assert f"({format_ns(calibrated)})" not in default["notes"][0]


# --- sessions: simulate, info, compare, export -----------------------------------------------------
def test_info_shows_config_environment_summary_and_notes(sessions: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "info", str(sessions["autovm"]))
    assert set(doc) == {"path", "config", "created", "cost_model", "environment", "notes", "summary", "bound",
                        "bound_stored", "bound_cost_model", "room_bytes", "device_memory"}
    assert doc["device_memory"] is None and doc["room_bytes"] == doc["config"]["capacity_bytes"]  # simulated, uvm
    assert doc["config"]["policy"] == "autovm" and doc["config"]["model"] == "vgg19"
    assert doc["notes"] == ["autovm test"]
    assert doc["summary"]["source"] == "simulated"
    code, out, _ = run(capsys, "info", str(sessions["autovm"]))
    assert code == 0 and "autovm test" in out and "iteration_ns" in out


def test_info_says_when_a_session_s_workspaces_lay_outside_its_capacity(sessions: dict[str, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    old = SAMPLES / "vgg19-b64-device.measured.vms"  # the H100's, recorded before workspaces were graph tensors
    assert run_json(capsys, "info", str(old))["config"]["workspaces"] is False
    code, out, _ = run(capsys, "info", str(old))
    assert code == 0 and "workspaces: outside the capacity" in out
    assert run_json(capsys, "info", str(sessions["autovm"]))["config"]["workspaces"] is True
    code, out, _ = run(capsys, "info", str(sessions["autovm"]))
    assert code == 0 and "workspaces: outside" not in out


def test_simulate_saves_what_plan_predicts(sessions: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    planned = run_json(capsys, "plan", *HALF, "--policy", "uvm")
    assert run_json(capsys, "info", str(sessions["uvm"]))["summary"] == planned["summary"]


CHECKPOINT = ["--model", "resnet18", "--batch", "16", "--image-size", "112", "--capacity", "60%",
              "--policy", "checkpoint", "--segments", "4"]
PARTS_NS = ("compute_ns", "recompute_ns", "fault_wait_ns", "transfer_wait_ns", "idle_ns")


def test_every_summary_says_where_the_iteration_went_and_the_parts_add_up(sessions: dict[str, Path],
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from vmexplorer.session import load_session

    summary = run_json(capsys, "info", str(sessions["autovm"]))["summary"]
    split = load_session(sessions["autovm"]).time_split()
    assert {k: summary[k] for k in PARTS_NS} == {k: getattr(split, k) for k in PARTS_NS}
    assert sum(summary[k] for k in PARTS_NS) == summary["iteration_ns"] and summary["recompute_ns"] == 0
    compared = run_json(capsys, "compare", str(sessions["uvm"]), str(sessions["autovm"]))["summary"]
    assert compared["fault_wait_ns"]["b"] < compared["fault_wait_ns"]["a"]


def test_a_recomputing_plan_says_how_long_its_re_runs_took_in_every_output(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from vmexplorer.graph import Phase
    from vmexplorer.session import load_session
    from vmexplorer.units import format_ns

    out = tmp_path / "checkpoint.vms"
    code, line, _ = run(capsys, "simulate", *CHECKPOINT, "--out", str(out))
    session = load_session(out)
    recomputing = session.time_split().recompute_ns
    assert code == 0 and recomputing > 0 and f"{format_ns(recomputing)} of it recomputing" in line
    info = run_json(capsys, "info", str(out))["summary"]
    assert info["recompute_ns"] == recomputing and sum(info[k] for k in PARTS_NS) == info["iteration_ns"]
    code, table, _ = run(capsys, "info", str(out))
    assert code == 0 and re.search(rf"recompute_ns +{re.escape(format_ns(recomputing))}", table)
    planned = run_json(capsys, "plan", *CHECKPOINT, "--then", "belady")
    assert planned["summary"]["recompute_ns"] > 0
    # its memory operations are numbered among the re-runs (the same with belady's trips as without), and
    # named from the graph that holds them
    graph = session.graph
    assert any(op.phase is Phase.RECOMPUTE for op in graph.ops)
    assert any(m["origin"] == "plan" for m in planned["plan"]["memops"])
    for m in planned["plan"]["memops"]:
        for at in ("issue_after", "complete_before"):
            assert m[f"{at}_op"] == (graph.ops[m[at]].name if 0 <= m[at] < len(graph.ops) else None)


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


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED=1"])
@pytest.mark.parametrize("format", ["table", "json"])
def test_a_reader_that_stops_after_one_line_ends_the_run_with_exit_1(unbuffered: bool, format: str) -> None:
    # several hundred KB, far more than a pipe holds: the writer is still writing when the reader goes
    cmd = [*_program(), "graph", "--model", "resnet152", "--batch", "1", "--format", format]
    env = {k: v for k, v in _env().items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**env, "PYTHONUNBUFFERED": "1"} if unbuffered else env)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert err == ""  # a reader that stops is no error worth a line, but the output was cut short:
    assert proc.returncode == 1


def test_a_closed_stdout_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdout", None)  # what Python sets when it starts with `>&-`
    code = main(["models"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and err.startswith("vmexplorer: error: stdout is closed")


def test_a_closed_stdout_as_a_program_is_one_line_and_exit_1() -> None:
    proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *_program(), "models"], capture_output=True,
                          text=True, env=_env(), timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith("vmexplorer: error: stdout is closed")
    assert proc.stderr.count("\n") == 1


def test_the_entry_point_module_imports_nothing_at_its_top() -> None:
    # the console script imports vmexplorer.cli before main's handlers exist: a Ctrl-C landing in an
    # import there would be a traceback, so the heavy imports wait for main
    code = ("import sys; before = set(sys.modules); import vmexplorer.cli; "
            "print(sorted(set(sys.modules) - before))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout.replace("'", '"')) == ["vmexplorer", "vmexplorer.cli"]


INTERRUPTED = (130, -signal.SIGINT)  # 130 from main; death by SIGINT where Python re-raises it at exit


@pytest.mark.parametrize("exc, caught", [(KeyboardInterrupt(), KeyboardInterrupt), (cli.Terminated(), cli.Terminated)])
def test_a_ctrl_c_python_could_only_report_is_sent_again_and_interrupts_the_command(
        exc: BaseException, caught: type[BaseException]) -> None:
    # where the signal lands in an import lock's clean-up callback, Python hands the exception to
    # sys.unraisablehook (a printed traceback, the Ctrl-C lost) instead of raising it
    from types import SimpleNamespace

    before = sys.unraisablehook
    restore = cli._watch_interrupts()
    try:
        with pytest.raises(caught):
            sys.unraisablehook(SimpleNamespace(exc_type=type(exc), exc_value=exc, exc_traceback=None,
                                               err_msg=None, object=None))
            for _ in range(10_000):  # the handler runs between two of these steps
                time.sleep(0)
    finally:
        restore()
    assert sys.unraisablehook is before


@pytest.mark.parametrize("delay", [0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08])
def test_ctrl_c_in_the_first_instants_is_never_a_traceback(delay: float) -> None:
    """SIGINT at a delay after Python's own start-up, when `-X importtime` reports vmexplorer.cli
    imported: from there on every import (argparse, NumPy, the models) is the command's. A Ctrl-C
    during Python's start-up itself (site's .pth files) is Python's traceback, out of any program's reach."""
    cmd = [sys.executable, "-X", "importtime", "-m", "vmexplorer", "models"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(), text=True)
    assert proc.stderr is not None
    lines = []
    while not (line := proc.stderr.readline()).rstrip().endswith("| vmexplorer.cli"):
        assert line, "".join(lines)  # the command ended before importing its module
        lines.append(line)
    time.sleep(delay)
    sent = proc.poll() is None
    proc.send_signal(signal.SIGINT)
    err = "".join(x for x in proc.stderr.read().splitlines(keepends=True) if not x.startswith("import time:"))
    proc.wait(timeout=60)
    assert "Traceback" not in err and "Error" not in err.replace("vmexplorer: error: interrupted", ""), err
    assert proc.returncode in (INTERRUPTED if sent else (0,) + INTERRUPTED)


# runs `python -m vmexplorer` with an import hook that sends SIGINT when `target` is first imported
_INTERRUPT_AT_IMPORT = """
import os, runpy, signal, sys
target = sys.argv.pop(1)
class InterruptAt:
    fired = False
    def find_spec(self, name, path=None, module=None):
        if name == target and not InterruptAt.fired:
            InterruptAt.fired = True
            print("interrupting the import of", name, file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, InterruptAt())
sys.argv[0] = "vmexplorer"
runpy.run_module("vmexplorer", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("module", ["vmexplorer.cli", "argparse", "vmexplorer.graph.models",
                                    "vmexplorer.policies", "numpy", "datetime"])
def test_ctrl_c_during_any_import_of_a_command_is_never_a_traceback(module: str) -> None:
    # datetime: NumPy's C code imports it and turns the KeyboardInterrupt into an ImportError
    proc = subprocess.run([sys.executable, "-c", _INTERRUPT_AT_IMPORT, module, "models"], capture_output=True,
                          text=True, env=_env(), timeout=60)
    assert f"interrupting the import of {module}" in proc.stderr  # it is imported after start-up
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr.replace("error: interrupted", "")
    assert proc.returncode in INTERRUPTED, proc.stderr


# runs `python -m vmexplorer` with the output file's flush to disk sending SIGTERM: a `kill` mid-write
_TERMINATE_WHILE_WRITING = """
import os, runpy, signal, sys
def fsync(fd):
    print("terminating the write", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
os.fsync = fsync  # this process's only: the file is written, not yet in place
sys.argv[0] = "vmexplorer"
runpy.run_module("vmexplorer", run_name="__main__", alter_sys=True)
"""


def test_a_sigterm_while_a_file_is_written_leaves_no_file_and_exits_143(tmp_path: Path) -> None:
    out = tmp_path / "out" / "page.html"
    out.parent.mkdir()
    sample = SAMPLES / "vgg19-b64-autovm-50pct.measured.vms"
    proc = subprocess.run([sys.executable, "-c", _TERMINATE_WHILE_WRITING, "export", str(sample), "--html", str(out)],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert "terminating the write" in proc.stderr
    assert proc.returncode == 143 and proc.stderr.endswith("vmexplorer: error: terminated\n"), proc.stderr
    assert list(out.parent.iterdir()) == [], "no half-written page, hidden or not"


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


# --- serve ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("port", ["70000", "-1"])
def test_serve_refuses_a_port_out_of_range_in_one_line_with_exit_2(port: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "serve", "--port", port)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"vmexplorer: error: --port takes a TCP port from 0 (any free one) to 65535, not {port}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_gzip(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body as sent) of a GET that accepts gzip, as a browser's."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path, headers={"Accept-Encoding": "gzip"})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def _serving(proc: subprocess.Popen[str], port: int, within_s: float = 120.0) -> bool:
    """Wait until the server at `port` answers; False if its process ended first or it took too long."""
    end = time.monotonic() + within_s
    while proc.poll() is None and time.monotonic() < end:
        try:
            _get_gzip(port, "/favicon.ico")
            return True
        except OSError:
            time.sleep(0.2)
    return False


def test_serve_says_it_starts_serves_the_page_gzipped_refuses_a_taken_port_at_once_stops_on_ctrl_c() -> None:
    import gzip

    port = _free_port()
    serve = [*_program(), "serve", "--address", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert _serving(proc, port), "the server did not answer"
        status, headers, body = _get_gzip(port, "/app")  # the page, built for this request
        assert status == 200 and headers.get("content-encoding") == "gzip"
        page = gzip.decompress(body).decode()
        assert "<title>vmexplorer</title>" in page
        bokeh = re.search(r'src="(static/js/bokeh\.min\.js[^"]*)"', page)
        assert bokeh is not None, page[:2000]
        status, headers, body = _get_gzip(port, "/" + bokeh.group(1))
        assert status == 200 and headers.get("content-encoding") == "gzip"
        assert "javascript" in headers.get("content-type", "") and len(gzip.decompress(body)) > 3 * len(body)
        taken = subprocess.run(serve, capture_output=True, text=True, env=_env(), timeout=180)
        assert taken.returncode == 2 and taken.stdout == "" and taken.stderr.count("\n") == 1
        assert taken.stderr.startswith(f"vmexplorer: error: cannot listen on 127.0.0.1 port {port}: ")
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C is how a server is stopped: not an error
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    url = f"http://127.0.0.1:{port}/app"
    assert proc.returncode == 0, err
    assert out == f"serving the app at {url} (gzip-compressed); Ctrl-C stops it\nstopped serving {url}\n"
    assert err.startswith("vmexplorer: starting the app's server: "), "it says what it does while it warms up"
    assert "Traceback" not in err


THEMED_GETS = 30  # each kept ~3.7 MiB before


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


HOSTILE_COMPONENT_PATHS = (
    "/components/unittest.__main__/x/__css__/y",  # imported, it parsed the server's arguments and exited
    "/components/this/x/__css__/y",  # imported, it printed into the log
    "/components/vmexplorer.__main__/x/__css__/y",  # imported, it ran our command line in the server
    "/components/..%2f..%2fetc%2fpasswd",  # answered 500 with a traceback in the log
    "/components/os/path/__css__/x",  # a module the server holds, outside the page's packages
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's memory from Linux's /proc")
def test_serve_answers_component_files_only_for_the_page_s_modules_imports_nothing_and_keeps_no_page_per_theme(
) -> None:
    port = _free_port()
    serve = [*_program(), "serve", "--address", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert _serving(proc, port), "the server did not answer"
        for path in HOSTILE_COMPONENT_PATHS:
            status, _, body = _get_gzip(port, path)
            assert status == 404, (path, status, body[:200])
            assert proc.poll() is None, f"the server stopped after GET {path}"
        status, _, body = _get_gzip(port, "/components/panel.template.vanilla/VanillaTemplate/_css/vanilla.css")
        assert status == 200 and body, "Panel's own component files are still served"
        assert _get_gzip(port, "/app")[0] == 200
        before = _rss_mib(proc.pid)
        for n in range(THEMED_GETS):  # Panel kept a whole session per ?theme= value, never freed
            assert _get_gzip(port, f"/app?theme=rt{n}")[0] == 200
        grown = _rss_mib(proc.pid) - before
        assert grown < THEMED_GETS, f"{THEMED_GETS} GETs with made-up themes kept {grown:.0f} MiB"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0, err[-3000:]
    for sign in ("Traceback", "Beautiful is better than ugly", "usage:", "panel serve"):
        assert sign not in err, (sign, err[-2000:])


def test_a_page_is_kept_per_path_and_theme_and_a_made_up_theme_shares_the_default_s() -> None:
    from types import SimpleNamespace

    from vmexplorer.ui.routes import session_key

    def key(**arguments: str) -> tuple[str, str]:
        return session_key(SimpleNamespace(path="/app", arguments={k: [v.encode()] for k, v in arguments.items()}))

    assert key() == key(theme="default") == key(theme="rt1") == key(theme="9" * 50) == ("/app", "default")
    assert key(theme="dark") == ("/app", "dark")


def test_importing_the_command_s_main_module_runs_nothing() -> None:
    import importlib

    module = importlib.import_module("vmexplorer.__main__")  # as Panel's module route did, by a URL's name
    assert module.__name__ == "vmexplorer.__main__"


def test_the_app_served_by_panel_serve_says_once_that_its_module_route_is_open(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from vmexplorer.ui import routes

    monkeypatch.setenv(routes.GUARDED, "0")  # and put back as it was after the test
    routes.warn_if_unguarded.cache_clear()
    try:
        assert routes.warn_if_unguarded() and routes.warn_if_unguarded()
        assert capsys.readouterr().err.count("vmexplorer serve") == 1, "said once per process"
        routes.warn_if_unguarded.cache_clear()
        routes.guarded_patterns()
        assert not routes.warn_if_unguarded(), "nothing to say where `vmexplorer serve` guards the route"
    finally:
        routes.warn_if_unguarded.cache_clear()


def test_serve_refuses_a_negative_number_of_processes_in_one_line_with_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "serve", "--num-procs", "-2")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("vmexplorer: error: --num-procs takes 1 or more processes (0: one per CPU core), not -2")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="several server processes need Linux")
def test_serve_in_two_processes_answers_on_one_port_and_all_stop_when_the_first_is_terminated() -> None:
    port = _free_port()
    serve = [*_program(), "serve", "--address", "127.0.0.1", "--port", str(port), "--num-procs", "2"]
    proc = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert _serving(proc, port), "the server did not answer"
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 2  # the first process forks the two that serve, and waits for them
        pages = {_get_gzip(port, "/app")[0] for _ in range(4)}  # the kernel hands connections to either
        assert pages == {200}
    finally:
        proc.terminate()  # a service manager's SIGTERM reaches the first process only
        out, err = proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in children), "a serving process outlived the first"
    url = f"http://127.0.0.1:{port}/app"
    assert out.startswith(f"serving the app at {url} (gzip-compressed, 2 processes); Ctrl-C stops it\n")
    assert "Traceback" not in err
