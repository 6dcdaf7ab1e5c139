"""bench/pick_samples.py: each configuration's median recording over the passes becomes the sample, and
`--only` leaves the configurations it does not name where they are."""

from __future__ import annotations

import json
from pathlib import Path

from bench import pick_samples

ROOT = Path(__file__).resolve().parents[1]
DEVICE, SWAP = "vgg19-b64-device.measured.vms", "vgg19-b64-tuned-swap-50pct.measured.vms"


def _passes(tmp_path: Path, iteration_ms: list[float]) -> list[Path]:
    """One pass per time, each recording DEVICE and SWAP at that time; a file's bytes name its pass."""
    folders = []
    for k, ms in enumerate(iteration_ms, start=1):
        folder = tmp_path / f"pass{k}"
        folder.mkdir()
        rows = []
        for session in (DEVICE, SWAP):
            (folder / session).write_text(f"pass {k}")
            rows.append({"session": session, "command": f"vmexplorer run --out {folder}/{session}", "exit": 0,
                         "wall_s": 1.0, "iteration_ms": ms, "bytes": 7})
        (folder / "record_samples.json").write_text(json.dumps(rows))
        folders.append(folder)
    return folders


def test_the_sample_kept_is_the_recording_with_the_median_iteration_time(tmp_path: Path) -> None:
    samples, log = tmp_path / "samples", tmp_path / "log.json"
    samples.mkdir()
    passes = _passes(tmp_path, [30.0, 10.0, 20.0])
    argv = [*map(str, passes), "--samples", str(samples), "--log", str(log), "--prefix", "h200-"]
    assert pick_samples.main(argv) == 0
    assert (samples / f"h200-{SWAP}").read_text() == "pass 3"
    assert {e["session"]: e["kept_pass"] for e in json.loads(log.read_text())} == {f"h200-{DEVICE}": 3,
                                                                                   f"h200-{SWAP}": 3}


def test_only_picks_the_configurations_it_names_and_leaves_the_others_samples_untouched(tmp_path: Path) -> None:
    samples, log = tmp_path / "samples", tmp_path / "log.json"
    samples.mkdir()
    (samples / f"h200-{DEVICE}").write_text("picked from the uvm passes")
    passes = _passes(tmp_path, [30.0, 10.0, 20.0])
    assert pick_samples.main([*map(str, passes), "--samples", str(samples), "--log", str(log), "--prefix", "h200-",
                              "--only", "*-swap-*"]) == 0
    assert (samples / f"h200-{DEVICE}").read_text() == "picked from the uvm passes"
    assert (samples / f"h200-{SWAP}").read_text() == "pass 3"
    assert [e["session"] for e in json.loads(log.read_text())] == [f"h200-{SWAP}"]
