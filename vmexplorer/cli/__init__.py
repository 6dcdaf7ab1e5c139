"""The `vmexplorer` command: graphs, plans, simulated sessions, inspection and export, headless; and
`serve`, the web app's server.

Every command prints a table for people or, with `--format json`, one JSON document with sorted keys for
scripts (docs/cli.md gives each shape). Bad input of any kind ends in one line on stderr,
`vmexplorer: error: ...`, and exit status 2, never a traceback; Ctrl-C ends with 130, and a stdout that
is closed (or a pipe whose reader stopped) with 1. Strings from files are shown with their control
characters escaped, as a session someone shared could otherwise drive the terminal.

This package imports nothing at its top that Python has not loaded already (`sys`, `os`): the entry
point imports it before `main` runs, and a Ctrl-C landing in an import there would be a traceback.
Its modules are imported inside main's handlers: parser.py (the arguments), commands.py (the headless
commands and their JSON documents), serve.py (the web app's server) and tables.py (the output for
people, and the choice of table or JSON). Commands import what they need (argparse, the models, Bokeh,
sessions, the simulator) themselves, inside their functions, which also keeps `vmexplorer models` fast
on a laptop. The commands, documents, tables and the parser stay importable from `vmexplorer.cli`,
from their modules on first use. Names with a leading underscore are the package's own, shared between
its modules.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

EXIT_OK, EXIT_PIPE_CLOSED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143


class Terminated(BaseException):
    """SIGTERM (`kill`, a service manager, a timeout): unwinds as Ctrl-C does, so that a file being
    written is removed, not left half-written beside its target (`fileio.atomic_write`)."""


class UsageError(Exception):
    """Bad arguments or input: reported as one line, exit status 2."""


class StdoutClosed(Exception):
    """stdout is closed (`>&-`): there is nowhere to write the output; exit status 1."""


# Characters a terminal acts on instead of showing, or that make text read in another order than it
# is stored: C0 and C1 controls (ESC starts sequences that retitle the window or write the clipboard;
# \x9b is a one-byte CSI), DEL, bidi marks, embeddings, overrides and isolates, line and paragraph
# separators, and lone surrogates (which no encoder takes).
_UNSAFE = "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def _safe(text: Any, keep: str = "") -> str:
    """`text` with the characters in _UNSAFE, but those in `keep`, written as escapes (\\x1b, \\u202e)."""
    import re

    def escape(m: re.Match[str]) -> str:
        c = m.group()
        if c in keep:
            return c
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return re.sub(_UNSAFE, escape, str(text))


def _write_stdout(text: str) -> None:
    """Write all of `text` to stdout, or raise: BrokenPipeError when the reader has gone.

    The bytes go through stdout's binary layer in a loop: unbuffered (PYTHONUNBUFFERED=1) the text layer
    drops the rest of a short write to a pipe whose reader is closing, and the run would end with 0 as
    if everything had been read."""
    stream = sys.stdout
    if stream is None:
        raise StdoutClosed(_STDOUT_CLOSED)
    buffer = getattr(stream, "buffer", None)
    try:
        if buffer is None:  # a text-only stream (io.StringIO): it takes all of it or raises
            stream.write(text)
            stream.flush()
            return
        stream.flush()  # anything printed before goes first
        view = memoryview(text.encode(stream.encoding or "utf-8", "backslashreplace"))
        while view:
            written = buffer.write(view)
            if written is None:  # a non-blocking stdout that is full: wait until it drains
                import select

                select.select([], [buffer], [])
                continue
            view = view[written:]
        buffer.flush()
    except OSError as e:
        import errno

        if e.errno == errno.EBADF:  # the descriptor was closed under Python's stdout
            raise StdoutClosed(_STDOUT_CLOSED) from None
        raise


_STDOUT_CLOSED = "stdout is closed, so there is nowhere to write the output; redirect it to /dev/null to discard it"


def _note(message: str) -> None:
    _stderr(f"vmexplorer: note: {_safe(message)}")


def _stderr(line: str) -> None:
    # stderr can be closed too (2>&-); a message with nowhere to go is dropped, not a second error
    try:
        if sys.stderr is not None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _user_errors() -> tuple[type[BaseException], ...]:
    """The project's error classes: each means bad input, told in its message, not a bug."""
    from ..engine.gpu import NoGPU
    from ..engine.memory import ResourceError
    from ..fileio import OutputError
    from ..graph import GraphError
    from ..plan import PlanError
    from .commands import RunFailed

    found: list[type[BaseException]] = [UsageError, GraphError, PlanError, OSError, NoGPU, ResourceError,
                                        RunFailed, OutputError]
    try:
        from ..session import SessionError

        found.append(SessionError)
    except ImportError:  # NumPy missing: its own error says so
        pass
    return tuple(found)


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    # one line whatever the message holds: wrapped text joined, and a file name's controls escaped
    import re

    return _safe(re.sub(r"[ \t\r\n]+", " ", text).strip())


