"""A session: graph, plan, what ran (or would run) and where, as one shareable file.

The file is gzip-compressed JSON with columnar tables (docs/session-format.md). It is written
byte-for-byte reproducibly (gzip mtime 0, sorted keys), so saving a session twice gives the same file,
and it is read defensively: sessions are shared between people and machines, so every field, type,
length, index and size is checked, and anything wrong is one SessionError naming the file and the
problem, never a traceback from deep inside the loader.

Memory is bounded by what a file can make, not only by its size: parsing JSON makes a Python object
per value, up to some 30 times the bytes of the text (`{},` is 3 bytes and a 64-byte dict), so before
parsing, the loader counts the brackets, commas and colons of the text, an upper bound on the objects
and values parsing can make, and refuses a text that could make more than a session needs. With the
caps below, loading any file peaks under 1 GB (bench/bench_hostile_sessions.py measures it).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zlib
from typing import Any

from ..fileio import atomic_write
from ..graph import Graph
from ..plan import Plan
from ..records.collected import (
    MAX_UM_ROWS,
)
from ..units import format_bytes, quoted
from . import format as schema
from .session import FORMAT, SCHEMA_VERSION, Session, SessionError, check_collected, check_matches

# The caps, each well above the largest session vmexplorer makes in ordinary use. Their sizes were
# chosen so that the worst text within them stays under 1 GB while it is parsed (docs/session-format.md).
MAX_JSON_BYTES = 48 * 2**20  # decompressed; the gzip stream is read with this cap, so a bomb costs no more
MAX_FILE_BYTES = MAX_JSON_BYTES  # compressed: gzip never makes a JSON text larger
MAX_VALUES = 4_000_000  # JSON values (numbers, texts): a session's columns hold nearly all of them
MAX_CONTAINERS = 10_000  # JSON objects and lists: a session has about a hundred


def iterations_that_fit(graph: Graph, plan: Plan) -> int:
    """How many iterations of a run of `plan` a session can hold with every collector on, counted
    generously (kernels and NVML samples are only known after the run): a run asks for no more, so
    that its session is never one vmexplorer refuses to save."""
    ops, memops, tensors = len(graph.ops), len(plan.memops), len(graph.tensors)
    # per iteration: op rows (6 values), memop rows (4), resident steps (2 each: a tensor's creation and
    # release, one per memop), kernels (5 each; the samples launch at most six per op) and NVML samples
    per_iteration = 6 * ops + 4 * memops + 2 * (2 * tensors + memops) + 5 * 8 * ops + 500
    # once: the graph (about a dozen values per tensor and per op), the plan, and CUPTI's unified-memory
    # records, which thin() caps whatever the number of iterations counted
    fixed = 12 * (tensors + ops) + 7 * memops + 2 * tensors + 6 * MAX_UM_ROWS + 10_000
    return max(0, min(schema.MAX_ITERATIONS, (MAX_VALUES - fixed) // per_iteration))


def session_to_bytes(session: Session) -> bytes:
    """The file's bytes: identical for identical sessions."""
    check_matches(session.graph, session.plan)
    check_collected(session.collected, session.timeline)
    doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION, **schema.encode(session)}
    # what vmexplorer writes, it can read: the loader's checks, before anything is written
    schema.decode(doc, schema.Reader("the session", lead="cannot save this session"), SCHEMA_VERSION)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    problem = _too_many_objects(text) or (f"it is {format_bytes(len(text))} of JSON, more than the "
                                          f"{format_bytes(MAX_JSON_BYTES)} a session may be"
                                          if len(text) > MAX_JSON_BYTES else None)
    if _SURROGATE_ESCAPE.search(text) and _lone_surrogate(doc):
        problem = "a text in it holds a lone UTF-16 surrogate, not a character"
    if problem:
        raise SessionError(f"cannot save this session: {problem}")
    return gzip.compress(text, compresslevel=6, mtime=0)


