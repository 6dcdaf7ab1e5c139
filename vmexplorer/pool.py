"""The app's slow work (a simulation, a search, the paging cliff, reading an uploaded session, an export)
in worker processes, so that the server's event loop only answers browsers and applies results.

A page's work taking seconds on the event loop held every other visitor's page for as long: a
Simulate of ResNet-152 held another visitor's GET for 14 s. `WorkPool.submit(fn, *args, owner=...)` runs
`fn(*args)` in one of a few worker processes (multiprocessing's 'spawn' context: a worker starts clean,
imports what it is told to at start and keeps it warm) and returns a `concurrent.futures.Future` of the
result. Threads would not do: the work is Python and would hold the GIL from the event loop.

Each owner (a visitor) has at most one job: a new one replaces the one they had, queued or running (its
worker is terminated and a fresh one started in its place), and the replaced job's future raises
`Cancelled`. While every worker is busy, a new job starts an extra worker (up to `max_workers`; it
leaves once idle), so a visitor's job does not wait behind another's; past the cap, jobs wait in the
order they came, a visitor behind at most one job of each other visitor. A job that raises fails its
future with `WorkFailed` and the error's text; a worker that dies (a crash, the kernel's out-of-memory
killer) or passes `timeout_s` fails its job and is replaced. The server should use `shared_pool()`, one
pool for all its pages.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

WORKER_NICE = 5  # less CPU for a worker than for the server's event loop when both want it (10 starved a lesson step
# of a browser test under CI load past 60 s)


class WorkFailed(Exception):
    """A job raised in its worker, or its worker died or ran past the pool's time limit: in words."""


class Cancelled(Exception):
    """A job that was cancelled, or replaced by its owner's next one, before it finished."""


@dataclass(eq=False)
class _Job:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    owner: str
    future: Future[Any] = field(default_factory=Future)
    cancel: str = ""  # why it was cancelled while it ran: the worker running it stops it
    started: float | None = None


def _worker_main(conn: Any, preload: Sequence[str]) -> None:
    """A worker process: run jobs from `conn` one at a time until it closes. Ctrl-C belongs to the server."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "nice"):  # the event loop first: a page waiting on its answer, not on someone's search
        os.nice(WORKER_NICE)
    for name in preload:  # the first job should not wait for the imports
        importlib.import_module(name)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, args = msg
        try:
            reply: tuple[str, Any] = ("done", fn(*args))
        except Exception as e:
            text = " ".join(str(e).split())
            reply = ("failed", f"{type(e).__name__}: {text}" if text else type(e).__name__)
        try:
            conn.send(reply)
        except Exception as e:  # a result that cannot be pickled must not leave the server waiting
            conn.send(("failed", f"the result could not be sent back ({type(e).__name__}: {e})"))


def start_process(ctx: Any, target: Callable[..., None], args: tuple[Any, ...], name: str) -> tuple[Any, Any]:
    """A worker process of `ctx` running `target(conn, *args)`, and the server's end of its pipe."""
    parent, child = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=target, args=(child, *args), name=name, daemon=True)
    proc.start()
    child.close()  # so the pipe reports EOF when the worker dies
    return proc, parent


def stop_process(proc: Any, conn: Any) -> None:
    """Close a worker's pipe and end it: terminated, killed if it does not go."""
    if conn is not None:
        conn.close()
    if proc is not None and proc.is_alive():
        proc.terminate()
        proc.join(2)
        if proc.is_alive():
            proc.kill()
            proc.join(2)


