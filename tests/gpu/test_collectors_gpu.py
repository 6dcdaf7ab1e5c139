"""The collectors on a real GPU: what CUPTI sees of the bytes the plan moves and the faults it takes."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from vmexplorer.graph import build_graph
from vmexplorer.plan import Direction, Mode
from vmexplorer.policies import compile_plan
from vmexplorer.records.collected import PARTS, collected_summary
from vmexplorer.session import new_session
from vmexplorer.worker import gpu_available

pytestmark = pytest.mark.gpu
ok, why = gpu_available()
if not ok:
    pytest.skip(f"no GPU: {why}", allow_module_level=True)

from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402


def _record(case: str, values: dict) -> None:
    """Keep what the test measured: $OUT/gpu_results.jsonl when the device tool runs it."""
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_results.jsonl"), "a") as f:
            f.write(json.dumps({"kind": "collectors", "case": case, **values}, default=str) + "\n")


def _half(policy: str, model: str = "vgg11", batch: int = 32, size: int = 128):
    graph = build_graph(model, batch, size)
    return graph, compile_plan(graph, max(graph.footprint // 2, graph.min_capacity[0]), policy)


@pytest.mark.parametrize("policy", ["uvm", "autovm"])
def test_cupti_never_counts_more_than_the_run_moved_and_the_session_says_how_much_it_saw(policy: str) -> None:
    graph, plan = _half(policy)
    result = execute(graph, plan, RunSettings(iterations=3, warmup=1))
    session = new_session(graph, plan, result.timeline, environment=result.environment, collected=result.collected)
    summary = session.summary
    planned_in = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE)
    planned_out = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
    _record(f"cupti bytes, vgg11 b32 128px {policy} 50%", {
        "plan_htod": planned_in, "cupti_htod": summary["measured_bytes_htod"],
        "plan_dtoh": planned_out, "cupti_dtoh": summary["measured_bytes_dtoh"],
        "htod_share": summary["measured_htod_share"], "dtoh_share": summary["measured_dtoh_share"],
        "fault_groups": summary["measured_fault_groups"], "dropped": summary["measured_dropped_records"]})
    assert planned_in and planned_out, "the case must page"
    # unified memory is counted in one iteration after the timed ones, which carry no counting cost
    tl, c = result.timeline, result.collected
    assert (tl.iterations, tl.counted, summary["iterations"]) == (4, 1, 3)
    assert len(c.um_iteration) and c.um_iteration.min() == 3 and (c.kernel_iteration < 3).any()
    # NVML samples taken while the collectors drained between iterations have no place on the timeline
    t, tl = result.collected.nvml_t_ns, result.timeline
    assert len(t) and np.all(np.diff(t) >= 0) and t.max() <= max(tl.op_end_ns.max(), tl.memop_end_ns.max())
    # CUPTI may lose records (issue 4's notes) but must not invent bytes: 2 MiB blocks round up a little
    assert 0 <= float(summary["measured_htod_share"]) <= 1.05
    assert 0 <= float(summary["measured_dtoh_share"]) <= 1.05


def test_cuptis_count_of_dropped_records_is_read_through_its_pointer() -> None:
    from cupti import cupti

    from vmexplorer.collectors.cupti_collector import _dropped

    assert _dropped(cupti) >= 0


def test_demand_paging_takes_faults_and_autovm_far_fewer() -> None:
    faults = {}
    for policy in ("uvm", "autovm"):
        # ResNet-18 at 224 px: autovm's plan leaves a sixth of uvm's bytes to demand faults
        graph, plan = _half(policy, "resnet18", 32, 224)
        result = execute(graph, plan, RunSettings(iterations=2, warmup=1, collectors=("faults",)))
        faults[policy] = int(collected_summary(result.timeline, result.collected)["fault_groups"])
        # every other part is named switched off, each by its status entry in the parts table
        off = {s.name for s in result.collected.status if not s.available and "switched off" in s.reason}
        assert off == {p.status for p in PARTS if p.name != "faults"}
        planned = sum(m.nbytes for m in plan.memops if m.mode is Mode.FAULT)
        _record(f"fault groups, resnet18 b32 224px {policy} 50%", {"fault_groups": faults[policy],
                                                                    "plan_fault_bytes": planned})
    assert faults["uvm"] > 0
    assert faults["autovm"] < faults["uvm"] / 2


def test_a_recorded_run_keeps_its_memory_copies_such_as_the_loss_read_back_after_each_iteration() -> None:
    from vmexplorer.records.collected import MEMCPY_KINDS

    graph = build_graph("alexnet", 64, 128)
    result = execute(graph, compile_plan(graph, graph.footprint, "device"), RunSettings(iterations=3, warmup=1))
    c = result.collected
    copies = [(int(i), MEMCPY_KINDS[k], int(b)) for i, k, b in zip(c.memcpy_iteration, c.memcpy_kind, c.memcpy_bytes)]
    _record("memory copies, alexnet b64 128px device", {"copies": copies[:20], "count": len(copies)})
    assert {(i, "dtoh", 4) for i in range(3)} <= set(copies)  # the float32 loss, once per recorded iteration
