"""The time no schedule can beat: the traffic bound (plan/bound.py) at the cost model's best rates.

`lower_bound(graph, capacity, cost)` is the larger of the iteration's compute (the sum of the cost
model's per-op times: every schedule runs every op once on one compute stream; a convolution's in the
fastest workspace that fits in the capacity beside the tensors it touches, since no plan can give it
more: at half VGG-19's footprint its first convolutions' backward ops cannot have the workspaces they are
fastest in) and the time the least
traffic takes at the fastest rate the cost model knows each way (bytes to the host at the fastest
eviction rate the GPU showed, `CostModel.fastest_evict_bytes_per_ns`, not the average the simulator
predicts with; bytes to the device at the faster of prefetching and demand faults). Where the cost model says
migrations run one direction at a time (`CostModel.serialises_directions`: the UVM driver), the two
directions' times add up; otherwise each direction is a bound of its own. Fixed costs (a memory call's,
a launch's) and the host's falling behind are left out: they only make real iterations longer.

The mechanism picks the rates (`CostModel.for_mechanism`): the same least traffic, through the UVM
driver (one direction at a time) or as pinned copies under `swap` (both directions at once, each at its
copy rate). So the two bounds of one graph and capacity say what the driver costs at best.

That is the bound over the whole iteration. A tighter one cuts the iteration into windows of
consecutive ops (`plan.bound.window_traffic`: the least bytes each way while a window runs) and adds
the windows up, each as long as the longest of its compute, its copies out and its copies in (their sum
where the directions take turns). Windows do not overlap in time, so no schedule beats the sum: what
the forward must send out takes the forward's time, what the backward must bring back takes the
backward's, whatever the directions could do together. The best cut is found by dynamic programming
over op boundaries, for the iteration cut at its first op and at the first op of each phase; the bound
is the larger of the two kinds, `set_by` "transfers each window must make" where the windows win.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import Mechanism
from ..graph import Graph, Kind
from ..graph.recompute import RERUN
from ..plan.bound import Windows, min_traffic, remade_free, window_traffic
from ..plan.crowded import crowded_ops
from .costmodel import CostModel

COMPUTE = "compute"
MIGRATION = "migration bandwidth"  # both directions, one at a time
EVICTION = "eviction bandwidth"
PREFETCH = "prefetch bandwidth"
WINDOWS = "transfers each window must make"  # compute and copies window by window (window_traffic)
TRADE = "re-runs or copies for what a crowded op cannot hold"  # the joint bound's trade (plan/crowded.py)
SET_BY = (COMPUTE, MIGRATION, EVICTION, PREFETCH, WINDOWS, TRADE)


@dataclass(frozen=True)
class Bound:
    """The least traffic each way and the shortest iteration any schedule could have, with what sets it."""

    min_bytes_to_host: int
    min_bytes_to_device: int
    lower_bound_ns: int
    set_by: str  # one of SET_BY

    def versus(self, iteration_ns: float) -> str:
        """How an iteration compares, for people: "1.4x the bound, set by migration bandwidth"."""
        if self.lower_bound_ns <= 0:
            return f"the bound is 0, set by {self.set_by}"
        return f"{iteration_ns / self.lower_bound_ns:.1f}x the bound, set by {self.set_by}"

    def as_json(self) -> dict[str, int | str]:
        return {"min_bytes_to_host": self.min_bytes_to_host, "min_bytes_to_device": self.min_bytes_to_device,
                "lower_bound_ns": self.lower_bound_ns, "set_by": self.set_by}


def lower_bound(graph: Graph, capacity: int, cost: CostModel, mechanism: Mechanism | str = Mechanism.UVM,
                windows: bool = True, recompute: bool = False) -> Bound:
    """The bound at `capacity` bytes under `cost` through `mechanism`; PlanError below the largest op's
    working set. `windows=False`: the whole-iteration bound alone (the least traffic at the best rates).
    `recompute`: the joint bound, over plans that may also recompute activations (`plan.bound.remade_free`:
    their traffic relaxed, their compute the graph's without re-runs)."""
    rates = cost.for_mechanism(mechanism)
    given = graph
    if recompute:
        graph = remade_free(graph)
    traffic = min_traffic(graph, capacity)
    compute = float(_op_ns(graph, rates, capacity).sum())
    out_ns = traffic.min_bytes_to_host / rates.fastest_evict_bytes_per_ns
    in_ns = traffic.min_bytes_to_device / _into(rates)
    if rates.serialises_directions:
        moving, what = out_ns + in_ns, MIGRATION
    else:
        moving, what = (out_ns, EVICTION) if out_ns >= in_ns else (in_ns, PREFETCH)
    ns, set_by = (compute, COMPUTE) if compute >= moving else (moving, what)
    if windows:
        windowed = sum(w.ns for w in windows_of(graph, capacity, cost, mechanism))
        if windowed > ns * (1 + 1e-9):  # not where the windows only add up the same compute in another order
            ns, set_by = windowed, WINDOWS
    if recompute:
        traded = trade_ns(given, capacity, rates)
        if traded > ns * (1 + 1e-9):
            ns, set_by = traded, TRADE
    return Bound(traffic.min_bytes_to_host, traffic.min_bytes_to_device, int(ns), set_by)


def trade_ns(graph: Graph, capacity: int, cost: CostModel) -> float:
    """The joint bound's trade: at each crowded op (`plan.crowded`) what must be away is made again, its
    re-runs' time added to the compute, or brought back, at the fastest rate in, on copies that run beside
    the compute, split as cheaply as it can be; the most any crowded op asks. `cost` at its mechanism's rates."""
    full = graph.full or graph
    op_ns = _op_ns(full.plain or full, cost, capacity)  # the ops without re-runs, numbered as crowded_ops has them
    compute_ns = float(op_ns.sum())
    per_byte = 1.0 / _into(cost)
    most = compute_ns
    for crowded in crowded_ops(graph, capacity):
        prices = [sum(share * op_ns[o] for o, share in ops) for ops in crowded.remade_by]
        most = max(most, cheapest_split(crowded.over_bytes, crowded.remade_bytes, prices, compute_ns, per_byte))
    return most


def cheapest_split(over_bytes: int, sizes: tuple[int, ...], prices: list[float], compute_ns: float,
                   per_byte_ns: float) -> float:
    """The least, over how many of `over_bytes` are made again rather than copied back, of the longer of the
    compute with those re-runs and the copies of the rest: re-runs fractionally, the cheapest per byte first
    (a lower bound on any whole ones), the rest at `per_byte_ns`."""
    made, spent = 0.0, 0.0
    if compute_ns >= over_bytes * per_byte_ns:
        return compute_ns
    for i in sorted(range(len(sizes)), key=lambda i: (prices[i] / max(sizes[i], 1), i)):
        rate, take = prices[i] / max(sizes[i], 1), min(sizes[i], over_bytes - made)
        # where the compute with re-runs meets the copies of what is left: the two cross inside this one
        meet = ((over_bytes - made) * per_byte_ns - compute_ns - spent) / (rate + per_byte_ns)
        if meet <= take:
            return compute_ns + spent + rate * max(meet, 0.0)
        made, spent = made + take, spent + rate * take
        if made >= over_bytes:
            return compute_ns + spent
    return max(compute_ns + spent, (over_bytes - made) * per_byte_ns)


def _into(cost: CostModel) -> float:
    """The fastest rate the cost model brings data to the device at: prefetching or demand faults."""
    return max(cost.prefetch_bytes_per_ns, cost.fault_bytes_per_ns, *cost.fault_bytes_per_ns_by_kind.values())


def _op_ns(graph: Graph, cost: CostModel, capacity: int) -> np.ndarray:
    """Each op's compute under the cost model: every schedule runs every op once on one stream, a
    convolution at best in the fastest workspace that fits in `capacity` beside what it must touch
    (`workspace_bound`)."""
    return np.array([cost.compute_ns(op.name, op.flops, op.bytes_touched, workspace_bound(graph, k, cost, capacity))
                     for k, op in enumerate(graph.ops)])


def least_compute_ns(graph: Graph, capacity: int, cost: CostModel) -> float:
    """The least compute of an iteration of `graph` (without re-runs) at `capacity`: its ops' times, each
    convolution's in the best workspace the capacity leaves it (`workspace_bound`)."""
    full = graph.full or graph
    return float(_op_ns(full.plain or full, cost, capacity).sum())


def workspace_bound(graph: Graph, k: int, cost: CostModel, capacity: int) -> int | None:
    """The workspace in which op k runs fastest under the cost model among those no larger than what
    `capacity` leaves beside the other tensors it touches: no plan at `capacity` gives it more. None
    (the fastest of all) where the graph's workspaces are outside the capacity (sessions before schema 11)
    or the op's time does not depend on its workspace."""
    steps = cost.workspace_ns.get(graph.ops[k].name.removesuffix(RERUN))
    if not steps or not graph.workspaces:
        return None
    op = graph.ops[k]
    room = capacity - sum(graph.tensors[t].nbytes for t in op.touches if graph.tensors[t].kind is not Kind.WORKSPACE)
    # the cost model reads a workspace as its largest step within it, and steps need not get faster with size
    fits = [w for w in dict.fromkeys([0, *(nbytes for nbytes, _ in steps), room]) if 0 <= w <= room]
    return min(fits, key=lambda w: cost.compute_ns(op.name, op.flops, op.bytes_touched, w), default=0)


@dataclass(frozen=True)
class Window:
    """One window of the windowed bound: ops `first`..`last` (positions in the iteration, wrapping past
    its end), their compute and the least time their copies take each way."""

    first: int
    last: int
    compute_ns: float
    to_host_ns: float
    to_device_ns: float
    serialised: bool

    @property
    def ns(self) -> float:
        moving = (self.to_host_ns + self.to_device_ns if self.serialised
                  else max(self.to_host_ns, self.to_device_ns))
        return max(self.compute_ns, moving)


def windows_of(graph: Graph, capacity: int, cost: CostModel, mechanism: Mechanism | str = Mechanism.UVM
               ) -> list[Window]:
    """The windows whose times add up to the most, over every cut of the iteration from its first op or
    a phase's first op: the windowed bound is their sum."""
    cost = cost.for_mechanism(mechanism)
    op_ns = _op_ns(graph, cost, capacity)
    cuts = [_best_cut(window_traffic(graph, capacity, first), op_ns, cost.fastest_evict_bytes_per_ns, _into(cost),
                      cost.serialises_directions) for first in _cuts(graph)]
    return max(cuts, key=lambda ws: sum(w.ns for w in ws))


def _cuts(graph: Graph) -> list[int]:
    """Where the iteration is cut for the windows: its first op and the first op of each later phase."""
    ops = graph.ops
    return [0, *(k for k in range(1, len(ops)) if ops[k].phase != ops[k - 1].phase)]


def _best_cut(windows: Windows, op_ns: np.ndarray, out_rate: float, in_rate: float, serialised: bool
              ) -> list[Window]:
    """The cut of the iteration (from `windows.first`) into consecutive windows whose times add up to
    the most: best[k] is the most the ops before the k-th boundary must take, by dynamic programming."""
    n = len(op_ns)
    clock = np.r_[0.0, np.cumsum(np.roll(op_ns, -windows.first))]
    out_ns, in_ns = windows.to_host / out_rate, windows.to_device / in_rate
    moving = out_ns + in_ns if serialised else np.maximum(out_ns, in_ns)
    best, came_from = np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    for k in range(1, n + 1):
        totals = best[:k] + np.maximum(clock[k] - clock[:k], moving[:k, k])
        came_from[k] = int(np.argmax(totals))
        best[k] = totals[came_from[k]]
    cut, k = [], n
    while k > 0:
        j = int(came_from[k])
        cut.append(Window((windows.first + j) % n, (windows.first + k - 1) % n, float(clock[k] - clock[j]),
                          float(out_ns[j, k]), float(in_ns[j, k]), serialised))
        k = j
    return cut[::-1]
