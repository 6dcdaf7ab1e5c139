"""Policies are plan compilers: pure functions from a graph, a capacity and options to a plan.

Each policy only says which tensors make planned round trips (`Move`s); `residency.repair` then
adds what the UVM driver would do on top (demand faults, LRU evictions), so every plan is complete
and its forced parts are visible as `Origin.DRIVER` memory operations.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, NoReturn

import numpy as np

from ..graph import Graph, Kind, Phase
from ..plan import Move, Plan, PlanError
from ..plan.residency import check, next_use, repair, transfers_for_moves
from ..units import format_bytes, quoted, typed


@dataclass(frozen=True)
class OptionSpec:
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] = ()
    minimum: int | None = None


@dataclass(frozen=True)
class PolicySpec:
    name: str
    summary: str
    options: dict[str, OptionSpec] = field(default_factory=dict)


POLICIES: dict[str, PolicySpec] = {
    "device": PolicySpec("device", "plain device memory, no paging: the ideal reference; refuses when "
                                   "the footprint exceeds the capacity"),
    "uvm": PolicySpec("uvm", "NVIDIA's default managed memory: demand faults, LRU eviction at capacity"),
    "autovm": PolicySpec("autovm", "graph-informed: offload feature maps after their last forward use, "
                                   "prefetch them before their backward use; LRU only as a fallback", {
        "prefetch_distance": OptionSpec(int, 3, "issue each prefetch this many ops before its use", minimum=1),
        "offload": OptionSpec(str, "needed", "offload only as many feature maps as the capacity needs "
                                             "(earliest first), or all without immediate reuse",
                              choices=("needed", "all")),
        "tensors": OptionSpec(str, "activations", "plan feature maps only (AutoVM), or every tensor with "
                                                  "a long reuse gap: weights, gradients, momentum too",
                              choices=("activations", "all")),
    }),
    "manual": PolicySpec("manual", "a person's plan (moves), repaired with forced evictions where it "
                                   "would exceed the capacity"),
}


def non_default_options(policy: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that differ from the policy's defaults (an option the policy does not know counts):
    empty when a plan ran the policy as shipped."""
    spec = POLICIES[policy].options if policy in POLICIES else {}
    return {k: v for k, v in options.items() if k not in spec or spec[k].default != v}


def compile_plan(graph: Graph, capacity: int, policy: str, options: Mapping[str, Any] | None = None,
                 moves: Sequence[Move] = ()) -> Plan:
    spec = POLICIES.get(policy)
    if spec is None:
        raise PlanError(f"unknown policy {policy!r}; choose one of: {', '.join(POLICIES)}")
    opts = _check_options(spec, options or {})
    check_capacity(graph, capacity)
    if policy == "device" and graph.footprint > capacity:
        raise PlanError(f"the device policy needs the whole footprint, {format_bytes(graph.footprint)}, but the "
                        f"capacity is {format_bytes(capacity)}; use uvm or autovm, or a capacity of at least that")
    if moves and policy != "manual":
        raise PlanError(f"moves are a manual plan; the {policy} policy makes its own")
    if policy == "autovm":
        moves = autovm_moves(graph, capacity, opts["prefetch_distance"], opts["offload"],
                             opts["tensors"])
    elif policy == "manual":
        check_moves(graph, moves)
    replay = repair(graph, capacity, transfers_for_moves(graph, list(moves)))
    return Plan(graph.model, graph.batch, graph.image_size, policy, capacity, replay.memops,
                replay.resident_at_start, replay.peak, opts)


def check_capacity(graph: Graph, capacity: int) -> None:
    need, op = graph.min_capacity
    if capacity < need:
        raise PlanError(f"capacity {format_bytes(capacity)} is below the minimum for {graph.model} batch "
                        f"{graph.batch}: {graph.ops[op].name} alone touches {format_bytes(need)} ({need} bytes)")


MIN_MOVE_BYTES = 2 << 20  # below one 2 MiB page group a trip costs more in calls than it frees


