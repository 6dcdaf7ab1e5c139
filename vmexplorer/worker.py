"""GPU runs for the app, in worker processes: queued, one at a time per GPU, cancellable, crash-proof.

The Panel server never imports CuPy. `RunQueue.submit(request)` queues a run; one thread per GPU hands
the runs, in order, to a worker process of its own (multiprocessing's 'spawn' context, so CUDA only ever
initialises in the worker). The worker reports progress over a pipe and sends back the measured
session. If the worker dies (a segfault, a CUDA error that aborts, a hang that had to be killed) its job is
`failed` with a message saying so, and the next job starts a fresh worker: the server carries on.

`cancel(job_id)` drops a queued job; for a running one it sets the worker's stop flag (the executor's
`should_stop`, checked between iterations) and, if the run has not stopped after `grace_s`, terminates
the worker. The runner, the function a worker calls, is injectable: the default builds the graph of the plan
it is given (the plan the page shows, compiled once, when it was made), runs `engine.executor.execute`,
whose check is the one this plan gets, and returns the measured `Session`; tests use CPU runners that
sleep, raise or crash.

The server should use `shared_queue()`, one queue for all its browser sessions. A server of several
processes has one queue in each; a run takes its GPU through a lock on a file named after the GPU
(`DeviceLock`), so runs from every process (and every server on the machine) still go one at a time. `gpu_available()`
says whether CuPy and a GPU are there without importing CuPy here: it asks a short subprocess, once,
and remembers the answer; `gpu_check()` asks it in a background thread so a page never waits for it.
"""

from __future__ import annotations

import atexit
import importlib.util
import itertools
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from .pool import start_process, stop_process

if TYPE_CHECKING:
    from .plan import Plan
    from .session import Session

State = Literal["queued", "running", "done", "failed", "cancelled"]
Progress = Callable[[int, int, float], None]
Runner = Callable[["RunRequest", Progress, Callable[[], bool]], Any]


class RunRequest(NamedTuple):
    """What to run: a compiled plan (its config says the model and the capacity) for some iterations."""

    plan: Plan
    iterations: int


@dataclass(frozen=True)
class JobStatus:
    job_id: int
    state: State
    queue_position: int | None  # 1 = next to run; None unless queued
    iteration: int  # iterations finished (warm-up included), as the runner reported
    iterations: int  # how many the run makes (warm-up included, once the runner has said)
    loss: float | None  # the last iteration's
    message: str  # what happened, in a sentence; the error when failed
    result: Any = field(default=None, repr=False)  # what the runner returned (the default's: a Session)
    gpu: int | None = None  # the device it ran (or runs) on


# --- the default runner: runs in the worker process ------------------------------------------------
def run_on_gpu(request: RunRequest, progress: Progress, should_stop: Callable[[], bool]) -> Session:
    """Run the plan on the GPU and return its measured session."""
    from .engine.executor import RunSettings, execute, measured_session
    from .session.files import iterations_that_fit
    from .session.planned import graph_of

    plan, iterations = request
    graph = graph_of(plan.config, plan.planned_with)
    settings = RunSettings(iterations=iterations)
    fit = iterations_that_fit(graph, plan)
    if iterations + settings.counted > fit:  # refused before the GPU works, not after
        raise ValueError(f"{iterations} iterations of this plan would not fit in one session: ask for at "
                         f"most {fit - settings.counted}")
    result = execute(graph, plan, settings, progress=progress,
                     should_stop=should_stop)
    if not result.losses:
        raise RuntimeError("the run stopped before it recorded an iteration")
    session: Session = measured_session(graph, plan, result, where=" from the app")
    return session