class _Worker:
    """One worker process and the thread that feeds it the pool's jobs, one at a time; an extra one starts
    its process for its first job and leaves the pool once idle."""

    def __init__(self, pool: WorkPool, index: int, extra: bool = False) -> None:
        self.pool, self.index, self.extra = pool, index, extra
        self.proc: Any = None
        self.conn: Any = None
        self.thread = threading.Thread(target=self._loop, name=f"vmexplorer-work-{index}", daemon=True)

    def start_process(self) -> None:
        self.proc, self.conn = start_process(self.pool._ctx, _worker_main, (self.pool.preload,),
                                             f"vmexplorer-work-{self.index}")

    def stop_process(self) -> None:
        proc, conn = self.proc, self.conn
        self.proc = self.conn = None
        stop_process(proc, conn)

    def _loop(self) -> None:
        pool = self.pool
        while True:
            job = pool._next(self)
            if job is None:
                self.stop_process()  # the pool closed, or an extra worker it no longer needs
                return
            try:
                if self.proc is None or not self.proc.is_alive():
                    self.stop_process()
                    self.start_process()
                self._run(job)
            except Exception as e:  # the thread must not die: the pool goes on
                self.stop_process()
                pool._end(job, WorkFailed(f"the work's process failed: {type(e).__name__}: {e}"))
            if self.proc is None and not pool._closed:
                self.start_process()  # warm for the next job

    def _run(self, job: _Job) -> None:
        pool, conn, proc = self.pool, self.conn, self.proc
        conn.send((job.fn, job.args))
        while True:
            if job.cancel:
                self.stop_process()
                pool._end(job, Cancelled(job.cancel))
                return
            assert job.started is not None
            if time.monotonic() - job.started > pool.timeout_s:
                self.stop_process()
                pool._end(job, WorkFailed(f"it took longer than {pool.timeout_s:g} s, so it was stopped"))
                return
            try:
                msg = conn.recv() if conn.poll(pool.poll_s) else None
                gone = msg is None and not proc.is_alive() and not conn.poll(0)
            except (EOFError, OSError):  # the pipe closed: the worker is gone
                msg, gone = None, True
            if msg is not None:
                pool._end(job, msg[1] if msg[0] == "done" else WorkFailed(msg[1]))
                return
            if gone:
                proc.join(2)
                self.stop_process()
                pool._end(job, WorkFailed(_died(proc.exitcode)))
                return


