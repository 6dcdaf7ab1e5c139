"""A session: graph, plan, what ran (or would run) and where, as one shareable file.

The file is gzip-compressed JSON with columnar tables (docs/session-format.md). It is written
byte-for-byte reproducibly (gzip mtime 0, sorted keys), so saving a session twice gives the same file,
and it is read defensively: sessions are shared between people and machines, so every field, type,
length, index and size is checked, and anything wrong is one SessionError naming the file and the
problem, never a traceback from deep inside the loader.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import platform
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from . import __version__
from . import sessionformat as schema
from .collected import Collected, CollectedError, check_against, collected_summary, migration_shares
from .costmodel import CostModel
from .fileio import atomic_write
from .graph import Graph
from .plan import Plan
from .records import Timeline, summarize
from .sessionformat import SessionError

FORMAT = "vmexplorer-session"
# 2 added "collected" (the GPU collectors' records), 3 the cost model's "op_gap_ns" and "call_ns", 4
# "collected.memcpy"; older files still load
SCHEMA_VERSION = 6
MAX_FILE_BYTES = 200 * 10**6  # compressed; ResNet-152 under uvm over 100 iterations is about 5 MB
MAX_JSON_BYTES = 10**9  # decompressed; read with this cap, so a gzip bomb costs at most this much


@dataclass(frozen=True, eq=False)  # eq=False: the timeline holds numpy arrays
class Session:
    graph: Graph
    plan: Plan
    timeline: Timeline
    cost_model: CostModel | None
    environment: dict[str, str]  # versions, platform, and (from the engine) the GPU and its driver
    notes: tuple[str, ...]
    created: str  # ISO-8601 UTC, when the run or simulation was made (not when it was saved)
    collected: Collected | None = None  # what CUPTI / NVML recorded in a measured run, if they ran

    @property
    def summary(self) -> dict[str, float | int | str]:
        """The timeline's figures; with collector records, theirs too, prefixed `measured_`."""
        figures = summarize(self.graph, self.plan, self.timeline)
        if self.collected is not None:
            measured = collected_summary(self.timeline, self.collected)
            measured.update(migration_shares(self.plan, self.timeline, self.collected, measured))
            figures.update({f"measured_{k}": v for k, v in measured.items()})
        return figures


def new_session(graph: Graph, plan: Plan, timeline: Timeline, cost_model: CostModel | None = None,
                notes: tuple[str, ...] | list[str] = (),
                environment: dict[str, str] | None = None, *, collected: Collected | None = None) -> Session:
    """A session stamped now, with this machine's software versions; `environment` adds to them
    (the engine passes the GPU, its driver and CUDA). `collected`: the collectors' records of a
    measured run (see `vmexplorer.collected`), checked against the timeline."""
    _check_matches(graph, plan)
    _check_collected(collected, timeline)
    env = {"vmexplorer": __version__, "python": platform.python_version(),
           "platform": platform.platform(), "numpy": np.__version__}
    env.update(environment or {})
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Session(graph, plan, timeline, cost_model, env, tuple(notes), created, collected)


def session_to_bytes(session: Session) -> bytes:
    """The file's bytes: identical for identical sessions."""
    _check_matches(session.graph, session.plan)
    _check_collected(session.collected, session.timeline)
    doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION, **schema.encode(session)}
    try:
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:
        raise SessionError("cannot save a session holding NaN or infinite numbers "
                           "(check the timeline and the cost model)") from None
    return gzip.compress(text.encode(), compresslevel=6, mtime=0)


def save_session(session: Session, path: str | os.PathLike[str], force: bool = False) -> None:
    atomic_write(path, session_to_bytes(session), force=force)


def load_session(path: str | os.PathLike[str]) -> Session:
    name = os.fspath(path)
    try:
        size = os.stat(name).st_size
        if size > MAX_FILE_BYTES:
            raise SessionError(f"{name} is {size / 1e6:.0f} MB, more than the {MAX_FILE_BYTES // 10**6} MB "
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
        raise SessionError(f"{name} is more than the {MAX_FILE_BYTES // 10**6} MB a session file may be")
    doc = _parse(_decompress(data, name), name)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SessionError(f"{name} is not a vmexplorer session (it is JSON, but has no "
                           f"\"format\": \"{FORMAT}\" field)")
    version = doc.get("schema_version")
    if type(version) is not int or version < 1:
        raise SessionError(f"{name} is not a valid session: schema_version is {version!r}, "
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
        raise SessionError(f"{name} decompresses to more than {MAX_JSON_BYTES // 10**9} GB, more than a "
                           "session may hold; it is not a vmexplorer session or it is damaged")
    return text


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


def _check_matches(graph: Graph, plan: Plan) -> None:
    if plan.key != graph.key:
        raise SessionError(f"the plan is for {plan.key} but the graph is {graph.key} "
                           "(model, batch, image size); compile the plan for this graph")


def _check_collected(collected: Collected | None, timeline: Timeline) -> None:
    if collected is None:
        return
    if not isinstance(collected, Collected):
        raise SessionError(f"collected should be a vmexplorer.collected.Collected, not {type(collected).__name__}")
    try:
        check_against(collected, timeline)
    except CollectedError as e:
        raise SessionError(f"the collected records do not fit the timeline: {e}") from None
