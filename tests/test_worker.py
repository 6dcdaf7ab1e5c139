"""The app's GPU run queue, with CPU runners standing in for the GPU: order, progress, cancel, crashes.

The runners are module-level functions, as the 'spawn' worker processes import them by name.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from vmexplorer.worker import RunConfig, RunQueue, build_plan, gpu_available

CONFIG = RunConfig("alexnet", 2, 64, 0, "uvm", {}, [], 3)  # capacity 0 here: the runners below ignore it


def simulated(config: RunConfig, progress: Callable[[int, int, float], None],
              should_stop: Callable[[], bool]) -> bytes:
    """What the default runner does, with the simulator in place of the GPU."""
    from vmexplorer.session import new_session, session_to_bytes
    from vmexplorer.simulator import H100_DEFAULT, simulate

    graph, plan = build_plan(config)
    for i in range(config.iterations):
        progress(i + 1, config.iterations, 1.0 / (i + 1))
    return session_to_bytes(new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT))


def slow(config: RunConfig, progress: Callable[[int, int, float], None], should_stop: Callable[[], bool]) -> bytes:
    """One iteration per 0.1 s, stopping when asked, as the executor does."""
    for i in range(config.iterations):
        if should_stop():
            break
        time.sleep(0.1)
        progress(i + 1, config.iterations, 2.0)
    return b"partial"


def stubborn(config: RunConfig, progress: Callable[[int, int, float], None],
             should_stop: Callable[[], bool]) -> bytes:
    """A hung run: never looks at should_stop."""
    progress(1, config.iterations, 1.0)
    time.sleep(60)
    return b""


def by_model(config: RunConfig, progress: Callable[[int, int, float], None],
             should_stop: Callable[[], bool]) -> bytes:
    """The model name says what to do: crash, segfault, raise, or finish at once."""
    if config.model == "exit":
        os._exit(1)
    if config.model == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if config.model == "raise":
        raise ValueError("cuDNN said no")
    progress(1, 1, 0.5)
    return f"ran in {os.getpid()}".encode()


def _config(model: str, iterations: int = 3) -> RunConfig:
    return CONFIG._replace(model=model, iterations=iterations)


def _until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_results_come_back_as_session_bytes_that_load() -> None:
    from vmexplorer.session import session_from_bytes

    with RunQueue(runner=simulated) as q:
        graph, _ = build_plan(CONFIG._replace(capacity_bytes=1 << 40))
        capacity = (graph.min_capacity[0] + graph.footprint) // 2
        config = ("alexnet", 2, 64, capacity, "autovm", {"prefetch_distance": 2}, [], 4)
        job = q.submit(config)
        st = q.wait(job, 30)
        assert st.state == "done", st.message
        assert (st.iteration, st.iterations, st.loss) == (4, 4, 0.25)
        session = session_from_bytes(st.result or b"")
        assert (session.plan.model, session.plan.policy, session.plan.capacity) == \
            ("alexnet", "autovm", capacity)
        assert session.plan.options["prefetch_distance"] == 2


def test_manual_moves_reach_the_plan() -> None:
    graph, _ = build_plan(CONFIG._replace(capacity_bytes=1 << 40))
    uses = {t: sorted({x.producer, *x.consumers}) for t, x in enumerate(graph.tensors) if not x.persistent}
    t, first, last = next((t, a, b) for t, u in uses.items() for a, b in zip(u, u[1:]) if b - a >= 2)
    config = CONFIG._replace(capacity_bytes=graph.footprint, policy="manual",
                             moves=[(graph.tensors[t].name, graph.ops[first].name, graph.ops[last - 1].name)])
    _, plan = build_plan(config)
    assert [(m.tensor, m.offload_after, m.prefetch_after) for m in plan.moves] == [(t, first, last - 1)]


def test_jobs_run_in_order_one_at_a_time_with_positions_and_progress() -> None:
    with RunQueue(runner=slow) as q:
        a, b, c = q.submit(_config("a", 4)), q.submit(_config("b", 2)), q.submit(_config("c", 1))
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


def test_cancel_a_queued_and_a_running_job() -> None:
    with RunQueue(runner=slow, grace_s=5) as q:
        a, b = q.submit(_config("a", 200)), q.submit(_config("b", 1))
        assert q.cancel(b) is True
        sb = q.status(b)
        assert sb.state == "cancelled" and sb.queue_position is None and "before it started" in sb.message
        _until(lambda: q.status(a).iteration >= 1)
        assert q.cancel(a) is True
        sa = q.wait(a, 10)
        assert sa.state == "cancelled" and sa.iteration < 200, sa
        assert q.cancel(a) is False  # already over
        # the same worker goes on with the next run
        c = q.submit(_config("c", 1))
        assert q.wait(c, 10).state == "done"


def test_a_run_that_ignores_cancel_is_terminated_after_the_grace_period() -> None:
    with RunQueue(runner=stubborn, grace_s=0.3) as q:
        a = q.submit(_config("a"))
        _until(lambda: q.status(a).iteration == 1)
        q.cancel(a)
        st = q.wait(a, 10)
        assert st.state == "cancelled" and "terminated" in st.message


def test_a_hung_run_times_out_as_failed() -> None:
    with RunQueue(runner=stubborn, timeout_s=0.5) as q:
        st = q.wait(q.submit(_config("a")), 10)
        assert st.state == "failed" and "longer than 0.5 s" in st.message


def test_crashes_and_errors_fail_the_job_and_the_queue_goes_on() -> None:
    with RunQueue(runner=by_model) as q:
        jobs = [q.submit(_config(m)) for m in ("ok", "exit", "segv", "raise", "ok")]
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
        q.submit(_config("a", 0))
    a, b = q.submit(_config("a", 100)), q.submit(_config("b"))
    _until(lambda: q.status(a).state == "running")
    q.close()
    assert q.status(a).state == "cancelled" and q.status(b).state == "cancelled"
    with pytest.raises(RuntimeError, match="closed"):
        q.submit(_config("c"))
    with pytest.raises(KeyError):
        q.status(99)


def test_one_run_at_a_time_per_gpu() -> None:
    with RunQueue(runner=slow, devices=(0, 1)) as q:
        a, b, c = q.submit(_config("a", 100)), q.submit(_config("b", 100)), q.submit(_config("c", 1))
        _until(lambda: q.status(a).iteration >= 1 and q.status(b).iteration >= 1)
        assert {q.status(a).gpu, q.status(b).gpu} == {0, 1}
        assert (q.status(c).state, q.status(c).queue_position) == ("queued", 1)
        q.cancel(a)
        assert q.wait(c, 10).state == "done" and q.status(c).gpu == q.status(a).gpu
        assert q.status(b).state == "running"


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

    config = RunConfig("resnet152", 8, 224, 2**30, "uvm", {}, [], 10_000)
    graph, plan = build_plan(config)
    fit = iterations_that_fit(graph, plan)
    assert 0 < fit < config.iterations
    with pytest.raises(ValueError, match=f"would not fit in one session: ask for at most {fit - 1}"):
        run_on_gpu(config, lambda *_: None, lambda: False)  # raises before CuPy is imported: no GPU here
