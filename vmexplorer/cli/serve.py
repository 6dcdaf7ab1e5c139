"""`vmexplorer serve`: the web app's server, gzip-compressed, in one process or several sharing the port."""

from __future__ import annotations

import os
import sys

from . import UsageError, _stderr, _write_stdout

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any


def cmd_serve(args: argparse.Namespace) -> dict[str, Any]:
    """Serve vmexplorer/app.py as `panel serve` does, with gzip, until Ctrl-C or SIGTERM stops it.

    `panel serve` has no option for HTTP compression, and the app's JavaScript (Bokeh, Panel, Tabulator),
    what a cold page load waits for over a classroom's network, shrinks severalfold gzipped
    (bench/bench_page.py --launcher weighs it). Panel's `pn.serve` hands extra keywords to tornado's
    Application settings, where `compress_response` gzips every text response (the page, scripts,
    stylesheets). `warm` builds one page before listening (as `panel serve --warm`): the first visitor
    does not wait for the imports and the samples read."""
    import signal

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port takes a TCP port from 0 (any free one) to 65535, not {args.port}")
    procs = _serving_processes(args.num_procs)
    ignore_ctrl_c = signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # started in the background
    _check_listenable(args.address, args.port)
    # the start takes seconds on a laptop (Panel, Bokeh, every sample session read, a first page built):
    # say what it is doing, so a person does not take the quiet for a hang
    _stderr("vmexplorer: starting the app's server: loading Panel and Bokeh, reading the sample sessions and "
            "building a first page, so that the first visitor does not wait for them ...")
    server = _app_server(args, procs)  # with several processes, each goes on from here on its own
    from vmexplorer.pool import WORKERS_ENV, default_workers, shared_pool, stop_shared_pool

    # the pages' slow work goes to worker processes, started now (they import as the server starts), the
    # machine's cores shared among the server's processes
    os.environ.setdefault(WORKERS_ENV, str(default_workers(procs)))
    shared_pool()
    _quieter_collections()
    loop = server.io_loop
    url = f"http://{args.address or 'localhost'}:{server.port}/app"
    first = _task_id() in (None, 0)

    def stop(signum: int, frame: Any) -> None:  # stops between callbacks, never inside one
        loop.asyncio_loop.call_soon_threadsafe(loop.stop)

    # pn.serve set a SIGINT handler of its own; these say the same, for SIGTERM (a service manager) too
    handlers = {signal.SIGINT: signal.SIG_IGN if ignore_ctrl_c else stop, signal.SIGTERM: stop}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        if first:
            many = f", {procs} processes" if procs > 1 else ""
            _write_stdout(f"serving the app at {url} (gzip-compressed{many}); Ctrl-C stops it\n")
        server.start()
        if args.show:
            loop.add_callback(server.show, "/app")
        loop.start()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()
        from vmexplorer.ui.serving import stop_spare_pages

        stop_spare_pages()
        stop_shared_pool()
    return {"url": url, "process": _task_id() or 0, "processes": procs}


def _quieter_collections() -> None:
    """Python's full collections walk every object the server holds (a class's pages: hundreds of
    thousands) on the event loop: 0.5-0.7 s each, about one a drag's ten seconds under load, each a stall
    for every visitor. What the start made (modules, samples, the first page) lives as long as the
    server: frozen out of the walks. Young objects are collected less often, so fewer outlive a drag to
    make the full walks come round."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    # the page maker's thread builds pages beside the event loop: the loop, each time it comes back from
    # the network, waits for the interpreter at most this long (Python's default, 5 ms, a few times a drag)
    sys.setswitchinterval(0.001)


def _cannot_listen(address: str | None, port: int, error: OSError) -> UsageError:
    return UsageError(f"cannot listen on {address or 'every address'} port {port}: {error.strerror or error}")


def _check_listenable(address: str | None, port: int) -> None:
    """Refuse a port another server holds now, in one line, rather than after the slow start."""
    if port == 0:
        return
    from tornado.netutil import bind_sockets

    try:
        for sock in bind_sockets(port, address or None):  # as the server will bind it
            sock.close()
    except OSError as e:
        raise _cannot_listen(address, port, e) from None


def _serving_processes(asked: int) -> int:
    """How many server processes `--num-procs` asks for, refused where the processes cannot be had."""
    if asked < 0:
        raise UsageError(f"--num-procs takes 1 or more processes (0: one per CPU core), not {asked}")
    procs = asked or os.cpu_count() or 1
    if procs > 1 and not sys.platform.startswith("linux"):
        raise UsageError("--num-procs above 1 needs Linux (the processes are forked, and each must stop "
                         "when the first one does); serve with one process here")
    return procs


def _task_id() -> int | None:
    from tornado.process import task_id

    return task_id()


def _forked_server_process() -> None:
    """In each forked server process: stop when the process that forked it does (a service manager's
    SIGTERM, or Ctrl-C, reaches that one first), through Linux's parent-death signal."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _app_server(args: argparse.Namespace, procs: int = 1) -> Any:
    """A Bokeh server (Panel's) of the app, listening but not started; with `procs` above 1, forked
    into that many processes after it binds the port, this returning in each of them."""
    from pathlib import Path

    import panel as pn

    app = Path(__file__).parent.with_name("app.py")
    if procs > 1:
        # Bokeh forks only if no page has been built yet (a built page may hold threads and open files,
        # which a fork would copy half-made), so instead of `warm` the app's modules and the samples are
        # read before the fork, shared by the processes until one writes them. Each process makes its
        # own threads (the GPU check, the run queue, the spare page) when its first page asks for them
        import signal

        import vmexplorer.ui.serving  # noqa: F401
        from vmexplorer.session.samples import sample_index

        sample_index()
        os.register_at_fork(after_in_child=_forked_server_process)
        # the first process only waits for the others: Ctrl-C stops them, each on its own, and once all
        # have stopped it ends too, quietly (a SIGTERM to it stops them through the parent-death signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the page (its HTML: the template and where each part goes) is the same for every visitor: render
    # it from one session, and build each visitor's own when the browser connects, after it has loaded
    # the scripts. Built at the request instead, the session's build competes with the browser for the
    # CPU as it starts the page, and holds up the scripts' requests behind it
    from bokeh.settings import settings
    from panel.io.application import build_single_handler_application

    from vmexplorer.ui.routes import guarded_patterns, session_key
    from vmexplorer.ui.serving import PagesAhead
    from vmexplorer.ui.upload import UPLOAD_MESSAGE_BYTES

    pn.config.reuse_sessions = True
    pn.config.session_key_func = session_key
    # Bokeh checks every new document's models for mistakes and logs what it finds: a tenth of a second
    # of each visitor's session on the event loop, for a page whose models the tests check
    settings.perform_document_validation.set_value(False)
    application = build_single_handler_application(str(app))
    application.add(PagesAhead())  # each visitor's page made in a thread before the session is built
    try:
        return pn.serve({"app": application}, port=args.port, address=args.address, extra_patterns=guarded_patterns(),
                        websocket_origin=args.allow_websocket_origin, show=False, start=False, verbose=False,
                        warm=procs == 1, num_procs=procs, compress_response=True,
                        websocket_max_message_size=UPLOAD_MESSAGE_BYTES)
    except OSError as e:
        raise _cannot_listen(args.address, args.port, e) from None
    except ValueError as e:  # a malformed --allow-websocket-origin
        raise UsageError(f"--allow-websocket-origin: {e}") from None