def _worker_main(conn: Any, stop: Any, device: int | None) -> None:
    """A worker process: run jobs from `conn` until it closes. Ctrl-C belongs to the server."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        job_id, request, runner = msg

        def progress(i: int, n: int, loss: float, job_id: int = job_id) -> None:
            conn.send(("progress", job_id, int(i), int(n), float(loss)))

        try:
            result = runner(RunRequest(*request), progress, stop.is_set)
        except Exception as e:
            text = " ".join(str(e).split())
            conn.send(("failed", job_id, f"{type(e).__name__}: {text}" if text else type(e).__name__))
        else:
            conn.send(("done", job_id, result))


# --- the server side -------------------------------------------------------------------------------
class QueueFull(ValueError):
    """A run the queue will not take now: its visitor has as many under way as allowed, or the queue is full."""


class _Job:
    def __init__(self, job_id: int, request: RunRequest, runner: Runner, owner: str = "") -> None:
        self.id, self.request, self.runner, self.owner = job_id, request, runner, owner
        self.state: State = "queued"
        self.iteration, self.iterations = 0, request.iterations
        self.loss: float | None = None
        self.message = "waiting for the GPU"
        self.result: Any = None
        self.gpu: int | None = None
        self.cancel_requested = False


LOCK_DIR_ENV = "VMEXPLORER_LOCK_DIR"  # where the GPUs' lock files are (default: the system's temp folder)


class DeviceLock:
    """This machine's claim on one GPU, shared by every process that runs on it: an exclusive `flock`
    on a file named after the GPU. The kernel lets go of it when its holder exits, however it exits,
    so a crashed server never leaves the GPU claimed. Where there is no `flock` (Windows, which CuPy
    runs need not serve), every acquire succeeds."""

    def __init__(self, device: int | None) -> None:
        folder = os.environ.get(LOCK_DIR_ENV) or tempfile.gettempdir()
        self.path = os.path.join(folder, f"vmexplorer-gpu-{'default' if device is None else device}.lock")
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the GPU if no other process holds it; False at once if one does."""
        try:
            import fcntl
        except ImportError:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file lets go of its lock
            self._fd = None


