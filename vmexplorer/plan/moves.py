"""Moves as a person gives them: checked against the graph, and read from an untrusted moves file.

`check_moves` holds any list of moves to the rules a round trip must keep (tensors and ops that exist,
an offload after the producer, a prefetch before the use, no two trips of one tensor at once), and
`check_recomputes` a person's recompute steps to the ones the graph can run; `parse_moves` reads a moves
file's raw bytes and `load_moves` its JSON document, named or numbered: a person's plan, its moves and its
recomputes. A recompute is numbered in the graph without re-runs, a move in the graph with them (the one
the plan runs, whose ops the timeline shows), as `Plan` numbers them.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, NoReturn

from ..graph import Graph, GraphError, Recompute
from ..graph.recompute import recomputed
from ..units import format_bytes, quoted, typed
from .plan import Move, PlanError
from .residency import next_use

# What a moves file may be: a few thousand moves of the largest model take well under 1 MiB, and a
# manual plan is 3 levels deep ({"moves": [{...}]}); anything beyond is a mistake or a hostile file,
# refused before it costs time or memory.
MAX_MOVES_FILE_BYTES = 4 << 20
MAX_MOVES_DEPTH = 16
_INDEX_DIGITS = 30  # a longer integer is no index; kept as written, as int() refuses 4300 digits


def check_moves(graph: Graph, moves: Sequence[Move]) -> None:
    """A person's moves must make sense on the graph; each error names the tensor, ops and a fix.
    A persistent tensor's trip may wrap: offloaded after its last use, prefetched (prefetch_after <
    offload_after) before its first use in the next iteration."""
    n = len(graph.ops)
    # per tensor, the op spans it is away over: disjoint, sorted by start, so one bisect finds a clash
    # (a file may hold a hundred thousand moves; comparing each with all before it would take minutes)
    trips: dict[int, list[tuple[int, int]]] = {}
    for mv in moves:
        spans = _away_spans(graph, mv)
        away = trips.setdefault(mv.tensor, [])
        for lo, hi in spans:
            k = bisect_right(away, (hi, n))  # the spans starting at or before this one's end
            if k and away[k - 1][1] >= lo:
                a, b = away[k - 1]
                raise PlanError(f"{graph.tensors[mv.tensor].name} has two overlapping moves (one away over "
                                f"ops {a}..{b})")
        for span in spans:
            insort(away, span)


def check_recomputes(graph: Graph, steps: Sequence[Recompute]) -> None:
    """A person's recompute steps must run on `graph`, the graph without re-runs that numbers them: each
    error names the step, the tensor and what can be recomputed."""
    n, tensors = len(graph.ops), len(graph.tensors)
    for i, step in enumerate(steps):
        if not (_is_int(step.tensor) and _is_int(step.before)):
            raise PlanError(f"recompute {i}: its tensor and op are integers, not {step}")
        if not 0 <= step.tensor < tensors:
            raise PlanError(f"recompute {i} names tensor {step.tensor}, but the graph has {tensors} tensors "
                            f"(0..{tensors - 1}) in {graph.model}")
        if not 0 <= step.before < n:
            raise PlanError(f"recompute {i} of {graph.tensors[step.tensor].name}: before {step.before} is not an op "
                            f"of the graph without re-runs (0..{n - 1})")
    try:
        recomputed(graph, tuple(steps))
    except GraphError as e:
        raise PlanError(f"{e} (a recompute's tensor and op are numbered in the graph without re-runs)") from None


def _away_spans(graph: Graph, mv: Move) -> list[tuple[int, int]]:
    """The op spans [lo, hi] a valid move's tensor is away over (two when it wraps); PlanError, naming
    the tensor and the fix, when the move is not valid on its own."""
    n = len(graph.ops)
    if not all(_is_int(v) for v in (mv.tensor, mv.offload_after)) or not (
            mv.prefetch_after is None or _is_int(mv.prefetch_after)):
        raise PlanError(f"a move's tensor and ops are integers, not {mv}")
    if not 0 <= mv.tensor < len(graph.tensors):
        raise PlanError(f"a move names tensor {mv.tensor}, but the graph has {len(graph.tensors)} tensors "
                        f"(0..{len(graph.tensors) - 1}) in {graph.model}")
    tensor = graph.tensors[mv.tensor]
    if not -1 <= mv.offload_after < n:
        raise PlanError(f"{tensor.name}: offload_after {mv.offload_after} is not an op (-1..{n - 1}, "
                        "-1 being the iteration start)")
    if not tensor.persistent and mv.offload_after < tensor.producer:
        raise PlanError(f"{tensor.name} is offloaded after {_op(graph, mv.offload_after)}, before its "
                        f"producer {graph.ops[tensor.producer].name} runs; offload it after that")
    p = mv.prefetch_after
    if p is not None and not -1 <= p < n:
        raise PlanError(f"{tensor.name}: prefetch_after {p} is not an op (-1..{n - 1}, -1 being the "
                        "iteration start)")
    used = next_use(graph, mv.tensor, mv.offload_after)
    if p is not None and p < mv.offload_after:
        if not tensor.persistent:
            raise PlanError(f"{tensor.name} is prefetched after {_op(graph, p)}, before its offload "
                            f"after {_op(graph, mv.offload_after)}; only persistent tensors can wrap "
                            "into the next iteration")
        first = next_use(graph, mv.tensor, -1)
        if used is not None or (first is not None and first <= p):
            clash = used if used is not None else first
            raise PlanError(f"{tensor.name} is used by {graph.ops[clash].name} while it is away "  # type: ignore[index]
                            f"(offloaded after {_op(graph, mv.offload_after)}, prefetched after "
                            f"{_op(graph, p)} of the next iteration)")
        return [(mv.offload_after, n - 1), (-1, p)]
    if p is not None and next_use(graph, mv.tensor, p) is None:
        raise PlanError(f"{tensor.name} is prefetched after {_op(graph, p)}, after its last use; "
                        "prefetch it before that use or drop the prefetch")
    if p is None and used is None and not tensor.persistent:
        raise PlanError(f"{tensor.name} is not used after {_op(graph, mv.offload_after)}: there "
                        "is nothing to offload it for")
    if p is not None and used is not None and used <= p:
        raise PlanError(f"{tensor.name} is used by {graph.ops[used].name} between its offload after "
                        f"{_op(graph, mv.offload_after)} and its prefetch after {_op(graph, p)}: "
                        f"the prefetch comes after the use; prefetch before op {used} or offload "
                        "after it")
    return [(mv.offload_after, n - 1 if p is None else p)]


def parse_moves(graph: Graph, raw: bytes) -> tuple[list[Move], list[Recompute]]:
    """The moves and recomputes of a moves file's raw bytes (UTF-8 JSON, as `load_moves` reads), checked
    against the graph. Anything wrong (too big, not UTF-8, not JSON, nested too deep, wrong types, unknown names,
    numbers out of range) raises PlanError, and nothing else does."""
    if len(raw) > MAX_MOVES_FILE_BYTES:
        raise PlanError(f"{len(raw)} bytes is more than a moves file may hold ({MAX_MOVES_FILE_BYTES} bytes, "
                        f"{format_bytes(MAX_MOVES_FILE_BYTES)}); a manual plan of the largest model takes "
                        "well under 1 MiB")
    try:
        text = raw.decode("utf-8-sig")  # a BOM, as some Windows editors write, is no error
    except UnicodeDecodeError as e:
        raise PlanError(f"not UTF-8 text (byte {e.start} is 0x{raw[e.start]:02x}); --moves wants a JSON "
                        "manual plan") from None
    depth = _nesting(text)
    if depth > MAX_MOVES_DEPTH:
        raise PlanError(f"JSON nested {depth} levels deep; a manual plan is 3 ({{\"moves\": [{{...}}]}}) and "
                        f"at most {MAX_MOVES_DEPTH} are read")
    try:
        data = json.loads(text, parse_int=_json_int, parse_float=_Number, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise PlanError(f"not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:  # the depth check should make this unreachable; a traceback must stay so
        raise PlanError(f"JSON nested too deep (at most {MAX_MOVES_DEPTH} levels are read)") from None
    return load_moves(graph, data)


def load_moves(graph: Graph, data: Any) -> tuple[list[Move], list[Recompute]]:
    """A person's plan from a JSON document: {"moves": [{"tensor", "offload_after", "prefetch_after"}],
    "recomputes": [{"tensor", "before"}]} ("recomputes" optional), with tensors and ops named or numbered
    (-1: the iteration start); a bare list of moves is read too. `graph` is any graph of the model: the
    recomputes are read on it without re-runs, the moves on it with those recomputes' re-runs."""
    moves = data.get("moves") if isinstance(data, Mapping) else data
    if not isinstance(moves, list):
        came = 'an object without "moves"' if isinstance(data, Mapping) and "moves" not in data else _json(moves)
        raise PlanError('a manual plan is {"moves": [{"tensor": ..., "offload_after": ..., '
                        f'"prefetch_after": ...}}, ...]}}, a list of moves, not {came}')
    full = graph.full or graph
    steps = _load_recomputes(full.plain or full, data.get("recomputes", []) if isinstance(data, Mapping) else [])
    graph = recomputed(full.plain or full, tuple(steps))
    op_ids = {op.name: i for i, op in enumerate(graph.ops)}
    tensor_ids = {t.name: i for i, t in enumerate(graph.tensors)}
    out = []
    for i, item in enumerate(moves):
        if not isinstance(item, Mapping) or not {"tensor", "offload_after"} <= item.keys():
            raise PlanError(f"move {i} needs 'tensor' and 'offload_after' (and optionally 'prefetch_after'), "
                            f"not {_json(item)}")
        tensor = item["tensor"]
        if isinstance(tensor, str):
            if tensor not in tensor_ids:
                raise PlanError(f"move {i}: no tensor named {typed(tensor)} in the {graph.model} graph")
            tensor = tensor_ids[tensor]
        elif not _is_int(tensor):
            raise PlanError(f"move {i}: tensor must be a tensor's name or index (0..{len(graph.tensors) - 1}), "
                            f"not {_json(tensor)}")
        offload = _op_id(item["offload_after"], op_ids, i, "offload_after")
        prefetch = item.get("prefetch_after")
        out.append(Move(tensor, offload, None if prefetch is None else _op_id(prefetch, op_ids, i, "prefetch_after")))
    check_moves(graph, out)
    return out, steps