def autovm_moves(graph: Graph, capacity: int, prefetch_distance: int = 3, offload: str = "needed",
                 tensors: str = "activations") -> list[Move]:
    """Offload after the last use before a long gap, prefetch `prefetch_distance` ops before the use
    that ends it. AutoVM's gaps are a feature map's, from its last forward use to its first backward
    use; tensors="all" takes every tensor's gaps, a persistent tensor's gap across the iteration
    boundary included (a trip with prefetch_after < offload_after). With offload="needed", take the
    earliest trips (the most time to move) until the static profile fits the capacity."""
    candidates = []
    n = len(graph.ops)
    for t, tensor in enumerate(graph.tensors):
        if tensor.nbytes < MIN_MOVE_BYTES or not (tensors == "all" or tensor.kind is Kind.ACTIVATION):
            continue
        for last, use in reuse_gaps(graph, t, feature_maps_only=tensors != "all"):
            prefetch_after = use - prefetch_distance
            if use >= n:  # a wrapped gap: the prefetch is issued in the next iteration, at its start at the earliest
                prefetch_after = max(prefetch_after - n, -1)
                if use - n > prefetch_after:
                    candidates.append(Move(t, last, prefetch_after))
            elif prefetch_after > last:
                candidates.append(Move(t, last, prefetch_after))
    candidates.sort(key=lambda mv: (mv.offload_after, -graph.tensors[mv.tensor].nbytes))
    if offload == "all":
        return _fit_prefetches(graph, capacity, candidates)
    occupied = np.array(graph.live_bytes, dtype=np.int64)
    chosen: list[Move] = []
    remaining = list(candidates)
    while True:
        over = np.flatnonzero(occupied > capacity)
        if not len(over):
            return _fit_prefetches(graph, capacity, chosen)
        k = int(over[0])
        covering = [mv for mv in remaining if any(lo <= k < hi for lo, hi in _away(mv, len(graph.ops)))]
        if not covering:  # nothing planned can be away at this op: the LRU fallback takes over here
            occupied[k] = 0
            continue
        # the earliest trip that alone clears the excess (each byte offloaded costs slow eviction
        # bandwidth), else the earliest: candidates are in order of their offloads
        excess = occupied[k] - capacity
        pick = next((mv for mv in covering if graph.tensors[mv.tensor].nbytes >= excess), covering[0])
        remaining.remove(pick)
        chosen.append(pick)
        for lo, hi in _away(pick, len(graph.ops)):
            occupied[lo:hi] -= graph.tensors[pick.tensor].nbytes


def _away(mv: Move, n: int) -> list[tuple[int, int]]:
    """Op ranges [lo, hi) during which a move's tensor is off the device in the static profile."""
    p = mv.prefetch_after
    assert p is not None
    if p >= mv.offload_after:
        return [(mv.offload_after + 1, p + 1)]
    return [(mv.offload_after + 1, n), (0, p + 1)]


def reuse_gaps(graph: Graph, t: int, feature_maps_only: bool = False) -> list[tuple[int, int]]:
    """(last use, next use) pairs of a tensor; a use in the next iteration is numbered from n on (a
    persistent tensor's gap across the boundary). With feature_maps_only, AutoVM's one gap of a feature
    map: from its last forward use to its first backward use."""
    tensor, uses = graph.tensors[t], graph.uses[t]
    if feature_maps_only:
        if tensor.persistent:
            return []
        backward = [k for k in uses if graph.ops[k].phase is Phase.BACKWARD]
        forward = [k for k in uses if graph.ops[k].phase is not Phase.BACKWARD]
        return [(max(forward), min(backward))] if backward and forward else []
    pairs = list(zip(uses, uses[1:]))
    if tensor.persistent and uses:
        pairs.append((uses[-1], uses[0] + len(graph.ops)))
    return pairs


def _fit_prefetches(graph: Graph, capacity: int, moves: list[Move]) -> list[Move]:
    """Issue prefetches late enough that, while they are in flight, they and each op's own tensors
    fit: neither can be evicted, so an earlier prefetch would only be thrown out again."""
    working = np.array(graph.working_sets, dtype=np.int64)
    arriving = np.zeros(len(graph.ops), dtype=np.int64)
    out = []
    for mv in sorted(moves, key=lambda mv: -(mv.prefetch_after or 0)):  # latest uses claim room first
        nbytes = graph.tensors[mv.tensor].nbytes
        p = mv.prefetch_after
        assert p is not None
        use = next_use(graph, mv.tensor, p)
        assert use is not None
        tight = np.flatnonzero(working[p + 1:use] + arriving[p + 1:use] + nbytes > capacity)
        if len(tight):  # issue after the last op it would not fit beside
            p = min(p + 1 + int(tight[-1]), use - 1)
        arriving[p + 1:use] += nbytes
        out.append(Move(mv.tensor, mv.offload_after, p))
    return sorted(out, key=lambda mv: (mv.offload_after, mv.tensor))


def check_moves(graph: Graph, moves: Sequence[Move]) -> None:
    """A person's moves must make sense on the graph; each error names the tensor, ops and a fix.
    A persistent tensor's trip may wrap: offloaded after its last use, prefetched (prefetch_after <
    offload_after) before its first use in the next iteration."""
    n = len(graph.ops)
    # per tensor, the op spans it is away over: disjoint, sorted by start, so one bisect finds a clash
    # (a file may hold a hundred thousand moves; comparing each with all before it would take minutes)
    trips: dict[int, list[tuple[int, int]]] = {}
    for mv in moves:
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
            spans = [(mv.offload_after, n - 1), (-1, p)]
        else:
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
            spans = [(mv.offload_after, n - 1 if p is None else p)]
        away = trips.setdefault(mv.tensor, [])
        for lo, hi in spans:
            k = bisect_right(away, (hi, n))  # the spans starting at or before this one's end
            if k and away[k - 1][1] >= lo:
                a, b = away[k - 1]
                raise PlanError(f"{tensor.name} has two overlapping moves (one away over ops {a}..{b})")
        for span in spans:
            insort(away, span)