class _Slot:
    """One GPU: a thread that runs its jobs one at a time in a worker process it restarts as needed."""

    def __init__(self, queue: RunQueue, device: int | None) -> None:
        self.queue, self.device = queue, device
        self.lock = DeviceLock(device)
        self.proc: Any = None
        self.conn: Any = None
        self.stop: Any = None  # the worker's should_stop flag; a fresh one with each worker
        self.thread = threading.Thread(target=self._loop, name=f"vmexplorer-gpu-{device}", daemon=True)

    def _start_worker(self) -> None:
        self.stop = self.queue._ctx.Event()  # a killed worker may have died holding the old one's lock
        self.proc, self.conn = start_process(self.queue._ctx, _worker_main, (self.stop, self.device),
                                             f"vmexplorer-worker-{self.device}")

    def kill_worker(self) -> None:
        proc, conn = self.proc, self.conn
        self.proc = self.conn = None
        stop_process(proc, conn)

    def _loop(self) -> None:
        q = self.queue
        while True:
            with q._cond:
                while not q._pending and not q._closed:
                    q._cond.wait()
                if q._closed:
                    return
                job = q._pending.pop(0)
                job.state, job.gpu, job.message = "running", self.device, "starting"
            if not self._claim(job):
                continue
            try:
                self._run(job)
            except Exception as e:  # never let the slot's thread die: the queue must go on
                self.kill_worker()
                if job.cancel_requested:
                    q._finish(job, "cancelled", "cancelled")
                else:
                    q._finish(job, "failed", f"the run's worker failed: {type(e).__name__}: {e}")
            finally:
                self.lock.release()

    def _claim(self, job: _Job) -> bool:
        """Wait until this process may use the GPU (another process of the server, or another server,
        may be running on it); False, the job ended, if it is cancelled or the queue closes meanwhile."""
        q = self.queue
        while not self.lock.try_acquire():
            if job.cancel_requested or q._closed:
                q._finish(job, "cancelled", "cancelled before it started")
                return False
            with q._cond:
                job.message = "waiting for the GPU: a run from another process of the server is on it"
            time.sleep(q.poll_s)
        return True

    def _run(self, job: _Job) -> None:
        q = self.queue
        if self.proc is None or not self.proc.is_alive():
            self.kill_worker()
            self._start_worker()
        self.stop.clear()
        conn, proc = self.conn, self.proc  # kill_worker (from close) may clear the attributes meanwhile
        conn.send((job.id, tuple(job.request), job.runner))
        started, deadline = time.monotonic(), None
        while True:
            # The stop flag, the grace period and the time limit are checked on every pass, not only
            # when the poll times out: a run that reports progress more often than poll_s would
            # otherwise never be asked to stop, nor terminated when it ignores the request.
            now = time.monotonic()
            if job.cancel_requested and deadline is None:
                self.stop.set()
                deadline = now + q.grace_s
            if deadline is not None and now > deadline:
                self.kill_worker()
                q._finish(job, "cancelled", f"cancelled: the run did not stop within {q.grace_s:g} s, so its "
                                            "worker process was terminated")
                return
            if q.timeout_s is not None and now - started > q.timeout_s:
                self.kill_worker()
                q._finish(job, "failed", f"the run took longer than {q.timeout_s:g} s (a hung GPU?), so its "
                                         "worker process was terminated; the next run starts a fresh one")
                return
            try:
                ready = conn.poll(q.poll_s)
                msg = conn.recv() if ready else None
                gone = msg is None and not proc.is_alive() and not conn.poll(0)
            except (EOFError, OSError):
                self._died(job, proc)
                return
            if msg is not None:
                kind = msg[0]
                if kind == "progress":
                    with q._cond:
                        job.iteration, job.iterations, job.loss = msg[2], msg[3], msg[4]
                        job.message = f"iteration {msg[2]} of {msg[3]}, loss {msg[4]:.4f}"
                    continue
                stopped = job.cancel_requested
                if kind == "done":
                    if stopped:
                        q._finish(job, "cancelled", f"cancelled after iteration {job.iteration}", msg[2])
                    else:
                        q._finish(job, "done", f"finished {job.iteration} iterations", msg[2])
                else:
                    q._finish(job, "cancelled" if stopped else "failed",
                              f"cancelled ({msg[2]})" if stopped else msg[2])
                return
            if gone:
                self._died(job, proc)
                return

    def _died(self, job: _Job, proc: Any) -> None:
        proc.join(5)
        code = proc.exitcode
        self.kill_worker()
        if job.cancel_requested:
            self.queue._finish(job, "cancelled", "cancelled (the worker process ended)")
            return
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        elif code is not None:
            how = f"exited with status {code}"
        else:
            how = "stopped answering"
        self.queue._finish(job, "failed", f"the GPU worker process {how} during the run (a crash in CUDA, "
                                          "cuDNN or the driver?); the server is fine, and the next run "
                                          "starts a fresh worker")


