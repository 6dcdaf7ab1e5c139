"""bench/repair_nvml_placement.py: NVML samples taken between iterations leave sessions recorded before the
fix, and nothing else changes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from vmexplorer.session import load_session

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "bench" / "results" / "h100" / "passes" / "pass1"
sys.path.insert(0, str(ROOT / "bench"))
repair = pytest.importorskip("repair_nvml_placement")


def test_samples_taken_between_iterations_are_dropped_and_the_rest_kept_as_recorded() -> None:
    raw = load_session(RAW / "vgg19-b64-uvm-60pct.measured.vms")
    c = raw.collected
    assert c is not None and np.any(np.diff(c.nvml_t_ns) < 0), "the raw recording has samples out of place"
    fixed, why = repair.repaired(raw)
    f, tl = fixed.collected, raw.timeline
    assert f is not None and why.startswith("kept")
    assert np.all(np.diff(f.nvml_t_ns) >= 0) and 0 < len(f.nvml_t_ns) < len(c.nvml_t_ns)
    kept = np.isin(c.nvml_t_ns, f.nvml_t_ns)
    assert np.array_equal(c.nvml_pcie_rx_bytes_per_s[kept], f.nvml_pcie_rx_bytes_per_s)  # values untouched
    assert f.nvml_t_ns.max() <= max(tl.op_end_ns.max(), tl.memop_end_ns.max())
    assert "repair_nvml_placement" in next(s.reason for s in f.status if s.name == "nvml")
    assert repair.repaired(fixed)[1] == "nothing to repair"  # a second pass changes nothing
    assert fixed.timeline is raw.timeline and fixed.plan is raw.plan


def test_when_drains_cannot_be_told_apart_every_sample_goes_and_the_session_says_why() -> None:
    raw = load_session(RAW / "vgg19-b64-device.measured.vms")
    fixed, why = repair.repaired(raw)
    assert why.startswith("dropped all") and fixed.collected is not None and not len(fixed.collected.nvml_t_ns)
    assert "measured_nvml_unavailable" in fixed.summary
