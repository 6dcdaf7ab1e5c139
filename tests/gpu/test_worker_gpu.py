"""The app's Run-on-GPU path on a real GPU: the real runner in a spawned worker, queued, cancellable."""

from __future__ import annotations

import time

import pytest

from vmexplorer.graph import build_graph
from vmexplorer.policies import compile_plan
from vmexplorer.session import session_from_bytes, session_to_bytes
from vmexplorer.worker import RunQueue, RunRequest, gpu_available, run_on_gpu

pytestmark = pytest.mark.gpu
ok, why = gpu_available()
if not ok:
    pytest.skip(f"no GPU: {why}", allow_module_level=True)


def _config(policy: str, iterations: int = 3) -> RunRequest:
    graph = build_graph("alexnet", 64, 128)
    need, _ = graph.min_capacity
    # just above the smallest capacity the model runs in: far below its peak, so both policies page
    capacity = graph.footprint if policy == "device" else need * 11 // 10
    return RunRequest(compile_plan(graph, capacity, policy), iterations)


def test_a_queued_gpu_run_comes_back_as_a_measured_session_with_collector_records() -> None:
    with RunQueue(runner=run_on_gpu) as queue:
        first = queue.submit(_config("autovm"))
        second = queue.submit(_config("uvm"))
        seen_second_queued = False
        deadline = time.monotonic() + 300
        while queue.status(first).state in ("queued", "running") and time.monotonic() < deadline:
            st = queue.status(second)
            seen_second_queued |= st.state == "queued" and st.queue_position == 1
            time.sleep(0.05)
        done = queue.wait(first, timeout=300)
        assert done.state == "done", done.message
        assert seen_second_queued, "the second run should wait in line, number 1, while the first runs"
        session = session_from_bytes(session_to_bytes(done.result))  # a session the app can save
        assert session.summary["bytes_to_device"] > 0, "the plan should page for this test to mean anything"
        assert session.timeline.source == "measured" and session.timeline.timed_iterations == 3
        assert session.timeline.counted == 1  # unified memory counted after the timed iterations
        assert session.plan.policy == "autovm" and session.collected is not None
        assert {st.name: st.available for st in session.collected.status}.get("cupti")
        later = queue.wait(second, timeout=300)
        assert later.state == "done", later.message
        assert later.result.plan.policy == "uvm"


def test_a_running_gpu_run_can_be_cancelled_and_the_next_one_still_runs() -> None:
    with RunQueue(runner=run_on_gpu, grace_s=60) as queue:
        long = queue.submit(_config("uvm", iterations=200))
        deadline = time.monotonic() + 300
        while queue.status(long).iteration < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert queue.cancel(long)
        ended = queue.wait(long, timeout=120)
        assert ended.state == "cancelled", ended.message
        assert ended.iteration < 200
        after = queue.wait(queue.submit(_config("device", iterations=2)), timeout=300)
        assert after.state == "done", after.message