def _died(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
        if code == -signal.SIGKILL:
            how += " (out of memory?)"
    else:
        how = f"exited with status {code}"
    return f"the process doing it {how}; the server is fine"


class WorkPool:
    """Slow work in `workers` processes, one job per owner at a time. Thread-safe.

    fn must be picklable (a module-level function) and so must its arguments and result. preload: modules
    each worker imports as it starts. timeout_s: a job running longer is stopped and fails."""

    def __init__(self, workers: int = 2, timeout_s: float = 120.0, preload: Sequence[str] = (),
                 poll_s: float = 0.02, max_workers: int | None = None, idle_s: float = 60.0) -> None:
        if workers < 1:
            raise ValueError("a WorkPool needs at least one worker")
        self.timeout_s, self.preload, self.poll_s, self.idle_s = timeout_s, tuple(preload), poll_s, idle_s
        self.max_workers = max(workers, max_workers or workers)
        self._ctx = multiprocessing.get_context("spawn")
        self._cond = threading.Condition()
        self._waiting: list[_Job] = []
        self._running: dict[str, _Job] = {}  # by owner
        self._working: set[_Worker] = set()  # workers running a job
        self._closed = False
        self._workers = [_Worker(self, i) for i in range(workers)]
        self._made = workers  # workers ever made: each one's name
        for w in self._workers:
            w.start_process()  # importing takes a second or two: started now, before anyone asks
            w.thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, owner: str = "") -> Future[Any]:
        """Run `fn(*args)` in a worker; the owner's job before it (if any) is cancelled. An empty owner is
        no one in particular: its jobs never replace each other."""
        job = _Job(fn, args, owner)
        with self._cond:
            if self._closed:
                raise RuntimeError("the work pool is closed")
            if owner:
                self._cancel_owner(owner, "replaced by a newer request")
            self._waiting.append(job)
            # every worker busy with someone else's job: one more, up to the cap, rather than a visitor
            # waiting out another's search
            idle = len(self._workers) - len(self._working)
            if idle < len(self._waiting) and len(self._workers) < self.max_workers:
                extra = _Worker(self, self._made, extra=True)
                self._made += 1
                self._workers.append(extra)
                extra.thread.start()  # its process is started by its thread, off the caller's
            self._cond.notify_all()
        return job.future

    @property
    def size(self) -> int:
        """Worker processes now: `workers`, and extras (up to `max_workers`) while jobs would wait."""
        with self._cond:
            return len(self._workers)

    def cancel(self, owner: str, why: str = "cancelled") -> bool:
        """Cancel `owner`'s job, waiting or running; False if they have none."""
        with self._cond:
            return self._cancel_owner(owner, why)

    def place(self, future: Future[Any]) -> int | None:
        """Where the job of `future` waits: 1 is next; None once it runs (or has ended)."""
        with self._cond:
            return next((i + 1 for i, j in enumerate(self._waiting) if j.future is future), None)

    def close(self) -> None:
        """Cancel what waits and what runs, and stop the workers."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            for job in [*self._waiting, *self._running.values()]:
                job.cancel = "the server is stopping"
                if job.started is None:
                    job.future.set_exception(Cancelled(job.cancel))
            self._waiting.clear()
            self._cond.notify_all()
        with self._cond:
            workers = list(self._workers)
        for w in workers:
            w.thread.join(5)
            w.stop_process()

    def __enter__(self) -> WorkPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cancel_owner(self, owner: str, why: str) -> bool:
        waiting = [j for j in self._waiting if j.owner == owner]
        for job in waiting:
            self._waiting.remove(job)
            job.future.set_exception(Cancelled(why))
        running = self._running.get(owner)
        if running is not None:
            running.cancel = why
        return bool(waiting) or running is not None

    def _next(self, worker: _Worker) -> _Job | None:
        """The next job for `worker`; None when the pool closes, or for an extra worker idle for `idle_s`
        (it leaves the pool)."""
        with self._cond:
            self._working.discard(worker)
            deadline = time.monotonic() + self.idle_s
            while not self._waiting and not self._closed:
                left = deadline - time.monotonic() if worker.extra else None
                if left is not None and left <= 0:
                    self._workers.remove(worker)
                    return None
                self._cond.wait(left)
            if self._closed:
                return None
            self._working.add(worker)
            job = self._waiting.pop(0)
            job.started = time.monotonic()
            job.future.set_running_or_notify_cancel()
            if job.owner:
                self._running[job.owner] = job
            return job

    def _end(self, job: _Job, outcome: Any) -> None:
        with self._cond:
            if job.owner and self._running.get(job.owner) is job:
                del self._running[job.owner]
        if job.future.done():
            return
        if isinstance(outcome, Exception):
            job.future.set_exception(outcome)
        else:
            job.future.set_result(outcome)


WORKERS_ENV = "VMEXPLORER_WORK_PROCESSES"  # worker processes of the server's pool (default: `default_workers`)
MAX_WORKERS_ENV = "VMEXPLORER_MAX_WORK_PROCESSES"  # with the extras started while jobs would wait (default: 2 more)


def default_workers(server_processes: int = 1) -> int:
    """Worker processes for each of a server's processes: one core is left to the event loops (on two
    cores, two workers beside the loop slowed every visitor's drag: the cores were hyperthreads of one),
    the rest shared, at least one each."""
    return max(1, min(8, ((os.cpu_count() or 2) - server_processes) // server_processes))


@lru_cache(maxsize=1)
def shared_pool() -> WorkPool:
    """The server's one pool, for all its pages (Panel runs the app's script once per browser session);
    closed when the server exits."""
    workers = _env_workers(WORKERS_ENV) or default_workers()
    # two more while visitors' jobs would wait: a visitor's Simulate does not wait out another's minute of
    # search (they share the cores instead); more would hold more memory than a class's laptop server has
    pool = WorkPool(workers, preload=("vmexplorer.ui.work",), max_workers=_env_workers(MAX_WORKERS_ENV) or workers + 2)
    atexit.register(pool.close)
    return pool


def _env_workers(name: str) -> int | None:
    text = os.environ.get(name, "")
    return int(text) if text.isdigit() and 1 <= int(text) <= 64 else None


def stop_shared_pool() -> None:
    """As the server stops: its work is cancelled and its workers stopped (if it ever started them)."""
    if shared_pool.cache_info().currsize:
        shared_pool().close()
