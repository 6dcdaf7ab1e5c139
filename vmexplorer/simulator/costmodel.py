"""How long things take: the simulator's cost model and its uncalibrated defaults (calibrate.py fits one).

Bandwidths are in bytes per ns, which is the same number as GB/s.

One cost model describes one GPU under both mechanisms: the `uvm` rates (managed memory: prefetch,
eviction, demand faults, host blocking, whether the driver serialises the directions) and the `swap`
rates (pinned cudaMemcpyAsync each way). `for_mechanism` gives the simulator and the bound the rates a
plan runs at: under swap a copy in is a copy in, planned or on demand, and the directions overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import Mechanism
from ..graph.recompute import RERUN
from ..plan.mechanisms import mechanism_of

if TYPE_CHECKING:
    from ..graph import Graph


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
    # measured idle time of the compute stream before each op when nothing was paging: the host
    # (Python, launches) falling behind the GPU; by op name
    op_gap_ns: dict[str, float] = field(default_factory=dict)
    call_ns: float = 0.0  # fixed cost of one memory call (cudaMemPrefetchAsync), on top of its bytes
    # measured demand-fault throughput by op kind, where it differs from `fault_bytes_per_ns`: how a
    # kernel walks memory decides how well the driver batches its faults (bench/results/validation.md
    # lists the rates fitted per kind on the H100)
    fault_bytes_per_ns_by_kind: dict[str, float] = field(default_factory=dict)
    # whether migrations run one direction at a time: the UVM driver does (on the H200 a 2 GiB eviction
    # and a 2 GiB prefetch issued together on two streams took their sum, docs/design.md "Device
    # facts"), pinned copies do not; the bound (simulator/bound.py) adds the two directions' times when
    # set
    serialises_directions: bool = True
    # swap: pinned cudaMemcpyAsync on one copy stream per direction (both directions at once take no
    # longer than one, docs/design.md "Device facts"). The defaults are the H100's measured 54 GB/s each
    # way, uncalibrated until a swap session is calibrated; the fixed cost of a copy call is not
    # measured yet (0)
    swap_to_device_bytes_per_ns: float = 54.0
    swap_to_host_bytes_per_ns: float = 54.0
    swap_call_ns: float = 0.0
    # a convolution's time by the workspace it runs in (cuDNN's heuristic takes the first of its plans that
    # fits, and in less memory a slower one; `simulator.workspaces` builds these from a table of the plans
    # timed on the GPU): by op name, (workspace bytes, ns beyond `op_ns`) steps in ascending bytes, each
    # holding from its bytes up to the next step's. `op_ns` is the op's time in the workspace it was
    # calibrated in: the step holding that workspace adds 0
    workspace_ns: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    # the fastest rate a whole recording's evictions ran at on this GPU (0: `evict_bytes_per_ns`). The
    # driver's evictions run in states, machine by machine and minute by minute (the H200's near 11 and
    # near 17 GB/s, notes/eviction-rate-states.md): the simulator predicts at the fitted average, the
    # bound (simulator/bound.py) at this, so that no run on a faster machine beats its bound
    evict_fastest_bytes_per_ns: float = 0.0

    @property
    def fastest_evict_bytes_per_ns(self) -> float:
        """The eviction rate the bound takes: the fastest this model knows."""
        return max(self.evict_bytes_per_ns, self.evict_fastest_bytes_per_ns)

    def for_mechanism(self, mechanism: Mechanism | str) -> CostModel:
        """The model a plan of `mechanism` runs at (`MechanismSpec.rates`): itself under uvm; under swap its
        copy rates in place of the driver's, no host blocking and the directions overlapping."""
        return mechanism_of(mechanism).rates(self)

    def fault_ns(self, nbytes: int, kind: str = "") -> float:
        return nbytes / self.fault_bytes_per_ns_by_kind.get(kind, self.fault_bytes_per_ns)

    def copy_ns(self, nbytes: int, to_device: bool) -> float:
        return self.call_ns + nbytes / (self.prefetch_bytes_per_ns if to_device else self.evict_bytes_per_ns)

    def compute_ns(self, name: str, flops: int, bytes_touched: int, workspace_bytes: int | None = None) -> float:
        """An op's time: measured (`op_ns`) or from its work at the model's rates; a convolution's in
        `workspace_bytes` of workspace (`workspace_ns`), or, None, in the workspace it runs fastest in (what
        a bound over every plan may assume). An op run again to recompute (`graph.recompute`) takes its op's."""
        name = name.removesuffix(RERUN)
        ns = self.op_ns[name] if name in self.op_ns else \
            self.launch_ns + max(flops / self.flops_per_ns, bytes_touched / self.bytes_per_ns)
        steps = self.workspace_ns.get(name)
        if not steps:
            return ns
        if workspace_bytes is None:
            return max(ns + min(extra for _, extra in steps), 0.0)
        held = steps[0][1]  # below the least workspace any plan takes: the least's (none fits; the plan refused it)
        for nbytes, extra in steps:
            if nbytes > workspace_bytes:
                break
            held = extra
        return max(ns + held, 0.0)

    def op_times_ns(self, graph: Graph) -> list[float]:
        """Each of `graph`'s ops' time, its convolutions' in the workspaces the graph gives them."""
        ws = graph.workspace_bytes
        return [self.compute_ns(op.name, op.flops, op.bytes_touched, ws[k]) for k, op in enumerate(graph.ops)]


