"""The time no schedule can beat: the traffic bound (plan/bound.py) at the cost model's best rates.

`lower_bound(graph, capacity, cost)` is the larger of the iteration's compute (the sum of the cost
model's per-op times: every schedule runs every op once on one compute stream) and the time the least
traffic takes at the fastest rate the cost model knows each way (bytes to the host at the eviction
rate; bytes to the device at the faster of prefetching and demand faults). Where the cost model says
migrations run one direction at a time (`CostModel.serialises_directions`: the UVM driver), the two
directions' times add up; otherwise each direction is a bound of its own. Fixed costs (a memory call's,
a launch's) and the host's falling behind are left out: they only make real iterations longer.

The mechanism picks the rates (`CostModel.for_mechanism`): the same least traffic, through the UVM
driver (one direction at a time) or as pinned copies under `swap` (both directions at once, each at its
copy rate). So the two bounds of one graph and capacity say what the driver costs at best.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Mechanism
from ..graph import Graph
from ..plan.bound import min_traffic
from .costmodel import CostModel

COMPUTE = "compute"
MIGRATION = "migration bandwidth"  # both directions, one at a time
EVICTION = "eviction bandwidth"
PREFETCH = "prefetch bandwidth"
SET_BY = (COMPUTE, MIGRATION, EVICTION, PREFETCH)


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


def lower_bound(graph: Graph, capacity: int, cost: CostModel, mechanism: Mechanism | str = Mechanism.UVM) -> Bound:
    """The bound at `capacity` bytes under `cost` through `mechanism`; PlanError below the largest op's
    working set."""
    cost = cost.for_mechanism(mechanism)
    traffic = min_traffic(graph, capacity)
    compute = sum(cost.compute_ns(op.name, op.flops, op.bytes_touched) for op in graph.ops)
    into = max(cost.prefetch_bytes_per_ns, cost.fault_bytes_per_ns, *cost.fault_bytes_per_ns_by_kind.values())
    out_ns = traffic.min_bytes_to_host / cost.evict_bytes_per_ns
    in_ns = traffic.min_bytes_to_device / into
    if cost.serialises_directions:
        moving, what = out_ns + in_ns, MIGRATION
    else:
        moving, what = (out_ns, EVICTION) if out_ns >= in_ns else (in_ns, PREFETCH)
    ns, set_by = (compute, COMPUTE) if compute >= moving else (moving, what)
    return Bound(traffic.min_bytes_to_host, traffic.min_bytes_to_device, int(ns), set_by)
