"""bench/swap_schedule_gap.py: its copy-order simulation is the simulator's when it keeps the executor's order,
so what it says another order saves is measured against the same model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import swap_schedule_gap  # noqa: E402

from vmexplorer.session import load_session  # noqa: E402
from vmexplorer.simulator import simulate  # noqa: E402


@pytest.mark.parametrize("name", swap_schedule_gap.GOALS)
def test_in_the_executors_order_the_copy_order_simulation_is_the_simulators(name: str) -> None:
    s = load_session(ROOT / "sample_sessions" / f"h200-{name}.measured.vms")
    executor, earliest = swap_schedule_gap.earliest_deadline(s.graph, s.plan, s.cost_model)
    assert executor == pytest.approx(float(simulate(s.graph, s.plan, s.cost_model).op_end_ns.max()), abs=1.0)
    assert earliest <= executor
    assert np.isfinite(earliest)
