"""bench/reduce_passes.py: a recording pass keeps what is read from it, says what it dropped, and
reducing twice changes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from bench import reduce_passes
from vmexplorer.session import load_session

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_sessions" / "vgg19-b64-uvm-50pct.measured.vms"  # a whole recording


def test_a_reduced_recording_keeps_its_timeline_and_every_unified_memory_figure(tmp_path: Path) -> None:
    path = tmp_path / SAMPLE.name
    shutil.copyfile(SAMPLE, path)
    assert reduce_passes.reduce_file(path)
    whole, reduced = load_session(SAMPLE), load_session(path)
    assert np.array_equal(whole.timeline.op_end_ns, reduced.timeline.op_end_ns)
    assert whole.plan.memops == reduced.plan.memops
    kept = {k: v for k, v in whole.summary.items()
            if not k.startswith(("measured_kernel", "measured_memcpy", "measured_nvml"))}
    assert {k: reduced.summary[k] for k in kept} == kept
    assert whole.collected is not None and reduced.collected is not None
    assert len(reduced.collected.um_value) < len(whole.collected.um_value)


def test_a_reduced_recording_names_each_dropped_table_so_its_zeros_are_not_read_as_none(tmp_path: Path) -> None:
    path = tmp_path / SAMPLE.name
    shutil.copyfile(SAMPLE, path)
    reduce_passes.reduce_file(path)
    c = load_session(path).collected
    assert c is not None
    assert len(c.kernel_start_ns) == len(c.memcpy_bytes) == len(c.nvml_t_ns) == 0 and c.kernel_names == ()
    assert not any(c.available(table) for table in ("kernel", "memcpy", "nvml"))
    assert c.available("um") and c.available("faults")
    summary = load_session(path).summary
    assert "measured_kernels" not in summary and "measured_cupti_kernels_unavailable" in summary


def test_reducing_a_reduced_recording_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / SAMPLE.name
    shutil.copyfile(SAMPLE, path)
    assert reduce_passes.reduce_file(path)
    once = path.read_bytes()
    assert not reduce_passes.reduce_file(path) and path.read_bytes() == once