def _load_recomputes(plain: Graph, steps: Any) -> list[Recompute]:
    """The "recomputes" of a moves file, on the graph without re-runs, checked as the manual policy checks them."""
    if not isinstance(steps, list):
        raise PlanError(f'"recomputes" is a list of {{"tensor": ..., "before": ...}}, not {_json(steps)}')
    op_ids = {op.name: i for i, op in enumerate(plain.ops)}
    out = []
    for i, item in enumerate(steps):
        if not isinstance(item, Mapping) or not {"tensor", "before"} <= item.keys():
            raise PlanError(f"recompute {i} needs 'tensor' and 'before', not {_json(item)}")
        tensor = item["tensor"]
        if isinstance(tensor, str):
            try:
                tensor = plain.tensor_id(tensor)
            except KeyError:
                raise PlanError(f"recompute {i}: no tensor named {typed(tensor)} in the {plain.model} graph") from None
        elif not _is_int(tensor):
            raise PlanError(f"recompute {i}: tensor must be a tensor's name or index (0..{len(plain.tensors) - 1}), "
                            f"not {_json(tensor)}")
        out.append(Recompute(tensor, _op_id(item["before"], op_ids, i, "before", "recompute")))
    check_recomputes(plain, out)
    return out


@dataclass(frozen=True)
class _Number:
    """A JSON number that is no index (a fraction, an exponent, too many digits), kept as written."""

    text: str