class RunQueue:
    """GPU runs, queued and run one at a time per GPU in worker processes. Thread-safe.

    devices: the GPUs to use, one worker each (None: let CUDA pick, as one GPU). runner: what a worker
    calls with (RunRequest, progress, should_stop); it must be picklable (a module-level function).
    grace_s: how long a cancelled run may take to stop before its worker is terminated. timeout_s: a
    run longer than this is taken for a hang and its worker terminated (None: no limit). per_owner: how
    many runs one owner (a visitor's address) may have queued or running at once; max_queued: how many
    runs may wait in all. A class shares one GPU: one student must not fill its queue.
    """

    def __init__(self, runner: Runner = run_on_gpu, devices: Sequence[int | None] = (None,),
                 grace_s: float = 10.0, timeout_s: float | None = None, poll_s: float = 0.05,
                 per_owner: int = 1, max_queued: int = 32) -> None:
        if not devices:
            raise ValueError("a RunQueue needs at least one device")
        try:
            pickle.dumps(runner)
        except Exception as e:  # a lambda or a closure cannot reach a spawned worker
            raise TypeError(f"the runner must be a module-level function a worker process can import: {e}") \
                from None
        self.runner, self.grace_s, self.timeout_s, self.poll_s = runner, grace_s, timeout_s, poll_s
        self.per_owner, self.max_queued = per_owner, max_queued
        self._ctx = multiprocessing.get_context("spawn")
        self._cond = threading.Condition()
        self._jobs: dict[int, _Job] = {}
        self._pending: list[_Job] = []
        self._ids = itertools.count(1)
        self._closed = False
        self._slots = [_Slot(self, d) for d in devices]
        for s in self._slots:
            s.thread.start()

    def submit(self, request: RunRequest | Sequence[Any], owner: str = "") -> int:
        """Queue a run for `owner` (empty: no one in particular, not limited); returns its job id. QueueFull
        when the owner has `per_owner` runs queued or running, or `max_queued` runs wait already."""
        cfg = RunRequest(*request)
        if not isinstance(cfg.iterations, int) or cfg.iterations < 1:
            raise ValueError(f"iterations must be a whole number from 1, not {cfg.iterations!r}")
        with self._cond:
            if self._closed:
                raise RuntimeError("the run queue is closed")
            mine = sum(1 for j in self._jobs.values() if j.owner == owner and j.state in ("queued", "running"))
            if owner and mine >= self.per_owner:
                raise QueueFull(f"you have {mine} GPU run(s) queued or running, as many as one visitor may: wait for "
                                "it or cancel it (in any of your tabs)")
            if len(self._pending) >= self.max_queued:
                raise QueueFull(f"the GPU's queue is full ({len(self._pending)} runs waiting): try again later")
            job = _Job(next(self._ids), cfg, self.runner, owner)
            self._jobs[job.id] = job
            self._pending.append(job)
            self._cond.notify_all()
            return job.id

    def status(self, job_id: int) -> JobStatus:
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None:
                raise KeyError(f"no run {job_id}")
            position = self._pending.index(job) + 1 if job.state == "queued" else None
            return JobStatus(job.id, job.state, position, job.iteration, job.iterations, job.loss,
                             job.message, job.result, job.gpu)

    def jobs(self) -> list[JobStatus]:
        """Every job this queue knows, oldest first."""
        with self._cond:
            ids = list(self._jobs)
        return [self.status(i) for i in ids]

    def cancel(self, job_id: int) -> bool:
        """Cancel a run: a queued one leaves the queue; a running one is asked to stop, then terminated
        after the grace period. Returns False if the job had already ended."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None:
                raise KeyError(f"no run {job_id}")
            if job.state == "queued":
                self._pending.remove(job)
                job.state, job.message = "cancelled", "cancelled before it started"
                self._cond.notify_all()
                return True
            if job.state == "running":
                job.cancel_requested = True
                job.message = "stopping"
                return True
            return False

    def wait(self, job_id: int, timeout: float | None = None) -> JobStatus:
        """Block until the job has ended (or the timeout passes); returns its status."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._jobs[job_id].state in ("queued", "running"):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
        return self.status(job_id)

    def forget(self, job_id: int) -> None:
        """Drop an ended job (and its result) from memory."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is not None and job.state not in ("queued", "running"):
                del self._jobs[job_id]

    def close(self) -> None:
        """Cancel what is queued, stop the workers (a running job is terminated) and the threads."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            for job in self._pending:
                job.state, job.message = "cancelled", "cancelled: the server is shutting down"
            self._pending.clear()
            for job in self._jobs.values():
                if job.state == "running":
                    job.cancel_requested = True
            self._cond.notify_all()
        for s in self._slots:
            s.kill_worker()
        for s in self._slots:
            s.thread.join(5)

    def __enter__(self) -> RunQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _finish(self, job: _Job, state: State, message: str, result: Any = None) -> None:
        with self._cond:
            if job.state in ("done", "failed", "cancelled"):
                return
            job.state, job.message, job.result = state, message, result
            self._cond.notify_all()


