"""Fitting a cost model to a measured timeline: per-op compute times, transfer rates, fault rates and
how much prefetch calls block the host, the last by simulating the plan at each candidate."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..graph import Graph
from ..plan import Direction, MemOp, Mode, Origin, Plan
from ..plan.mechanisms import mechanism_of
from ..plan.pool import executed_graph
from ..plan.stays import elided
from ..records.spans import Timeline, timed_only
from .costmodel import H100_DEFAULT, CostModel
from .simulate import simulate
from .workspaces import rebased

HOST_BLOCK_GRID = tuple(i / 20 for i in range(21))
# A kind gets a fault rate of its own only where it faulted in this much per iteration: a few small
# faults (the loss reading a label page) take the driver's fixed latency, not a rate, and a "rate"
# from them would make a large fault of that kind elsewhere absurdly slow.
KIND_FAULT_BYTES = 32 << 20


def calibrate(graph: Graph, plan: Plan, timeline: Timeline, base: CostModel = H100_DEFAULT,
              name: str | None = None) -> CostModel:
    """Fit a cost model to a measured (or any) timeline of `plan` on `graph`.

    - Per-op compute times: each op's duration in the run's median iteration (so the times add up to
      a typical iteration: GPU clocks vary from one iteration to the next, and a set of per-op
      medians taken from different iterations adds up to none of them), or where it faulted there,
      its median over the iterations in which it took no faults; in a run with no paging, also the
      idle time of the compute stream before it (the host falling behind). When `base` already knows
      an op (calibrate on the `device` run first, then on a paging run with that model as `base`) its
      time from the paging-free run is kept.
    - Evictions: a line through every eviction's span against its bytes: the intercept is the fixed
      cost of a memory call (`call_ns`), the slope the eviction bandwidth; under uvm, the rate the big
      ones reached together too (`evict_fastest_bytes_per_ns`, the bound's); prefetches: their bytes
      over their busy time less that fixed cost.
    - Demand-fault throughput: faulted bytes over the time the faulting ops took beyond their
      fault-free time (which is why the `device` calibration comes first), over all faulting ops and
      for each op kind that faulted. Per kind, because the access pattern sets the rate and holds
      from run to run (on the H100 VGG-19's SGD updates fault faster than its convolutions' backward
      under both `uvm` and `autovm`), and the policies fault in different mixes of kinds: `autovm`
      leaves mostly weights to fault, `uvm` mostly feature maps. Per op was tried and predicted worse:
      the small ops' rates are mostly noise.
    - Host blocking (the share of an asynchronous memory call's transfer the host thread waits in the
      call): not visible in a timeline, so it is the value on a 5% grid whose simulated iteration
      comes closest to the measured one, when the plan has asynchronous calls.

    - Under `swap` (the plan's mechanism) the copies' line and rates are the swap ones
      (`swap_to_host_bytes_per_ns`, `swap_call_ns`, `swap_to_device_bytes_per_ns`, copies in on demand
      counting with the prefetches), nothing faults, and nothing is fitted for host blocking (a pinned
      copy's call returns at once): the uvm rates stay `base`'s, as the swap rates do under uvm.

    Only the timed iterations count: iterations run with CUPTI's unified-memory counters on are slower.
    Whether migrations run one direction at a time (`serialises_directions`) is `base`'s: a timeline
    shows when each transfer was issued and completed, not whether the driver ran two at once.
    """
    graph = plan.graph_of(graph)
    tl = timed_only(timeline)
    duration = (tl.op_end_ns - tl.op_start_ns).astype(np.float64)
    op_ns, op_gap_ns = _op_times(graph, plan, tl, duration, base)
    mechanism = mechanism_of(plan)
    rates = {mechanism.fitted[k]: v for k, v in _transfer_rates(graph, plan, tl, mechanism.rates(base)).items()}
    fault_rate, by_kind = _fault_rates(graph, tl, duration, op_ns, base)
    label = name or f"calibrated on {graph.model} b{graph.batch} {plan.policy} ({tl.source})"
    numbers: dict[str, Any] = {**rates, **fault_rate}  # rates only: `serialises_directions` stays `base`'s
    fitted = replace(base, name=label, op_ns=op_ns, op_gap_ns=op_gap_ns, fault_bytes_per_ns_by_kind=by_kind,
                     **numbers)
    measured = set(op_ns) - set(base.op_ns)
    if base.workspace_ns and measured:  # the ops timed here ran in the workspaces this run gave them
        fitted = replace(fitted, workspace_ns=rebased(base.workspace_ns, executed_graph(graph, plan), measured))
    if mechanism.calls_block_host and any(m.mode is Mode.ASYNC for m in plan.memops) and len(tl.op_index):
        fitted = replace(fitted, host_block=_fit_host_block(graph, plan, tl, fitted))
    return fitted


def _op_times(graph: Graph, plan: Plan, tl: Timeline, duration: np.ndarray,
              base: CostModel) -> tuple[dict[str, float], dict[str, float]]:
    """Each fault-free op's time (in the typical iteration where it ran clean there) and, when nothing
    paged, the idle time before it; an op `base` knows keeps its time and gap."""
    gap = _gaps(tl)
    op_ns, op_gap_ns = dict(base.op_ns), dict(base.op_gap_ns)
    # an op's span starts once what it waits for has arrived, so a stall is not in its duration; a
    # gap is only the host's when nothing was paging
    clean = tl.op_fault_bytes == 0
    paging = any(m.nbytes for m in plan.memops)
    typical = tl.typical_iteration() if len(tl.op_index) else -1
    for i in np.unique(tl.op_index[clean]):
        name_i = graph.ops[int(i)].name
        rows = clean & (tl.op_index == i)
        pick = rows & (tl.op_iteration == typical)
        rows = pick if pick.any() else rows
        if name_i not in base.op_ns:
            op_ns[name_i] = float(np.median(duration[rows]))
        if name_i not in base.op_gap_ns and not paging:
            op_gap_ns[name_i] = float(np.median(gap[rows]))
    return op_ns, op_gap_ns


def _transfer_rates(graph: Graph, plan: Plan, tl: Timeline, base: CostModel) -> dict[str, float]:
    """The eviction bandwidth and the fixed cost of a memory call, then the prefetch bandwidth: only
    those the timeline shows (others stay `base`'s). Under swap the copies that move nothing
    (`plan.stays`) are left out: their bytes never crossed."""
    memops, mechanism = plan.memops, mechanism_of(plan)
    spans = (tl.memop_end_ns - tl.memop_start_ns).astype(np.float64)
    skipped = elided(graph, plan)

    def rows_of(direction: Direction, modes: tuple[Mode, ...]) -> list[int]:
        return [r for r, i in enumerate(tl.memop_index) if memops[i].direction is direction
                and memops[i].mode in modes and memops[i].nbytes and int(i) not in skipped]

    rates: dict[str, float] = {}
    evictions = rows_of(Direction.TO_HOST, (Mode.ASYNC, Mode.SYNC))
    if evictions:  # span = call_ns + bytes / rate, fitted over every eviction (sizes vary widely)
        sizes = np.array([memops[tl.memop_index[r]].nbytes for r in evictions], dtype=np.float64)
        call, per_byte = _line(sizes, spans[evictions])
        if per_byte > 0:
            rates["evict_bytes_per_ns"], rates["call_ns"] = 1 / per_byte, call
        # the bound's: the rate the big ones reached together, where the mechanism's runs show it
        fastest = eviction_rate(graph, plan, tl) if "evict_fastest_bytes_per_ns" in mechanism.fitted else 0.0
        if fastest > 0:
            rates["evict_fastest_bytes_per_ns"] = fastest
    prefetches = rows_of(Direction.TO_DEVICE, mechanism.copies_in)
    call_ns = rates.get("call_ns", base.call_ns)
    busy = float(spans[prefetches].sum()) - call_ns * len(prefetches) if prefetches else 0.0
    if busy > 0:
        rates["prefetch_bytes_per_ns"] = sum(memops[tl.memop_index[r]].nbytes for r in prefetches) / busy
    return rates


def _fault_rates(graph: Graph, tl: Timeline, duration: np.ndarray, op_ns: dict[str, float],
                 base: CostModel) -> tuple[dict[str, float], dict[str, float]]:
    """Faulted bytes over the time faulting ops took beyond their fault-free `op_ns`: over all of
    them (when positive), and per op kind that faulted at least KIND_FAULT_BYTES an iteration."""
    faulted = np.flatnonzero(tl.op_fault_bytes > 0)
    known = [r for r in faulted if graph.ops[int(tl.op_index[r])].name in op_ns]
    extra = {r: duration[r] - op_ns[graph.ops[int(tl.op_index[r])].name] for r in known}
    rates: dict[str, float] = {}
    if known and sum(extra.values()) > 0:
        rates["fault_bytes_per_ns"] = float(tl.op_fault_bytes[known].sum()) / sum(extra.values())
    by_kind = dict(base.fault_bytes_per_ns_by_kind)
    iterations = max(tl.iterations, 1)
    for kind in sorted({graph.ops[int(tl.op_index[r])].kind for r in known}):
        mine = [r for r in known if graph.ops[int(tl.op_index[r])].kind == kind]
        busy, nbytes = sum(extra[r] for r in mine), float(tl.op_fault_bytes[mine].sum())
        if busy > 0 and nbytes >= KIND_FAULT_BYTES * iterations:
            by_kind[kind] = nbytes / busy
    return rates, by_kind


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares intercept (at least 0) and slope of y against x; with one size, through 0."""
    if len(x) < 2 or np.ptp(x) == 0:
        return 0.0, float(y.sum() / x.sum()) if x.sum() else 0.0
    slope, intercept = np.polyfit(x, y, 1)
    if intercept < 0:
        return 0.0, float(y.sum() / x.sum())
    return float(intercept), float(slope)


def _gaps(tl: Timeline) -> np.ndarray:
    """For each op row, how long the compute stream sat idle before it: from the end of the previous
    op of its iteration (the iteration's first op: none)."""
    order = np.lexsort((tl.op_start_ns, tl.op_iteration))
    gap = np.zeros(len(order))
    starts, ends, its = tl.op_start_ns[order], tl.op_end_ns[order], tl.op_iteration[order]
    same = np.append(False, its[1:] == its[:-1])
    prev_end = np.append(0, ends[:-1])
    gap[order] = np.where(same, np.maximum(starts - prev_end, 0), 0)
    return gap


def _fit_host_block(graph: Graph, plan: Plan, tl: Timeline, cost: CostModel) -> float:
    measured = float(np.median(tl.iteration_ns()))
    errors = [(abs(float(np.median(simulate(graph, plan, replace(cost, host_block=h)).iteration_ns())) - measured), h)
              for h in HOST_BLOCK_GRID]
    return min(errors)[1]


BIG_EVICTION = 16 << 20  # evictions this large take their time in bytes, not in the call's fixed cost


def eviction_rate(graph: Graph, plan: Plan, timeline: Timeline) -> float:
    """The rate a run's evictions of `BIG_EVICTION` bytes or more reached together, their bytes over the
    time they took (0 where it made none): what `calibrate` keeps as a uvm run's fastest eviction rate."""
    big = [e for e in evictions(graph, plan, timeline) if e.nbytes >= BIG_EVICTION and e.span_ns > 0]
    return sum(e.nbytes for e in big) / sum(e.span_ns for e in big) if big else 0.0


@dataclass(frozen=True)
class Eviction:
    """One execution of an eviction (a memory call to the host) in a run's timed iterations, with what
    could set its rate apart from others': who issued it, how much of its tensor it moves, how that
    tensor's pages last reached the device, and whether the op it makes room for then faults."""

    nbytes: int
    span_ns: int
    planned: bool  # the plan's (`Origin.PLAN`), not the replay's least-recently-used eviction
    whole: bool  # the whole tensor, not its tail
    # how the tensor's pages last reached the device before the eviction was issued: "fault" (its
    # kernels demand-faulted them in), "prefetch", "producer" (written on the device by the op that
    # makes it) or "before" (held there since the iteration began)
    arrived_by: str
    before_fault: bool  # the op it is due before takes demand faults

    @property
    def bytes_per_ns(self) -> float:
        return self.nbytes / self.span_ns if self.span_ns > 0 else float("inf")


def evictions(graph: Graph, plan: Plan, timeline: Timeline) -> list[Eviction]:
    """Every eviction of the timed iterations that moved bytes, in the timeline's row order: what
    `calibrate` fits its eviction line to, each told apart by what might change its rate."""
    graph = plan.graph_of(graph)
    tl = timed_only(timeline)
    memops = plan.memops
    faulting = {m.complete_before for m in memops if m.mode is Mode.FAULT and m.nbytes}
    arrivals: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for m in memops:
        if m.direction is Direction.TO_DEVICE:
            arrivals[m.tensor].append((m.complete_before, "fault" if m.mode is Mode.FAULT else "prefetch"))
    kinds: dict[int, Eviction] = {}
    for i, m in enumerate(memops):
        if m.direction is Direction.TO_HOST and m.mode is not Mode.FAULT and m.nbytes:
            kinds[i] = Eviction(m.nbytes, 0, m.origin is Origin.PLAN, m.nbytes >= graph.tensors[m.tensor].nbytes,
                                _arrived_by(graph, m, arrivals[m.tensor]), m.complete_before in faulting)
    spans = tl.memop_end_ns - tl.memop_start_ns
    return [replace(kinds[int(i)], span_ns=int(spans[r])) for r, i in enumerate(tl.memop_index) if int(i) in kinds]


def _arrived_by(graph: Graph, m: MemOp, arrivals: list[tuple[int, str]]) -> str:
    """How the pages `m` evicts last reached the device: the latest arrival at or before the op it
    follows, its tensor's producer counting as one."""
    tensor = graph.tensors[m.tensor]
    seen = [(op, how) for op, how in arrivals if op <= m.issue_after]
    if not tensor.persistent and tensor.producer <= m.issue_after:
        seen.append((tensor.producer, "producer"))
    return max(seen, key=lambda a: a[0], default=(-1, "before"))[1]