def _json_int(text: str) -> int | _Number:
    return int(text) if len(text) <= _INDEX_DIGITS else _Number(text)


def _no_constant(text: str) -> NoReturn:
    raise PlanError(f"not JSON ({text} is Python's, not a JSON number)")


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _nesting(text: str) -> int:
    """How deep the JSON text nests, counted without parsing (the parser recurses once per level)."""
    brackets = _BRACKETS.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _json(value: Any) -> str:
    """A value in a message as the file spelled it; a number no index can be, as its digits."""
    if isinstance(value, _Number):
        return value.text if len(value.text) <= 60 else value.text[:57] + "..."
    return quoted(value, 60)


def _op_id(value: Any, op_ids: dict[str, int], i: int, key: str, what: str = "move") -> int:
    if _is_int(value):
        return int(value)
    if not isinstance(value, str):  # a list or an object is not even hashable
        raise PlanError(f"{what} {i}: {key} must be an op's name or index (-1..{len(op_ids) - 1}, -1 being the "
                        f"iteration start), not {_json(value)}")
    if value not in op_ids:
        raise PlanError(f"{what} {i}: no op named {typed(value)} ({key})")
    return op_ids[value]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _op(graph: Graph, k: int) -> str:
    return "the iteration start" if k < 0 else graph.ops[k].name