@lru_cache(maxsize=1)
def shared_queue() -> RunQueue:
    """The server's one queue (Panel runs the app's script once per browser session, so the queue that
    keeps runs one at a time per GPU must be shared by all of them); closed when the server exits."""
    per_owner, max_queued = queue_limits()
    queue = RunQueue(per_owner=per_owner, max_queued=max_queued)
    atexit.register(queue.close)
    return queue


def queue_limits() -> tuple[int, int]:
    """The server's limits on runs (RunQueue's per_owner and max_queued), as its environment sets them."""
    return _env_count(RUNS_PER_VISITOR_ENV, 1), _env_count(MAX_QUEUED_ENV, 32)


RUNS_PER_VISITOR_ENV = "VMEXPLORER_RUNS_PER_VISITOR"  # runs one visitor may have queued or running (default 1)
MAX_QUEUED_ENV = "VMEXPLORER_MAX_QUEUED_RUNS"  # runs that may wait for the GPUs in all (default 32)


def _env_count(name: str, default: int) -> int:
    """A count from 1 set in the environment, else `default` (a value that is not one is said, and ignored)."""
    text = os.environ.get(name, "")
    if not text:
        return default
    if text.isdigit() and 1 <= int(text) <= 10_000:
        return int(text)
    print(f"vmexplorer: {name}={text[:20]!r} is not a count from 1 to 10000; using {default}", file=sys.stderr)
    return default



# --- is there a GPU? -------------------------------------------------------------------------------
_PROBE = """
import sys
try:
    import cupy
except Exception as e:
    print("no", f"CuPy could not be imported: {type(e).__name__}: {e}"); sys.exit()
try:
    n = cupy.cuda.runtime.getDeviceCount()
except Exception as e:
    print("no", f"no usable NVIDIA GPU or driver: {type(e).__name__}: {e}"); sys.exit()
if n < 1:
    print("no", "no NVIDIA GPU is visible to CUDA"); sys.exit()
name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
name = name.decode() if isinstance(name, bytes) else str(name)
print("yes", f"{n} GPU{'s' if n > 1 else ''}: {name}")
"""


_CHECK: list[threading.Thread] = []
_CHECK_LOCK = threading.Lock()


def gpu_check() -> tuple[bool, str] | None:
    """`gpu_available()`'s answer if it is known, else None, having started the check in a background
    thread (once per process): a page can draw at once and ask again later."""
    with _CHECK_LOCK:
        if not _CHECK:
            _CHECK.append(threading.Thread(target=gpu_available, name="vmexplorer-gpu-check", daemon=True))
            _CHECK[0].start()
        thread = _CHECK[0]
    return None if thread.is_alive() else gpu_available()


@lru_cache(maxsize=1)
def gpu_available(timeout_s: float = 60.0) -> tuple[bool, str]:
    """(True, "1 GPU: NVIDIA H100 ...") or (False, why not), asked of a subprocess once and remembered,
    so CuPy and CUDA never load in the calling process."""
    if importlib.util.find_spec("cupy") is None:
        return False, "CuPy is not installed (pip install -e '.[gpu]' on a machine with an NVIDIA GPU)"
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                             timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"the GPU check did not answer within {timeout_s:g} s (a hung driver?)"
    except OSError as e:
        return False, f"the GPU check could not start: {e}"
    line = (out.stdout.strip().splitlines() or [""])[-1]
    answer, _, text = line.partition(" ")
    if answer == "yes":
        return True, text
    if answer == "no":
        return False, text
    err = " ".join(out.stderr.split())[-300:]
    return False, f"the GPU check failed (exit status {out.returncode}){': ' + err if err else ''}"