# What a moves file may be: a few thousand moves of the largest model take well under 1 MiB, and a
# manual plan is 3 levels deep ({"moves": [{...}]}); anything beyond is a mistake or a hostile file,
# refused before it costs time or memory.
MAX_MOVES_FILE_BYTES = 4 << 20
MAX_MOVES_DEPTH = 16
_INDEX_DIGITS = 30  # a longer integer is no index; kept as written, as int() refuses 4300 digits


def parse_moves(graph: Graph, raw: bytes) -> list[Move]:
    """The moves of a moves file's raw bytes (UTF-8 JSON, as `load_moves` reads), checked against the
    graph. Anything wrong (too big, not UTF-8, not JSON, nested too deep, wrong types, unknown names,
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


def load_moves(graph: Graph, data: Any) -> list[Move]:
    """Moves from a JSON document: {"moves": [{"tensor", "offload_after", "prefetch_after"}]}, with
    tensors and ops named or numbered (-1: the iteration start); a bare list of moves is read too."""
    moves = data.get("moves") if isinstance(data, Mapping) else data
    if not isinstance(moves, list):
        came = 'an object without "moves"' if isinstance(data, Mapping) and "moves" not in data else _json(moves)
        raise PlanError('a manual plan is {"moves": [{"tensor": ..., "offload_after": ..., '
                        f'"prefetch_after": ...}}, ...]}}, a list of moves, not {came}')
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


def validate_plan(graph: Graph, plan: Plan) -> None:
    """Raise PlanError if the plan breaks a rule anywhere: capacity, residency, ordering, steady state."""
    if plan.key != graph.key:
        raise PlanError(f"the plan is for {_key(plan.key)}, not {_key(graph.key)}")
    n, t_count = len(graph.ops), len(graph.tensors)
    for i, m in enumerate(plan.memops):
        if not 0 <= m.tensor < t_count:
            raise PlanError(f"memory operation {i} names tensor {m.tensor}; the graph has {t_count}")
        if not (-1 <= m.issue_after < m.complete_before <= n):
            raise PlanError(f"memory operation {i} ({graph.tensors[m.tensor].name}) is issued after op "
                            f"{m.issue_after} and due before op {m.complete_before}: not in order")
        if m.mode.value != "async" and m.complete_before != m.issue_after + 1:
            raise PlanError(f"memory operation {i} is {m.mode.value}, so it must complete before the "
                            "next op")
    for t, nbytes in plan.resident_at_start:
        if not (0 <= t < t_count and graph.tensors[t].persistent and 0 < nbytes <= graph.tensors[t].nbytes):
            raise PlanError(f"resident_at_start has {nbytes} bytes of tensor {t}: not a persistent "
                            "tensor or not that many bytes")
    problems = check(graph, plan.capacity, plan.memops, plan.resident_at_start).problems
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PlanError(f"invalid plan: {problems[0]}{more}")


def _check_options(spec: PolicySpec, options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(options) - set(spec.options)
    if unknown:
        known = ", ".join(spec.options) or "none"
        raise PlanError(f"the {spec.name} policy has no option {sorted(unknown)[0]!r} (its options: {known})")
    out = {}
    for name, opt in spec.options.items():
        value = options.get(name, opt.default)
        try:
            value = opt.type(value)
        except (TypeError, ValueError):
            raise PlanError(f"{name} must be {opt.type.__name__}, not {value!r}") from None
        if opt.choices and value not in opt.choices:
            raise PlanError(f"{name} has to be one of {', '.join(map(repr, opt.choices))}, not {value!r}")
        if opt.minimum is not None and value < opt.minimum:
            raise PlanError(f"{name} must be at least {opt.minimum}, not {value!r}")
        out[name] = value
    return out


def _op_id(value: Any, op_ids: dict[str, int], i: int, key: str) -> int:
    if _is_int(value):
        return int(value)
    if not isinstance(value, str):  # a list or an object is not even hashable
        raise PlanError(f"move {i}: {key} must be an op's name or index (-1..{len(op_ids) - 1}, -1 being the "
                        f"iteration start), not {_json(value)}")
    if value not in op_ids:
        raise PlanError(f"move {i}: no op named {typed(value)} ({key})")
    return op_ids[value]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _op(graph: Graph, k: int) -> str:
    return "the iteration start" if k < 0 else graph.ops[k].name


def _key(key: tuple[str, int, int]) -> str:
    return f"{key[0]} batch {key[1]} at {key[2]}x{key[2]}"