def save_session(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    atomic_write(path, session_to_bytes(session), force=force)


def load_session(path: str | os.PathLike[str]) -> Session:
    name = os.fspath(path)
    try:
        size = os.stat(name).st_size
        if size > MAX_FILE_BYTES:
            raise SessionError(f"{name} is {format_bytes(size)}, more than the {format_bytes(MAX_FILE_BYTES)} "
                               "a session file may be; it is not a vmexplorer session or it is damaged")
        with open(name, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except IsADirectoryError:
        raise SessionError(f"{name} is a folder, not a session file") from None
    except OSError as e:
        raise SessionError(f"cannot read {name}: {e.strerror or e}") from None
    return session_from_bytes(data, name)


def session_from_bytes(data: bytes, name: str = "the file") -> Session:
    """Load from bytes (an upload in the app); `name` is what error messages call the file."""
    if len(data) > MAX_FILE_BYTES:
        raise SessionError(f"{name} is more than the {format_bytes(MAX_FILE_BYTES)} a session file may be")
    text = _decompress(data, name)
    problem = _too_many_objects(text)
    if problem:
        raise SessionError(f"{name} is not a session vmexplorer can open: {problem}")
    # JSON can only spell a surrogate as an escape: most files need no search of their strings
    surrogates = _SURROGATE_ESCAPE.search(text) is not None
    doc = _parse(text, name)
    del text  # the parsed document replaces it: no need to hold both
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SessionError(f"{name} is not a vmexplorer session (it is JSON, but has no "
                           f"\"format\": \"{FORMAT}\" field)")
    if surrogates and _lone_surrogate(doc):
        raise SessionError(f"{name} is not a valid session: a text in it holds half of a UTF-16 surrogate pair "
                           "(an escape such as \\ud800 alone), which is not a character")
    version = doc.get("schema_version")
    if type(version) is not int or version < 1:
        raise SessionError(f"{name} is not a valid session: schema_version is {quoted(version)}, "
                           "expected a whole number from 1")
    if version > SCHEMA_VERSION:
        raise SessionError(f"{name} was written by a newer vmexplorer (schema {version}, this reads up "
                           f"to {SCHEMA_VERSION}); upgrade vmexplorer to open it")
    return Session(**schema.decode(doc, schema.Reader(name), version))


def _decompress(data: bytes, name: str) -> bytes:
    if data[:2] != b"\x1f\x8b":
        hint = " (it looks like plain JSON; session files are gzip-compressed)" if data[:1] == b"{" else ""
        raise SessionError(f"{name} is not a vmexplorer session: it is not gzip-compressed{hint}")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            text = f.read(MAX_JSON_BYTES + 1)  # bounded: never decompress more than the cap
    except EOFError:
        raise SessionError(f"{name} is truncated: the compressed data ends early (the file was cut "
                           "off while being copied or saved)") from None
    except (OSError, zlib.error) as e:
        raise SessionError(f"{name} is damaged: its compressed data does not decode ({e})") from None
    if len(text) > MAX_JSON_BYTES:
        raise SessionError(f"{name} decompresses to more than {format_bytes(MAX_JSON_BYTES)}, more than a "
                           "session may hold; it is not a vmexplorer session or it is damaged")
    return text


def _too_many_objects(text: bytes) -> str | None:
    """Why parsing `text` could make more objects than a session needs, or None. Every JSON value
    but the first follows a `[`, `,` or `:`, and every object or list opens with `{` or `[`; counting
    those bytes anywhere (inside strings too) bounds both from above in one pass at memchr speed."""
    containers = text.count(b"{") + text.count(b"[")
    if containers > MAX_CONTAINERS:
        return (f"its JSON opens {containers:,} objects and lists, where a session has about a hundred "
                f"(at most {MAX_CONTAINERS:,})")
    values = 1 + containers + text.count(b",") + text.count(b":")
    if values > MAX_VALUES:
        return (f"its JSON holds up to {values:,} values, more than the {MAX_VALUES:,} a session may hold "
                "(record fewer iterations)")
    return None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _lone_surrogate(doc: Any) -> bool:
    """Whether a string of the document holds a lone UTF-16 surrogate (JSON's \\ud800 escape with no
    pair): it cannot be printed, encoded or sent to a browser, so the session is refused."""
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if not x.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in x):
                return True
        elif isinstance(x, dict):
            stack.extend(x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(v for v in x if isinstance(v, str | list | dict))
    return False


def _parse(data: bytes, name: str) -> Any:
    def no_constants(word: str) -> None:
        raise ValueError(f"{word} is not a JSON number")

    try:
        return json.loads(data.decode("utf-8"), parse_constant=no_constants)
    except UnicodeDecodeError:
        raise SessionError(f"{name} is not a vmexplorer session: its content is not UTF-8 text") from None
    except RecursionError:
        raise SessionError(f"{name} is not a vmexplorer session: its JSON is nested too deeply") from None
    except json.JSONDecodeError as e:
        raise SessionError(f"{name} is not a vmexplorer session: its content is not valid JSON ({e.msg} at "
                           f"line {e.lineno} column {e.colno})") from None
    except ValueError as e:
        raise SessionError(f"{name} is not a vmexplorer session: its content is not valid JSON ({e})") from None
