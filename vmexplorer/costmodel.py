"""How long things take: the simulator's cost model, its uncalibrated defaults and its calibration.

Bandwidths are in bytes per ns, which is the same number as GB/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


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


def with_op_times(model: CostModel, op_ns: dict[str, float], name: str) -> CostModel:
    return replace(model, name=name, op_ns=dict(op_ns))