def _quiet_stdout() -> None:
    # Python flushes stdout again at exit and would report the closed pipe a second time
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status: 0 ok, 1 stdout closed (or its reader gone) before all
    the output was written, 2 bad usage or input, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM)."""
    restore = None
    try:
        restore = _watch_interrupts()
        return _run(argv)
    except KeyboardInterrupt:  # also one that lands while an error is being reported
        _stderr("vmexplorer: error: interrupted")
        return EXIT_INTERRUPTED
    except Terminated:
        _stderr("vmexplorer: error: terminated")
        return EXIT_TERMINATED
    finally:
        if restore is not None:
            restore()


_interrupted = False


def _watch_interrupts() -> Callable[[], None]:
    """Note each Ctrl-C as well as raising KeyboardInterrupt: an import that catches it turns it into
    another error (NumPy's import says "could not import module datetime"), which is then reported
    as the interruption it was. Returns what puts the previous handler back."""
    global _interrupted
    _interrupted = False
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        global _interrupted
        _interrupted = True
        raise KeyboardInterrupt

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated

    try:
        previous = signal.signal(signal.SIGINT, interrupt)
    except ValueError:  # not the main thread: only the main thread gets signals anyway
        return lambda: None
    if previous is signal.SIG_IGN:  # started in the background (`cmd &`): Ctrl-C is not ours to take
        signal.signal(signal.SIGINT, previous)
        previous = None
    before_term = signal.signal(signal.SIGTERM, terminate)
    if before_term is signal.SIG_IGN:  # asked to outlive a SIGTERM (nohup-like): so be it
        signal.signal(signal.SIGTERM, before_term)
    before_hook = sys.unraisablehook

    def unraisable(u: Any) -> None:
        # a Ctrl-C landing where Python can only report an exception, never raise it (an import lock's
        # clean-up callback, a finaliser), would print a traceback and be lost: sent again, it interrupts
        # the command at its next step instead
        if isinstance(u.exc_value, KeyboardInterrupt | Terminated):
            signal.raise_signal(signal.SIGINT if isinstance(u.exc_value, KeyboardInterrupt) else signal.SIGTERM)
        else:
            before_hook(u)

    sys.unraisablehook = unraisable

    def restore() -> None:
        # None: a handler not set from Python, which cannot be put back
        for sig, handler in ((signal.SIGINT, previous), (signal.SIGTERM, before_term)):
            if handler is not None:
                signal.signal(sig, handler)
        sys.unraisablehook = before_hook

    return restore


def _run(argv: list[str] | None) -> int:
    try:
        if sys.stdout is None:  # `>&-`: refused before any work, as none of it could be reported
            raise StdoutClosed(_STDOUT_CLOSED)
        from .parser import build_parser
        from .tables import _emit

        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} "
                             f"(see `vmexplorer {args.command} --help`)")
        _emit(args, args.run(args))
        return EXIT_OK
    except SystemExit as e:  # --help and --version print and exit on their own
        return e.code if isinstance(e.code, int) else EXIT_OK
    except BrokenPipeError:  # the reader stopped early (`| head`): like any Unix tool, no message
        _quiet_stdout()
        return EXIT_PIPE_CLOSED
    except StdoutClosed as e:
        _stderr(f"vmexplorer: error: {_one_line(e)}")
        return EXIT_PIPE_CLOSED
    except Exception as e:
        if _interrupted:  # a Ctrl-C that some import turned into another error
            raise KeyboardInterrupt from None
        if not isinstance(e, _user_errors()):
            raise  # a bug: its traceback is what a report needs
        _stderr(f"vmexplorer: error: {_one_line(e)}")
        return EXIT_USAGE


# what `vmexplorer.cli` still offers from the modules it was split into, each imported when first asked for
_EXPORTS = {
    "build_parser": "parser", "cmd_serve": "serve", "cmd_sweep": "sweep", "table_sweep": "sweep",
    **dict.fromkeys(("RunFailed", "cmd_calibrate", "cmd_compare", "cmd_export", "cmd_graph", "cmd_info",
                     "cmd_models", "cmd_plan", "cmd_run", "cmd_simulate", "graph_doc", "plan_doc"), "commands"),
    **dict.fromkeys(("table_calibrate", "table_compare", "table_export", "table_graph", "table_info",
                     "table_models", "table_plan", "table_serve", "table_simulate"), "tables"),
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
