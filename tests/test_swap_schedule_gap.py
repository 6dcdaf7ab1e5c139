"""bench/swap_schedule_gap.py: what it says the copy order saves is the simulator's own figure for the same
plan in the executor's order and in the one `compile_plan` picks."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import swap_schedule_gap  # noqa: E402

from vmexplorer.session import load_session  # noqa: E402
from vmexplorer.simulator import simulate  # noqa: E402


@pytest.mark.parametrize("name", swap_schedule_gap.GOALS)
def test_the_copy_orders_are_the_simulators_figures_and_the_picked_one_is_never_slower(name: str) -> None:
    s = load_session(ROOT / "sample_sessions" / f"h200-{name}.measured.vms")
    executor, earliest = swap_schedule_gap.copy_orders(s.graph, s.plan, s.cost_model)
    unordered = replace(s.plan, copy_order=())
    assert executor == float(simulate(s.graph, unordered, s.cost_model).iteration_ns().max())
    assert earliest <= executor