# --- edits in a link -----------------------------------------------------------------------------------
# A link holds an edited plan as the tensors whose round trips differ from the plan it was edited from:
# "12:14.70" (tensor 12 goes out after op 14 and comes back after op 70), "7:2.87~90.-" (two trips, the
# second never prefetched), "5:" (no trip at all); and those whose recomputation differs: "r9:80" (tensor
# 9 made again before op 80), "r9:" (not made again); joined by commas. Digits, "r" and ":.~,-" only, so
# it needs no escaping in a URL, and a link of a few edits stays short. As in a plan, a recompute's tensor
# and op are numbered in the graph without re-runs, a trip's in the graph with the edited plan's re-runs.
MAX_EDITS_CHARS = 16_384
_EDIT = re.compile(r"(\d{1,9}):((?:\d{1,9}\.(?:\d{1,9}|-))(?:~\d{1,9}\.(?:\d{1,9}|-))*)?")
_RECOMPUTE_EDIT = re.compile(r"r(\d{1,9}):(\d{1,9})?")


def format_edits(before: Sequence[Move], after: Sequence[Move], recomputes_before: Sequence[Recompute] = (),
                 recomputes_after: Sequence[Recompute] = ()) -> str:
    """The edits that turn the moves `before` into `after`, and the recomputes `recomputes_before` into
    `recomputes_after`, for a link (see `parse_edits`)."""
    def trips(moves: Sequence[Move]) -> dict[int, list[tuple[int, int | None]]]:
        out: dict[int, list[tuple[int, int | None]]] = {}
        for mv in moves:
            out.setdefault(mv.tensor, []).append((mv.offload_after, mv.prefetch_after))
        return out

    was, now = trips(before), trips(after)
    entries = []
    for t in sorted(set(was) | set(now)):
        if was.get(t) != now.get(t):
            entries.append(f"{t}:" + "~".join(f"{o}.{'-' if p is None else p}" for o, p in now.get(t, [])))
    made, remade = ({step.tensor: step.before for step in steps} for steps in (recomputes_before, recomputes_after))
    entries += [f"r{t}:{remade.get(t, '')}" for t in sorted(set(made) | set(remade)) if made.get(t) != remade.get(t)]
    return ",".join(entries)


def parse_edits(graph: Graph, before: Sequence[Move], text: str, recomputes: Sequence[Recompute] = ()
                ) -> tuple[list[Move], list[Recompute]]:
    """The moves `before` and the recomputes with a link's edits (`format_edits`) applied, checked against
    the graph (any graph of the model: the recomputes are checked on it without re-runs, the moves on it
    with the edited recomputes'). The text is untrusted: anything but the format, or a plan the graph
    refuses, raises PlanError."""
    if len(text) > MAX_EDITS_CHARS:
        raise PlanError(f"the link's edits are {len(text)} characters; at most {MAX_EDITS_CHARS} are read")
    replaced: dict[int, list[Move]] = {}
    remade: dict[int, int | None] = {}
    for k, entry in enumerate(text.split(",") if text else []):
        m, r = _EDIT.fullmatch(entry), _RECOMPUTE_EDIT.fullmatch(entry)
        if m is None and r is None:
            raise PlanError(f"edit {k + 1} of the link, {quoted(entry[:40])}, is not tensor:offload.prefetch (a "
                            "round trip) or rtensor:op (a recompute)")
        found = m if m is not None else r
        assert found is not None
        t = int(found[1])
        if t >= len(graph.tensors):
            raise PlanError(f"edit {k + 1} of the link names tensor {t}; {graph.model} has {len(graph.tensors)}")
        if r is not None:
            if t in remade:
                raise PlanError(f"the link edits tensor {t}'s recompute twice")
            remade[t] = None if r[2] is None else int(r[2])
            continue
        assert m is not None
        if t in replaced:
            raise PlanError(f"the link edits tensor {t} twice")
        replaced[t] = [Move(t, int(o), None if p == "-" else int(p))
                       for o, p in (trip.split(".") for trip in (m.group(2).split("~") if m.group(2) else []))]
    steps = [step for step in recomputes if step.tensor not in remade]
    steps += [Recompute(t, op) for t, op in remade.items() if op is not None]
    full = graph.full or graph
    plain = full.plain or full
    check_recomputes(plain, steps)
    # the moves kept in their order, so text with no edits gives `before` back as it was
    moves = [mv for mv in before if mv.tensor not in replaced] + [mv for ms in replaced.values() for mv in ms]
    check_moves(recomputed(plain, tuple(steps)), moves)
    return moves, steps
