"""bench/gpu/probe_copy_order.py's program (CPU only): in the executor's order it is the executor's program, and
in earliest-deadline order every step is still there, each copy after everything it waits for, so the GPU
run it makes computes what the executor's does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import probe_copy_order  # noqa: E402
import swap_schedule_gap  # noqa: E402

from vmexplorer.engine.schedule import Stream, schedule  # noqa: E402
from vmexplorer.engine.swap import plan_pool  # noqa: E402
from vmexplorer.session import load_session  # noqa: E402

SESSIONS = ("vgg19-b64-tuned-swap-75pct", "vgg19-b64-tuned-swap-50pct", "alexnet-b256-tuned-swap-50pct",
            "vgg19-b64-vdnn-swap-50pct")


@pytest.mark.parametrize("name", SESSIONS)
def test_the_probes_program_keeps_every_step_and_each_after_what_it_waits_for(name: str) -> None:
    s = load_session(ROOT / "sample_sessions" / f"h200-{name}.measured.vms")
    waits = plan_pool(s.graph, s.plan).waits
    executor = schedule(s.graph, s.plan, None, waits)
    same = probe_copy_order.reordered_schedule(
        s.graph, s.plan, {i: (m.complete_before, m.issue_after, i) for i, m in enumerate(s.plan.memops)}, None, waits)
    for stream in Stream:  # the executor's order: each stream runs its steps as the executor's do
        assert [x.index for x in same if x.stream is stream] == [x.index for x in executor if x.stream is stream]
    rank = swap_schedule_gap.best_rank(s.graph, s.plan, s.cost_model)
    steps = probe_copy_order.reordered_schedule(s.graph, s.plan, rank, None, waits)
    assert sorted((x.kind, x.index) for x in steps) == sorted((x.kind, x.index) for x in executor)
    seen: set = set()
    for step in steps:
        assert set(step.waits) <= seen, f"{step} waits for a step after it"
        seen.add(step.done)
