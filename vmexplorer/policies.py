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
    }),
    "manual": PolicySpec("manual", "a person's plan (moves), repaired with forced evictions where it "
                                   "would exceed the capacity"),
}


def compile_plan(graph: Graph, capacity: int, policy: str, options: Mapping[str, Any] | None = None,
                 moves: Sequence[Move] = ()) -> Plan:
    spec = POLICIES.get(policy)
    if spec is None:
        raise PlanError(f"unknown policy {policy!r}; choose one of: {', '.join(POLICIES)}")
    opts = _check_options(spec, options or {})
    check_capacity(graph, capacity)
    if policy == "device" and graph.footprint > capacity:
        raise PlanError(f"the device policy needs the whole footprint, {_gib(graph.footprint)}, but the "
                        f"capacity is {_gib(capacity)}; use uvm or autovm, or a capacity of at least that")
    if moves and policy != "manual":
        raise PlanError(f"moves are a manual plan; the {policy} policy makes its own")
    if policy == "autovm":
        moves = autovm_moves(graph, capacity, opts["prefetch_distance"], opts["offload"])
    elif policy == "manual":
        check_moves(graph, moves)
    replay = repair(graph, capacity, transfers_for_moves(graph, list(moves)))
    return Plan(graph.model, graph.batch, graph.image_size, policy, capacity, replay.memops,
                replay.resident_at_start, replay.peak, opts)


def check_capacity(graph: Graph, capacity: int) -> None:
    need, op = graph.min_capacity
    if capacity < need:
        raise PlanError(f"capacity {_gib(capacity)} is below the minimum for {graph.model} batch "
                        f"{graph.batch}: {graph.ops[op].name} alone touches {_gib(need)} ({need} bytes)")


def autovm_moves(graph: Graph, capacity: int, prefetch_distance: int = 3, offload: str = "needed") -> list[Move]:
    """Offload feature maps after their last forward use; prefetch `prefetch_distance` ops before
    their first backward use. Tensors reused sooner than that stay put. With offload="needed", take
    the earliest-produced ones (the longest trips, so the most time to move) until the static
    profile fits the capacity."""
    candidates = []
    for t, tensor in enumerate(graph.tensors):
        if tensor.kind is not Kind.ACTIVATION or tensor.persistent:
            continue
        forward = [k for k in (tensor.producer, *tensor.consumers) if graph.ops[k].phase is not Phase.BACKWARD]
        backward = [k for k in tensor.consumers if graph.ops[k].phase is Phase.BACKWARD]
        if not backward:
            continue
        last_forward, first_backward = max(forward), min(backward)
        prefetch_after = first_backward - prefetch_distance
        if prefetch_after > last_forward:
            candidates.append(Move(t, last_forward, prefetch_after))
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
        pick = next((mv for mv in remaining if mv.offload_after < k <= mv.prefetch_after), None)  # type: ignore[operator]
        if pick is None:  # no feature map is away at this op: the LRU fallback takes over here
            occupied[k] = 0
            continue
        remaining.remove(pick)
        chosen.append(pick)
        occupied[pick.offload_after + 1: pick.prefetch_after + 1] -= graph.tensors[pick.tensor].nbytes  # type: ignore[operator]


def _fit_prefetches(graph: Graph, capacity: int, moves: list[Move]) -> list[Move]:
    """Issue prefetches late enough that, while they are in flight, they and each op's own tensors
    fit: neither can be evicted, so an earlier prefetch would only be thrown out again."""
    working = [graph.working_set(k) for k in range(len(graph.ops))]
    arriving = np.zeros(len(graph.ops) + 1, dtype=np.int64)
    out = []
    for mv in sorted(moves, key=lambda mv: -(mv.prefetch_after or 0)):  # latest uses claim room first
        nbytes = graph.tensors[mv.tensor].nbytes
        use = next_use(graph, mv.tensor, mv.prefetch_after)  # type: ignore[arg-type]
        p = mv.prefetch_after
        assert p is not None and use is not None
        while p < use - 1 and any(working[k] + arriving[k] + nbytes > capacity for k in range(p + 1, use)):
            p += 1
        arriving[p + 1:use] += nbytes
        out.append(Move(mv.tensor, mv.offload_after, p))
    return sorted(out, key=lambda mv: (mv.offload_after, mv.tensor))


def check_moves(graph: Graph, moves: Sequence[Move]) -> None:
    """A person's moves must make sense on the graph; each error names the tensor, ops and a fix."""
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
        end = n - 1 if mv.prefetch_after is None else mv.prefetch_after
        if mv.prefetch_after is not None:
            if not mv.offload_after <= mv.prefetch_after < n:
                raise PlanError(f"{tensor.name}: prefetch_after {mv.prefetch_after} must be an op between "
                                f"its offload ({mv.offload_after}) and {n - 1}")
            if next_use(graph, mv.tensor, mv.prefetch_after) is None:
                raise PlanError(f"{tensor.name} is prefetched after {graph.ops[mv.prefetch_after].name}, "
                                "after its last use; prefetch it before that use or drop the prefetch")
        elif next_use(graph, mv.tensor, mv.offload_after) is None and not tensor.persistent:
            raise PlanError(f"{tensor.name} is not used after {_op(graph, mv.offload_after)}: there is "
                            "nothing to offload it for")
        used = next_use(graph, mv.tensor, mv.offload_after)
        if mv.prefetch_after is not None and used is not None and used <= mv.prefetch_after:
            raise PlanError(f"{tensor.name} is used by {graph.ops[used].name} between its offload after "
                            f"{_op(graph, mv.offload_after)} and its prefetch after "
                            f"{graph.ops[mv.prefetch_after].name}: the prefetch comes after the use; "
                            f"prefetch before op {used} or offload after it")
        for a, b in trips.get(mv.tensor, []):
            if mv.offload_after <= b and a <= end:
                raise PlanError(f"{tensor.name} has two overlapping moves (ops {a}..{b} and "
                                f"{mv.offload_after}..{end})")
        trips.setdefault(mv.tensor, []).append((mv.offload_after, end))


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
    for t in plan.resident_at_start:
        if not (0 <= t < t_count and graph.tensors[t].persistent):
            raise PlanError(f"resident_at_start names {t}, which is not a persistent tensor")
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


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
