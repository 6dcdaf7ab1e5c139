"""The app's work pool: slow work in worker processes, one job per owner, cancellable, crash-proof.

The jobs are module-level functions, as the 'spawn' worker processes import them by name.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from vmexplorer.pool import Cancelled, WorkFailed, WorkPool


def pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def raises(text: str) -> None:
    raise ValueError(text)


def dies(how: str) -> None:
    if how == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


def unpicklable() -> object:
    return lambda: None


def _until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_a_job_runs_in_a_worker_process_and_its_result_comes_back() -> None:
    with WorkPool(1) as pool:
        assert pool.submit(pid_after, 0, owner="a").result(30) not in (os.getpid(), None)


def test_a_job_that_raises_fails_with_the_error_in_words_and_the_worker_goes_on() -> None:
    with WorkPool(1) as pool:
        first = pool.submit(pid_after, 0).result(30)
        with pytest.raises(WorkFailed, match="ValueError: no such capacity"):
            pool.submit(raises, "no  such\ncapacity").result(30)
        assert pool.submit(pid_after, 0).result(30) == first


def test_an_owners_new_job_replaces_the_one_running_whose_process_is_stopped() -> None:
    with WorkPool(1) as pool:
        first = pool.submit(pid_after, 0).result(30)
        slow = pool.submit(pid_after, 30, owner="student")
        _until(lambda: slow.running())
        started = time.monotonic()
        after = pool.submit(pid_after, 0, owner="student")
        with pytest.raises(Cancelled, match="replaced by a newer request"):
            slow.result(30)
        assert after.result(30) != first  # a fresh worker took the stopped one's place
        assert time.monotonic() - started < 20  # not after the 30 s the replaced job would have taken


def test_an_owners_waiting_job_is_dropped_for_their_new_one_and_other_owners_keep_theirs() -> None:
    with WorkPool(1) as pool:
        busy = pool.submit(pid_after, 1.0, owner="teacher")
        _until(lambda: busy.running())
        mine = pool.submit(pid_after, 0, owner="student")
        theirs = pool.submit(pid_after, 0, owner="other")
        assert (pool.place(mine), pool.place(theirs)) == (1, 2)
        again = pool.submit(pid_after, 0, owner="student")
        with pytest.raises(Cancelled):
            mine.result(30)
        assert pool.place(theirs) == 1 and pool.place(again) == 2  # the new one waits at the back
        for f in (busy, theirs, again):
            assert isinstance(f.result(30), int)


def test_jobs_of_different_owners_run_side_by_side_in_as_many_workers() -> None:
    with WorkPool(2) as pool:
        pool.submit(pid_after, 0, owner="warm").result(30)
        a, b = pool.submit(pid_after, 1.5, owner="a"), pool.submit(pid_after, 1.5, owner="b")
        _until(lambda: a.running() and b.running())
        assert a.result(30) != b.result(30)


def test_cancel_stops_an_owners_job_and_says_so() -> None:
    with WorkPool(1) as pool:
        job = pool.submit(pid_after, 30, owner="a")
        _until(lambda: job.running())
        assert pool.cancel("a", "cancelled by its visitor")
        with pytest.raises(Cancelled, match="cancelled by its visitor"):
            job.result(20)
        assert not pool.cancel("a")


@pytest.mark.parametrize("how, said", [("exit", "exited with status 3"), ("kill", "killed by SIGKILL")])
def test_a_worker_that_dies_fails_its_job_in_words_and_the_next_job_runs(how: str, said: str) -> None:
    with WorkPool(1) as pool:
        with pytest.raises(WorkFailed, match=said):
            pool.submit(dies, how).result(30)
        assert isinstance(pool.submit(pid_after, 0).result(30), int)


def test_a_job_past_the_time_limit_is_stopped_and_fails() -> None:
    with WorkPool(1, timeout_s=1.0) as pool:
        pool.submit(pid_after, 0).result(30)  # started
        with pytest.raises(WorkFailed, match="longer than 1 s"):
            pool.submit(pid_after, 30).result(30)


def test_a_result_that_cannot_be_sent_back_fails_its_job() -> None:
    with WorkPool(1) as pool:
        with pytest.raises(WorkFailed, match="could not be sent back"):
            pool.submit(unpicklable).result(30)
        assert isinstance(pool.submit(pid_after, 0).result(30), int)


def test_closing_cancels_what_waits_and_stops_the_workers() -> None:
    pool = WorkPool(1)
    running = pool.submit(pid_after, 30, owner="a")
    waiting = pool.submit(pid_after, 0, owner="b")
    _until(lambda: running.running())
    pool.close()
    for f in (running, waiting):
        with pytest.raises(Cancelled):
            f.result(10)
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(pid_after, 0)


def test_a_job_that_would_wait_behind_another_owners_starts_an_extra_worker_up_to_the_cap_which_leaves_when_idle(
        ) -> None:
    with WorkPool(1, max_workers=2, idle_s=3.0) as pool:
        slow = pool.submit(pid_after, 6, owner="searching")
        _until(lambda: pool.place(slow) is None)  # running
        quick = pool.submit(pid_after, 0, owner="simulating")
        quick_pid = quick.result(30)
        assert not slow.done(), "the second owner's job waited out the first"
        assert pool.size == 2 and quick_pid != slow.result(30)
        # the cap reached: a third owner's job waits its turn
        slow = pool.submit(pid_after, 3, owner="searching")
        other = pool.submit(pid_after, 3, owner="simulating")
        _until(lambda: pool.place(slow) is None and pool.place(other) is None)  # both running
        third = pool.submit(pid_after, 0, owner="opening")
        assert pool.size == 2 and pool.place(third) == 1
        third.result(30)
        assert slow.done() or other.done()  # it ran once one of them had ended
        _until(lambda: pool.size == 1, timeout=15)  # the extra worker left once idle
