"""How long things take: the simulator's cost model, its uncalibrated defaults and its calibration.

Bandwidths are in bytes per ns, which is the same number as GB/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .graph import Graph
from .plan import Direction, Mode, Plan
from .records import Timeline


@dataclass(frozen=True)
class CostModel:
    name: str
    flops_per_ns: float  # sustained arithmetic rate of compute-bound ops
    bytes_per_ns: float  # sustained device-memory rate of memory-bound ops
    launch_ns: float  # fixed cost of one op (launches, tails of small kernels)
    prefetch_bytes_per_ns: float  # cudaMemPrefetchAsync, managed -> device
    evict_bytes_per_ns: float  # cudaMemPrefetchAsync, managed -> host
    fault_bytes_per_ns: float  # kernels touching host-resident managed pages
    host_block: float  # share of a prefetch call's transfer the calling host thread is blocked
    op_ns: dict[str, float] = field(default_factory=dict)  # measured compute time by op name

    def compute_ns(self, name: str, flops: int, bytes_touched: int) -> float:
        if name in self.op_ns:
            return self.op_ns[name]
        return self.launch_ns + max(flops / self.flops_per_ns, bytes_touched / self.bytes_per_ns)


# Uncalibrated defaults. Transfer rates are the H100 measurements in DESIGN.md (PCIe Gen5 x16:
# prefetch 45 GB/s, eviction 7-10 GB/s, demand paging ~3.2 GB/s, prefetch calls block the host for
# about their transfer). Compute rates are a guess at what cuDNN sustains on an H100 PCIe with TF32
# (about half its dense tensor-core peak, about 60% of its 2 TB/s HBM) until a measured session
# replaces them through `calibrate`.
H100_DEFAULT = CostModel(
    name="h100-uncalibrated",
    flops_per_ns=100_000.0,
    bytes_per_ns=1_200.0,
    launch_ns=8_000.0,
    prefetch_bytes_per_ns=45.0,
    evict_bytes_per_ns=8.5,
    fault_bytes_per_ns=3.2,
    host_block=1.0,
)


def calibrate(graph: Graph, plan: Plan, timeline: Timeline, base: CostModel = H100_DEFAULT,
              name: str | None = None) -> CostModel:
    """Fit a cost model to a measured (or any) timeline of `plan` on `graph`.

    Per-op compute times are the median duration of each op over the iterations in which it took no
    faults; ops that always faulted keep `base`'s estimate. Bandwidths are bytes over busy time for
    each kind of transfer present; the demand-fault rate needs the op's fault-free time, so calibrate
    on a `device` session first and pass that model as `base` when calibrating on a paging one.
    What the timeline cannot show (the host blocking of memory calls) is kept from `base`.
    """
    duration = (timeline.op_end_ns - timeline.op_start_ns).astype(np.float64)
    op_ns = dict(base.op_ns)
    clean = timeline.op_fault_bytes == 0
    for i in np.unique(timeline.op_index[clean]):
        op_ns[graph.ops[int(i)].name] = float(np.median(duration[clean & (timeline.op_index == i)]))
    rates = {}
    memops = plan.memops
    spans = (timeline.memop_end_ns - timeline.memop_start_ns).astype(np.float64)
    for key, (direction, modes) in {"prefetch_bytes_per_ns": (Direction.TO_DEVICE, (Mode.ASYNC,)),
                                    "evict_bytes_per_ns": (Direction.TO_HOST, (Mode.ASYNC, Mode.SYNC))}.items():
        rows = [r for r, i in enumerate(timeline.memop_index)
                if memops[i].direction is direction and memops[i].mode in modes and memops[i].nbytes]
        busy = float(spans[rows].sum()) if rows else 0.0
        if busy > 0:
            rates[key] = sum(memops[timeline.memop_index[r]].nbytes for r in rows) / busy
    faulted = np.flatnonzero(~clean)
    known = [r for r in faulted if graph.ops[int(timeline.op_index[r])].name in op_ns]
    extra = sum(duration[r] - op_ns[graph.ops[int(timeline.op_index[r])].name] for r in known)
    if known and extra > 0:
        rates["fault_bytes_per_ns"] = float(timeline.op_fault_bytes[known].sum()) / extra
    label = name or f"calibrated on {graph.model} b{graph.batch} {plan.policy} ({timeline.source})"
    return replace(base, name=label, op_ns=op_ns, **rates)
