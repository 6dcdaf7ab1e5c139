"""The app's GPU run queue, with CPU runners standing in for the GPU: order, progress, cancel, crashes.

The runners are module-level functions, as the 'spawn' worker processes import them by name.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from vmexplorer.config import Config
from vmexplorer.graph import build_graph
from vmexplorer.plan import Plan
from vmexplorer.policies import compile_plan
from vmexplorer.worker import QueueFull, RunQueue, RunRequest, gpu_available


def request(model: str, iterations: int = 3) -> RunRequest:
    """A run the CPU runners below read only the model name and the iterations of."""
    return RunRequest(Plan(Config(model, 2, 64, 1, "uvm"), (), (), 0), iterations)


def simulated(request: RunRequest, progress: Callable[[int, int, float], None],
              should_stop: Callable[[], bool]) -> Any:
    """What the default runner does, with the simulator in place of the GPU."""
    from vmexplorer.session import new_session
    from vmexplorer.simulator import H100_DEFAULT, simulate

    plan = request.plan
    graph = build_graph(*plan.key)
    for i in range(request.iterations):
        progress(i + 1, request.iterations, 1.0 / (i + 1))
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)


def slow(config: RunRequest, progress: Callable[[int, int, float], None], should_stop: Callable[[], bool]) -> bytes:
    """One iteration per 0.1 s, stopping when asked, as the executor does."""
    for i in range(config.iterations):
        if should_stop():
            break
        time.sleep(0.1)
        progress(i + 1, config.iterations, 2.0)
    return b"partial"


def stubborn(config: RunRequest, progress: Callable[[int, int, float], None],
             should_stop: Callable[[], bool]) -> bytes:
    """A hung run: never looks at should_stop."""
    progress(1, config.iterations, 1.0)
    time.sleep(60)
    return b""


def chatty(config: RunRequest, progress: Callable[[int, int, float], None],
           should_stop: Callable[[], bool]) -> bytes:
    """Progress far more often than the queue polls; stops when asked unless the model is 'deaf'."""
    end, i = time.monotonic() + 60, 0
    while time.monotonic() < end and (config.plan.model == "deaf" or not should_stop()):
        time.sleep(0.001)
        i += 1
        progress(i, max(i, config.iterations), 1.0)
    return b"stopped"


def by_model(config: RunRequest, progress: Callable[[int, int, float], None],
             should_stop: Callable[[], bool]) -> bytes:
    """The model name says what to do: crash, segfault, raise, or finish at once."""
    if config.plan.model == "exit":
        os._exit(1)
    if config.plan.model == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if config.plan.model == "raise":
        raise ValueError("cuDNN said no")
    progress(1, 1, 0.5)
    return f"ran in {os.getpid()}".encode()


def _until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_the_plan_sent_is_the_plan_run_and_its_session_comes_back() -> None:
    graph = build_graph("alexnet", 2, 64)
    capacity = (graph.min_capacity[0] + graph.footprint) // 2
    plan = compile_plan(graph, capacity, "autovm", {"prefetch_distance": 2})
    with RunQueue(runner=simulated) as q:
        st = q.wait(q.submit((plan, 4)), 30)
        assert st.state == "done", st.message
        assert (st.iteration, st.iterations, st.loss) == (4, 4, 0.25)
        assert st.result.plan == plan  # the worker compiles nothing of its own


def test_jobs_run_in_order_one_at_a_time_with_positions_and_progress() -> None:
    with RunQueue(runner=slow) as q:
        a, b, c = q.submit(request("a", 4)), q.submit(request("b", 2)), q.submit(request("c", 1))
        assert q.status(c).state == "queued" and q.status(c).queue_position in (2, 3)
        _until(lambda: q.status(a).iteration >= 1)
        sa, sb, sc = q.status(a), q.status(b), q.status(c)
        assert sa.state == "running" and sa.queue_position is None and sa.loss == 2.0
        assert "iteration" in sa.message
        assert (sb.state, sb.queue_position, sc.queue_position) == ("queued", 1, 2)
        assert q.wait(a, 15).state == "done"
        _until(lambda: q.status(b).state != "queued")
        assert q.status(c).queue_position in (1, None)
        done = [q.wait(j, 15) for j in (a, b, c)]
        assert [s.state for s in done] == ["done"] * 3
        assert [(s.iteration, s.iterations) for s in done] == [(4, 4), (2, 2), (1, 1)]
        assert done[0].result == b"partial"


def test_a_visitor_has_one_run_under_way_and_the_queue_takes_no_more_than_its_cap() -> None:
    with RunQueue(runner=slow, grace_s=5, per_owner=1, max_queued=2) as q:
        a = q.submit(request("a", 200), owner="10.0.0.7")
        with pytest.raises(QueueFull, match="you have 1 GPU run"):
            q.submit(request("b", 1), owner="10.0.0.7")
        _until(lambda: q.status(a).state == "running")
        b, c = q.submit(request("b", 1), owner="10.0.0.8"), q.submit(request("c", 1), owner="10.0.0.9")
        with pytest.raises(QueueFull, match=r"the GPU's queue is full \(2 runs waiting\)"):
            q.submit(request("d", 1), owner="10.0.0.10")
        assert q.cancel(a) and q.wait(a, 10).state == "cancelled"
        _until(lambda: q.status(b).state != "queued")
        d = q.submit(request("d", 1), owner="10.0.0.7")  # its run over, the visitor may queue another
        assert [q.wait(j, 15).state for j in (b, c, d)] == ["done"] * 3


def test_a_run_queued_for_no_one_in_particular_is_not_limited_per_visitor() -> None:
    with RunQueue(runner=slow, per_owner=1) as q:
        jobs = [q.submit(request(name, 1)) for name in "abc"]
        assert [q.wait(j, 15).state for j in jobs] == ["done"] * 3


def test_cancel_a_queued_and_a_running_job() -> None:
    with RunQueue(runner=slow, grace_s=5) as q:
        a, b = q.submit(request("a", 200)), q.submit(request("b", 1))
        assert q.cancel(b) is True
        sb = q.status(b)
        assert sb.state == "cancelled" and sb.queue_position is None and "before it started" in sb.message
        _until(lambda: q.status(a).iteration >= 1)
        assert q.cancel(a) is True
        sa = q.wait(a, 10)
        assert sa.state == "cancelled" and sa.iteration < 200, sa
        assert q.cancel(a) is False  # already over
        # the same worker goes on with the next run
        c = q.submit(request("c", 1))
        assert q.wait(c, 10).state == "done"


def test_a_run_that_ignores_cancel_is_terminated_after_the_grace_period() -> None:
    with RunQueue(runner=stubborn, grace_s=0.3) as q:
        a = q.submit(request("a"))
        _until(lambda: q.status(a).iteration == 1)
        q.cancel(a)
        st = q.wait(a, 10)
        assert st.state == "cancelled" and "terminated" in st.message


def test_a_run_that_reports_progress_faster_than_the_queue_polls_is_still_stopped_and_timed() -> None:
    with RunQueue(runner=chatty, grace_s=0.5, poll_s=0.05) as q:
        a = q.submit(request("a"))
        _until(lambda: q.status(a).iteration >= 10)
        asked = time.monotonic()
        q.cancel(a)
        st = q.wait(a, 10)
        assert st.state == "cancelled" and "terminated" not in st.message, st
        assert time.monotonic() - asked < 2.0
        deaf = q.submit(request("deaf"))
        _until(lambda: q.status(deaf).iteration >= 10)
        q.cancel(deaf)
        st = q.wait(deaf, 10)
        assert st.state == "cancelled" and "terminated" in st.message, st
    with RunQueue(runner=chatty, timeout_s=0.5) as q:
        st = q.wait(q.submit(request("deaf")), 10)
        assert st.state == "failed" and "longer than 0.5 s" in st.message, st


def test_a_hung_run_times_out_as_failed() -> None:
    with RunQueue(runner=stubborn, timeout_s=0.5) as q:
        st = q.wait(q.submit(request("a")), 10)
        assert st.state == "failed" and "longer than 0.5 s" in st.message


def test_crashes_and_errors_fail_the_job_and_the_queue_goes_on() -> None:
    with RunQueue(runner=by_model) as q:
        jobs = [q.submit(request(m)) for m in ("ok", "exit", "segv", "raise", "ok")]
        ok1, exited, segv, raised, ok2 = (q.wait(j, 30) for j in jobs)
        assert ok1.state == "done" and ok2.state == "done"
        assert exited.state == "failed" and "exited with status 1" in exited.message
        assert segv.state == "failed" and "SIGSEGV" in segv.message and "fresh worker" in segv.message
        assert raised.state == "failed" and raised.message == "ValueError: cuDNN said no"
        assert ok1.result != ok2.result  # a new worker process after the crashes
        assert ok1.result and ok1.result.startswith(b"ran in ")
        assert os.getpid() not in {int((s.result or b"ran in 0").split()[-1]) for s in (ok1, ok2)}


def test_submit_checks_and_closes() -> None:
    q = RunQueue(runner=slow)
    with pytest.raises(ValueError, match="iterations"):
        q.submit(request("a", 0))
    a, b = q.submit(request("a", 100)), q.submit(request("b"))
    _until(lambda: q.status(a).state == "running")
    q.close()
    assert q.status(a).state == "cancelled" and q.status(b).state == "cancelled"
    with pytest.raises(RuntimeError, match="closed"):
        q.submit(request("c"))
    with pytest.raises(KeyError):
        q.status(99)


def test_one_run_at_a_time_per_gpu() -> None:
    with RunQueue(runner=slow, devices=(0, 1)) as q:
        a, b, c = q.submit(request("a", 100)), q.submit(request("b", 100)), q.submit(request("c", 1))
        _until(lambda: q.status(a).iteration >= 1 and q.status(b).iteration >= 1)
        assert {q.status(a).gpu, q.status(b).gpu} == {0, 1}
        assert (q.status(c).state, q.status(c).queue_position) == ("queued", 1)
        q.cancel(a)
        assert q.wait(c, 10).state == "done" and q.status(c).gpu == q.status(a).gpu
        assert q.status(b).state == "running"


def test_queues_of_different_server_processes_take_a_gpu_one_run_at_a_time(tmp_path: Any, monkeypatch: Any) -> None:
    # two queues stand for two processes of one server: each holds its own jobs, the GPU's lock is shared
    monkeypatch.setenv("VMEXPLORER_LOCK_DIR", str(tmp_path))
    with RunQueue(runner=slow) as first, RunQueue(runner=slow) as second:
        a = first.submit(request("a", 100))
        _until(lambda: first.status(a).iteration >= 1)
        b, c = second.submit(request("b", 2)), second.submit(request("c", 2))
        time.sleep(0.5)
        waiting = second.status(b)
        assert waiting.state == "running" and waiting.iteration == 0 and "waiting for the GPU" in waiting.message
        assert second.cancel(b) is True
        assert second.wait(b, 5).state == "cancelled" and "before it started" in second.status(b).message
        first.cancel(a)
        assert first.wait(a, 10).state == "cancelled"
        assert second.wait(c, 15).state == "done"  # the GPU is free again: the other process's run goes on


def test_the_runner_must_reach_a_spawned_worker() -> None:
    with pytest.raises(TypeError, match="module-level function"):
        RunQueue(runner=lambda config, progress, should_stop: b"")


def test_gpu_available_answers_without_importing_cupy_here() -> None:
    import sys

    ok, why = gpu_available()
    assert isinstance(ok, bool) and why
    assert "cupy" not in sys.modules
    assert gpu_available() == (ok, why)  # remembered


def test_gpu_check_answers_at_once_and_gives_the_remembered_answer_when_known() -> None:
    import time

    from vmexplorer.worker import gpu_check

    started = time.monotonic()
    first = gpu_check()
    assert time.monotonic() - started < 1.0  # the check runs in a thread of its own
    assert first is None or first == gpu_available()
    end = time.monotonic() + 120
    while gpu_check() is None and time.monotonic() < end:
        time.sleep(0.05)
    assert gpu_check() == gpu_available()


def test_a_gpu_run_longer_than_a_session_holds_is_refused_before_the_gpu_works() -> None:
    from vmexplorer.session.files import iterations_that_fit
    from vmexplorer.worker import run_on_gpu

    graph = build_graph("resnet152", 8, 224)
    plan = compile_plan(graph, 2**30, "uvm")
    fit = iterations_that_fit(graph, plan)
    assert 0 < fit < 10_000
    with pytest.raises(ValueError, match=f"would not fit in one session: ask for at most {fit - 1}"):
        run_on_gpu(RunRequest(plan, 10_000), lambda *_: None, lambda: False)  # raises before CuPy is imported


def test_the_default_runner_runs_the_plan_it_is_sent_compiling_nothing_and_reading_no_file_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The page compiled the plan when it showed it; the worker runs that plan (the executor's check
    is the one it gets) and hands the measured session to the page, which shows it as it is."""
    import vmexplorer.engine.executor as executor
    import vmexplorer.policies as policies
    import vmexplorer.session.plan_format as session_format
    from vmexplorer.session.samples import sample_index
    from vmexplorer.simulator import H100_DEFAULT, simulate
    from vmexplorer.ui.state import AppState
    from vmexplorer.worker import run_on_gpu

    sample_index()  # the samples' index is read once per process, whoever asks first: not this run's doing
    graph = build_graph("vgg11", 2, 32)
    plan = compile_plan(graph, (graph.min_capacity[0] + graph.footprint) // 2, "autovm")
    calls: list[str] = []
    compile_plan_, read_back = policies.compile_plan, session_format.validate_plan
    monkeypatch.setattr(policies, "compile_plan", lambda *a, **k: calls.append("compile") or compile_plan_(*a, **k))
    monkeypatch.setattr(session_format, "validate_plan", lambda *a: calls.append("read back") or read_back(*a))

    def execute(graph: Any, plan: Any, settings: Any, progress: Any = None, should_stop: Any = None) -> Any:
        calls.append("execute")
        return executor.RunResult(simulate(graph, plan, H100_DEFAULT), (1.0,), {"gpu": "none: a test"})

    monkeypatch.setattr(executor, "execute", execute)
    session = run_on_gpu(RunRequest(plan, 2), lambda *_: None, lambda: False)
    assert session.plan is plan and calls == ["execute"]
    state = AppState()
    assert state.show_measured(session, "GPU run 1"), state.message
    assert state.session is session and calls.count("read back") == 0
