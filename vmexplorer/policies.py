"""Policies are plan compilers: pure functions from a graph, a capacity and options to a plan.

Each policy only says which tensors make planned round trips (`Move`s); `residency.repair` then
adds what the UVM driver would do on top (demand faults, LRU evictions), so every plan is complete
and its forced parts are visible as `Origin.DRIVER` memory operations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .graph import Graph, Kind, Phase
from .plan import Move, Plan, PlanError
from .residency import check, next_use, repair, transfers_for_moves
from .units import format_bytes


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
    trips: dict[int, list[tuple[int, int]]] = {}
    for mv in moves:
        if not 0 <= mv.tensor < len(graph.tensors):
            raise PlanError(f"move names tensor {mv.tensor}, but the graph has {len(graph.tensors)} tensors")
        tensor = graph.tensors[mv.tensor]
        if not -1 <= mv.offload_after < n:
            raise PlanError(f"{tensor.name}: offload_after {mv.offload_after} is not an op (0..{n - 1})")
        if not tensor.persistent and mv.offload_after < tensor.producer:
            raise PlanError(f"{tensor.name} is offloaded after {_op(graph, mv.offload_after)}, before its "
                            f"producer {graph.ops[tensor.producer].name} runs; offload it after that")
        p = mv.prefetch_after
        if p is not None and not -1 <= p < n:
            raise PlanError(f"{tensor.name}: prefetch_after {p} is not an op (-1..{n - 1})")
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
        for a, b in trips.get(mv.tensor, []):
            if any(lo <= b and a <= hi for lo, hi in spans):
                raise PlanError(f"{tensor.name} has two overlapping moves (one away over ops {a}..{b})")
        trips.setdefault(mv.tensor, []).extend(spans)


def load_moves(graph: Graph, data: Any) -> list[Move]:
    """Moves from a JSON document: {"moves": [{"tensor", "offload_after", "prefetch_after"}]}, with
    tensors and ops named or numbered."""
    if isinstance(data, Mapping):
        data = data.get("moves")
    if not isinstance(data, list):
        raise PlanError('a manual plan is {"moves": [{"tensor": ..., "offload_after": ..., '
                        '"prefetch_after": ...}, ...]}')
    op_ids = {op.name: i for i, op in enumerate(graph.ops)}
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, Mapping) or not {"tensor", "offload_after"} <= item.keys():
            raise PlanError(f"move {i} needs 'tensor' and 'offload_after' (and optionally 'prefetch_after')")
        try:
            tensor = item["tensor"] if _is_int(item["tensor"]) else graph.tensor_id(str(item["tensor"]))
        except KeyError as e:
            raise PlanError(f"move {i}: {e.args[0]}") from None
        offload = _op_id(item["offload_after"], op_ids, i)
        prefetch = item.get("prefetch_after")
        out.append(Move(int(tensor), offload, None if prefetch is None else _op_id(prefetch, op_ids, i)))
    check_moves(graph, out)
    return out


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


def _op_id(value: Any, op_ids: dict[str, int], i: int) -> int:
    if _is_int(value):
        return int(value)
    if value in op_ids:
        return op_ids[value]
    raise PlanError(f"move {i}: no op named {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _op(graph: Graph, k: int) -> str:
    return "the iteration start" if k < 0 else graph.ops[k].name


def _key(key: tuple[str, int, int]) -> str:
    return f"{key[0]} batch {key[1]} at {key[2]}x{key[2]}"