# A cost model's single numbers (the session file stores them; `pooled` takes the median of each)
RATES = ("flops_per_ns", "bytes_per_ns", "launch_ns", "prefetch_bytes_per_ns", "evict_bytes_per_ns",
         "fault_bytes_per_ns", "host_block", "call_ns")
# The swap rates (the session file stores them from schema 8 on)
SWAP_RATES = ("swap_to_device_bytes_per_ns", "swap_to_host_bytes_per_ns", "swap_call_ns")


# Uncalibrated defaults. Transfer rates are the H100 measurements in docs/design.md ("Device facts";
# PCIe Gen5 x16: prefetch 45 GB/s, eviction 7-10 GB/s, demand paging ~3.2 GB/s, prefetch calls block the
# host for about their transfer). Compute rates are a guess at what cuDNN sustains on an H100 PCIe with
# TF32 (about half its dense tensor-core peak, about 60% of its 2 TB/s HBM) until a measured session
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


def fault_rates_by_kind_text(rates: dict[str, float]) -> str:
    """Per-kind fault rates for people, fastest first: "sgd_momentum 8.7, conv2d_backward 6.4" (GB/s)."""
    return ", ".join(f"{k} {v:.1f}" for k, v in sorted(rates.items(), key=lambda kv: -kv[1]))


def pooled(models: list[CostModel], name: str) -> CostModel:
    """One cost model from several calibrations of the same run recorded in separate processes: each
    rate, op time and gap the median over them.

    On the lent H100 the same configuration's iteration moves by tens of percent from one process to
    the next (bench/results/validation.md gives the spread), and a model fitted to one recording carries that process's
    luck to every prediction; medians over recordings carry the machine's typical behaviour. A figure
    a recording lacks (an op that always faulted there, a kind that never faulted) is the median over
    those that have it. The fastest eviction rate is the fastest of theirs: the bound's, not a median."""
    if not models:
        raise ValueError("pooled needs at least one cost model")

    def median_by_key(dicts: list[dict[str, float]]) -> dict[str, float]:
        keys = dict.fromkeys(k for d in dicts for k in d)
        return {k: float(np.median([d[k] for d in dicts if k in d])) for k in keys}

    medians: dict[str, Any] = {f: float(np.median([getattr(m, f) for m in models])) for f in (*RATES, *SWAP_RATES)}
    return replace(models[0], name=name, **medians,
                   op_ns=median_by_key([m.op_ns for m in models]),
                   op_gap_ns=median_by_key([m.op_gap_ns for m in models]),
                   fault_bytes_per_ns_by_kind=median_by_key([m.fault_bytes_per_ns_by_kind for m in models]),
                   evict_fastest_bytes_per_ns=max(m.fastest_evict_bytes_per_ns for m in models))
