"""Run any plan on the GPU for N iterations and measure it: a loop over the schedule's steps.

The executor is policy-agnostic: it allocates the run's tensors (managed memory, or device memory for
`device`), places them as the plan's steady state begins, then for each iteration walks the steps of
`schedule.schedule`: an op runs its kernels on the compute stream, a copy is a cudaMemPrefetchAsync on
its copy stream, an eviction one on the compute stream; CUDA events order the streams and time every
step on one clock. Demand faults need no call: the kernels take them. Every op and memory operation is
an NVTX range, so Nsight Systems shows the same names.

The tensors share one pool placed by their lifetimes (`memory.layout`), so `device` trains in its
footprint. Under managed memory a dead tensor's pages stay on the device until a new tensor takes them
over in place, so no dead byte ever moves; with `RunSettings.discard` (CUDA 13's batch calls) they are
discarded instead wherever the device would otherwise hold more than the capacity, and a new tensor's
populated without migrating anything (`memory.dead_bytes`). The run's environment says which.

A plan through the `swap` mechanism runs in a device pool of its capacity instead (`swap.SwapArena`), each
stay of a tensor at its own offset, with pinned host memory behind it: a copy is a cudaMemcpyAsync, on its
copy stream or, synchronous, on the compute stream, and a step taking over pool bytes waits for their last
holder (`swap.SwapPool.waits`). Kept tensors (the loss; with keep_weights the weight gradients and masks)
stay in the pool to the iteration's end, which may take the pool past the capacity by their bytes; the run's
environment and `MemoryUse` say the pool's size, its fragmentation and how far it is over the capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..collectors import Collector, CuptiCollector, NvmlSampler
from ..details import memop_range_name, op_range_name
from ..graph import Graph
from ..graph.ops import OPS, op_attrs
from ..plan import Direction, Mode, Plan
from ..plan.mechanisms import managed
from ..plan.pool import KEPT_SUFFIXES, SwapPool, kept_tensors, run_pool
from ..plan.validate import validate_plan
from ..records.collected import CUPTI, PARTS
from ..records.device_memory import DeviceMemory
from ..records.spans import Timeline, resident_curve
from ..simulator import CostModel
from . import gpu
from .init import initial_value
from .memory import Arena, DeadBytes, dead_bytes
from .schedule import Ledger, Step, StepKind, Stream, room_per_op, schedule
from .swap import SwapArena

# What a recorded run can collect, each part switchable: CUPTI kernel records, CUPTI migration counters
# (bytes each way, thrashing, throttling, remote mapping), CUPTI GPU page-fault records, CUPTI memory-copy
# records, NVML samples (`vmexplorer.records.collected.PARTS` names them).
COLLECTOR_PARTS = tuple(p.name for p in PARTS)
_PAGED_UNCOUNTED: list[bool] = []  # whether this process has paged managed memory without CUPTI counting


@dataclass(frozen=True)
class RunSettings:
    iterations: int = 5
    warmup: int = 1  # iterations run first and not recorded (cuDNN plans, first touches)
    seed: int = 0
    lr: float = 0.01
    momentum: float = 0.9
    allow_tf32: bool = True  # for convolutions; matmuls (linear layers) stay full fp32 in CuPy
    deterministic: bool = False  # only cuDNN engines without atomics: identical bits run after run
    autotune: bool = False  # time every cuDNN plan once per shape and keep the fastest
    collect: bool = True  # CUPTI and NVML collectors (each reports itself unavailable rather than fail)
    collectors: tuple[str, ...] = COLLECTOR_PARTS  # which parts, when collect: see COLLECTOR_PARTS
    # Iterations run after the timed ones with CUPTI's unified-memory counters on (when "migrations" or
    # "faults" is collected). Counting slows paging itself (notes/um-counting-cost.md), so the timed
    # iterations run without it and these show what it sees.
    # 0 counts in every iteration instead, the timed ones included.
    counted: int = 1
    nvml_interval_s: float = 0.02  # NVML's PCIe counters integrate over 20 ms: sampling faster repeats them
    keep_weights: bool = False  # return persistent tensors, weight gradients and dropout masks at the end
    # Under managed memory, discard dead pages the capacity has no room for and populate new tensors' on
    # the device (CUDA 13), so the device never holds more than the capacity. Off, dead pages stay on the
    # device until a new tensor takes them over in place (none ever moves), beyond the capacity; the
    # executor's ledger holds live tensors only then. Off as the H200 showed discarding cost 2-6x the
    # iteration under uvm (bench/results/h200/bench_device_pool_paging.txt, honest_memory.txt)
    discard: bool = False


@dataclass(frozen=True)
class MemoryUse:
    """What a run held on the GPU, read after its last iteration."""

    pool_bytes: int  # the one allocation all tensors share, placed by lifetime
    footprint_bytes: int  # the graph's peak of live bytes: what the pool cannot be smaller than, but for alignment
    # CuPy's memory pool, cached: the kernels' temporaries (and, in a graph without workspace tensors, the
    # convolutions' workspaces)
    workspace_bytes: int
    device_bytes_taken: int  # cudaMemGetInfo's free bytes before the pool was allocated, less those after
    ledger_peak_bytes: int  # the most bytes the executor had on the device while an op ran
    discarded_bytes: int  # dead bytes discarded per iteration (0 with plain device memory or no discard)
    # swap only: the pool's bytes beyond the plan's most at once (placement), beyond the capacity, and the
    # pinned host memory behind the pool
    fragmentation_bytes: int = 0
    over_capacity_bytes: int = 0
    pinned_host_bytes: int = 0


@dataclass(frozen=True, eq=False)
class RunResult:
    timeline: Timeline
    losses: tuple[float, ...]
    environment: dict[str, str]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    collected: Any = None  # vmexplorer.records.collected.Collected, when settings.collect
    memory: MemoryUse | None = None
    device_memory: DeviceMemory | None = None  # what the run took of the GPU's memory, all in


def measured_session(graph: Graph, plan: Plan, result: RunResult, where: str = "",
                     notes: Sequence[str] = (), cost_model: CostModel | None = None) -> Any:
    """The session of a run: its timeline, environment and collector records; its notes say where it
    ran (the GPU, then `where`) and its losses, then `notes`, then each collector that did not run.

    It is judged by its own GPU (its cost model, and the bound under it): `cost_model` (a model calibrated
    on this GPU, which the caller vouches for), else the one the samples of this graph on this GPU were
    calibrated with, else one calibrated on the run itself (a paging run's op times then hold its stalls,
    which a note says), never another GPU's. Its bound evicts no slower than its own evictions ran: a run on
    a machine faster than any the model saw is one more recording of the GPU's fastest rate."""
    graph = plan.graph_of(graph)
    from ..session import new_session
    from ..session.samples import gpu_cost_model
    from ..simulator import calibrate
    from ..simulator.calibrate import eviction_rate

    gpu = result.environment.get("gpu", "")
    own = cost_model or (gpu_cost_model(graph, gpu) if gpu else None)
    itself: tuple[str, ...] = ()
    if own is None:
        own = calibrate(graph, plan, result.timeline, name=f"calibrated on this run ({gpu or 'its GPU'})")
        if any(m.nbytes for m in plan.memops):
            itself = (f"no cost model of {graph.model} batch {graph.batch} on {gpu or 'this GPU'}: the run is "
                      "judged by one calibrated on itself, whose op times include the waits its moves caused "
                      "(`vmexplorer calibrate --device` fits the op times of a device run on the same GPU)",)
    fastest = eviction_rate(graph, plan, result.timeline) if managed(plan) else 0.0
    if fastest > own.fastest_evict_bytes_per_ns:
        own = replace(own, evict_fastest_bytes_per_ns=fastest)
    losses = ", ".join(f"{x:.4f}" for x in result.losses)
    unavailable = [f"{st.name} collector unavailable: {st.reason}"
                   for st in getattr(result.collected, "status", ()) if not st.available]
    return new_session(graph, plan, result.timeline, own, environment=result.environment, collected=result.collected,
                       device_memory=result.device_memory,
                       notes=(f"measured on {gpu or 'a GPU'}{where}; losses {losses}",
                              *notes, *itself, *unavailable))


def execute(graph: Graph, plan: Plan, settings: RunSettings = RunSettings(),
            progress: Callable[[int, int, float], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> RunResult:
    graph = plan.graph_of(graph)
    cp = gpu.cupy()
    validate_plan(graph, plan)
    cp.get_default_memory_pool().free_all_blocks()  # what an earlier run cached is free for this one
    cp.cuda.runtime.free(0)  # makes the CUDA context, which CUPTI needs before it is configured
    gpu.make_handles()  # they count with the context (`gpu.context_bytes`), not with the run
    # CUPTI's unified-memory counters follow only managed memory allocated after they were first
    # enabled in the process (on the H100, a run that allocated first recorded no migration at all),
    # so the collectors start before the arena
    paged = managed(plan)
    counts_migrations = settings.collect and any(p.counts_um and p.name in settings.collectors for p in PARTS)
    if paged and counts_migrations and settings.counted == 0 and not _PAGED_UNCOUNTED:
        # On the H100, in a process whose first paging ran under CUPTI's unified-memory counters, they
        # reported only part of the bytes evicted, run after run; after one paging run without them,
        # every byte (notes/cupti-lost-um-records.md). So the first counted run of a process pages once
        # uncounted. Other configurations lose records even so (`collected.migration_shares` says how many).
        # A run with counted iterations pages uncounted first anyway: its warm-up and timed iterations.
        execute(graph, plan, replace(settings, iterations=1, warmup=0, collect=False, keep_weights=False))
    collectors = _start_collectors(settings.collectors, settings.nvml_interval_s) if settings.collect else []
    try:
        keep = kept_tensors(graph, settings.keep_weights)
        pool = run_pool(graph, plan, keep)
        arena: Arena | SwapArena = (SwapArena(graph, plan, pool, keep) if isinstance(pool, SwapPool) else
                                    Arena(graph, pool, managed=paged, capacity=plan.capacity))
    except BaseException:
        for c in collectors:
            c.stop()
        raise
    try:
        result = _run(cp, arena.graph, plan, arena, settings, progress, should_stop, collectors)
        if paged and not settings.collect and result.losses:
            _PAGED_UNCOUNTED.append(True)
    finally:
        del arena
        cp.get_default_memory_pool().free_all_blocks()
    return _with_kernels_loaded(result, int(cp.cuda.runtime.memGetInfo()[0]))


def _with_kernels_loaded(result: RunResult, free_after: int) -> RunResult:
    """The run's device memory with the kernels it loaded counted with the context: CUDA loads a library's
    kernels on their first launch, and they stay loaded once the run has freed all it allocated (6-10 MiB
    on the H200, bench/results/h200/probe_taken.jsonl): the process's, as its context is, not the run's."""
    m = result.device_memory
    loaded = 0 if m is None else m.free_before_bytes - max(min(free_after, m.free_before_bytes), m.least_free_bytes)
    if m is None or loaded <= 0:
        return result
    return replace(result, device_memory=replace(
        m, free_before_bytes=m.free_before_bytes - loaded,
        context_bytes=None if m.context_bytes is None else m.context_bytes + loaded))


def _run(cp: Any, graph: Graph, plan: Plan, arena: Arena | SwapArena, settings: RunSettings,
         progress: Callable[[int, int, float], None] | None, should_stop: Callable[[], bool] | None,
         collectors: list[Collector]) -> RunResult:
    _write_initial_values(graph, arena, settings.seed)
    streams = {s: cp.cuda.Stream(non_blocking=True) for s in Stream}
    environment, dead, ledger = _environment_and_ledger(graph, plan, arena, settings, streams)
    steps = schedule(graph, plan, dead, arena.pool.waits if isinstance(arena, SwapArena) else None)
    events = _Events(cp, steps)
    operands = arena.operands()
    ranges = gpu.Ranges()
    loss = graph.tensor_id("loss.value")
    cupti = _cupti(collectors)
    clock = cupti.clock if cupti is not None else None
    counted = settings.counted if cupti is not None and cupti.want_um and cupti.available else 0
    records: list[dict[str, Any]] = []
    losses: list[float] = []
    timed = settings.warmup + settings.iterations
    total = timed + counted
    least_free = int(cp.cuda.runtime.memGetInfo()[0])  # the arena is allocated, its tensors placed
    try:
        for it in range(total):
            if should_stop is not None and should_stop():
                break
            if counted and cupti is not None:
                cupti.counting(it >= timed)
            attrs = [op_attrs(graph, k, iteration=it, seed=settings.seed, lr=settings.lr,
                              momentum=settings.momentum, allow_tf32=settings.allow_tf32,
                              deterministic=settings.deterministic, autotune=settings.autotune)
                     for k in range(len(graph.ops))]
            # the streams are idle here, so the origin event fires at once: its CUPTI time is now
            t0 = clock() if clock is not None else 0
            _iteration(cp, graph, plan, arena, streams, steps, attrs, ledger, ranges, events, operands)
            for s in streams.values():
                s.synchronize()
            least_free = min(least_free, int(cp.cuda.runtime.memGetInfo()[0]))
            for c in collectors:
                c.flush()
            losses.append(float(arena.read(loss)))
            if it >= settings.warmup:  # read now: the next iteration records the same events again
                records.append({"spans": events.elapsed_ns(cp), "t0": t0, "counted": it >= timed})
            if progress is not None:
                progress(it + 1, total, losses[-1])
    finally:
        for c in collectors:
            c.stop()
    return _run_result(cp, graph, plan, arena, settings, ledger, dead, environment, records, losses, collectors,
                       least_free)


def _write_initial_values(graph: Graph, arena: Arena | SwapArena, seed: int) -> None:
    for t in range(len(graph.tensors)):
        value = initial_value(graph, t, seed)
        if value is not None:
            arena.write(t, value)


UNLIMITED_ROOM = 2**60  # every dead byte waits on the device for its next tensor


def _environment_and_ledger(graph: Graph, plan: Plan, arena: Arena | SwapArena, settings: RunSettings,
                            streams: dict[Stream, Any]) -> tuple[dict[str, str], DeadBytes | None, Ledger]:
    """The run's environment (with how dead data and the swap pool are handled), the dead bytes a managed
    arena discards, and the ledger of device bytes; outside swap the tensors are placed where the plan's
    iteration starts first, on the compute stream."""
    environment = {**gpu.environment(), "mechanism": plan.mechanism.value}
    kept = kept_tensors(graph, settings.keep_weights)
    dead = None
    held = None
    if isinstance(arena, SwapArena):
        environment["dead_data"] = "reused in the pool (under swap a dead tensor's bytes are simply taken over)"
        environment["swap_pool"] = arena.pool.describe()
        environment["swap_kept"] = "kept tensors (read by the host) stay in the pool to the iteration's end"
        ledger = Ledger(graph, arena.start_bytes(), release_dead=True, kept=kept)
    else:
        if arena.managed:
            why = gpu.discard_unavailable() if settings.discard else "RunSettings.discard is off"
            if why is None:
                dead = dead_bytes(arena.layout, len(graph.ops), room_per_op(graph, plan, kept))
            environment["dead_data"] = (f"discarded ({', '.join(gpu.DISCARD_CALLS)})" if why is None else
                                        f"left on the device until reused ({why})")
            # dead bytes left waiting on the device for their next tensor: within the room where discarded,
            # every one of them otherwise, beyond the capacity
            held = (dead if dead is not None else
                    dead_bytes(arena.layout, len(graph.ops), [UNLIMITED_ROOM] * len(graph.ops))).held
        placed = _place(graph, plan, arena, streams[Stream.COMPUTE], dead)
        # the ledger holds live tensors (a temporary from its op to its last) and, beside them, dead bytes
        ledger = Ledger(graph, [b if t.persistent else 0 for b, t in zip(placed, graph.tensors)], release_dead=True,
                        kept=kept, held=held)
    return environment, dead, ledger


def _run_result(cp: Any, graph: Graph, plan: Plan, arena: Arena | SwapArena, settings: RunSettings, ledger: Ledger,
                dead: DeadBytes | None, environment: dict[str, str], records: list[dict[str, Any]],
                losses: list[float], collectors: list[Collector], least_free: int) -> RunResult:
    """What the run measured, after its last iteration: memory use, kept weights, the timeline of the
    recorded iterations and the collectors' records."""
    memory = _memory_use(cp, graph, arena, ledger, dead)
    device_memory = DeviceMemory(
        int(cp.cuda.runtime.memGetInfo()[1]), gpu.context_bytes(), arena.free_before,
        min(least_free, int(cp.cuda.runtime.memGetInfo()[0]), arena.free_before), arena.pool_bytes,
        memory.workspace_bytes, ledger.peak, arena.managed)
    weights = {}
    if settings.keep_weights:
        weights = {t.name: arena.read(i) for i, t in enumerate(graph.tensors)
                   if t.persistent or t.name.endswith(KEPT_SUFFIXES)}
    timeline, offsets, lengths = _timeline(graph, plan, records)
    timeline = replace(timeline, counted=sum(r["counted"] for r in records))
    collected = _collected(collectors, [r["t0"] for r in records], offsets, lengths) if settings.collect else None
    return RunResult(timeline, tuple(losses[settings.warmup:]), environment, weights, collected, memory,
                     device_memory)


def _memory_use(cp: Any, graph: Graph, arena: Arena | SwapArena, ledger: Ledger, dead: DeadBytes | None) -> MemoryUse:
    use = MemoryUse(arena.pool_bytes, graph.footprint, cp.get_default_memory_pool().total_bytes(),
                    arena.device_bytes_taken(), ledger.peak, dead.discarded_bytes() if dead is not None else 0)
    if isinstance(arena, SwapArena):
        use = replace(use, fragmentation_bytes=arena.pool.fragmentation, over_capacity_bytes=arena.pool.over_capacity,
                      pinned_host_bytes=arena.host_layout.total)
    return use


def _start_collectors(parts: tuple[str, ...], nvml_interval_s: float) -> list[Collector]:
    unknown = sorted(set(parts) - set(COLLECTOR_PARTS))
    if unknown:
        raise ValueError(f"unknown collector part(s) {', '.join(unknown)}; choose from {', '.join(COLLECTOR_PARTS)}")
    # CuptiCollector's keyword arguments are its parts' names
    cupti = CuptiCollector(**{p.name: p.name in parts for p in PARTS if p.collector == CUPTI})
    nvml = NvmlSampler(cupti.clock, interval_s=nvml_interval_s)
    collectors: list[Collector] = [cupti, nvml]
    for collector in collectors:
        if any(p.collector == collector.name and p.name in parts for p in PARTS):
            collector.start()
        else:
            collector.reason = "switched off for this run (--collectors)"
    return collectors


def _cupti(collectors: list[Collector]) -> CuptiCollector | None:
    return next((c for c in collectors if isinstance(c, CuptiCollector)), None)


def _collected(collectors: list[Collector], t0s: list[int], offsets: list[float], lengths: list[float]) -> Any:
    from ..collectors.build import build_collected

    return build_collected(collectors, t0s, offsets, lengths)


def _place(graph: Graph, plan: Plan, arena: Arena, stream: Any, dead: DeadBytes | None) -> list[int]:
    """Put every tensor where the plan's iteration starts: bytes on the device in front, the rest on the
    host; with `dead`, the dead tensors' bytes discarded as in the steady state. Returns the bytes
    resident per tensor, as the executor's ledger starts."""
    start = dict(plan.resident_at_start)
    resident = []
    for t, tensor in enumerate(graph.tensors):
        # temporaries too, so the driver has touched every page once, as in every later iteration
        keep = start.get(t, 0) if tensor.persistent else tensor.nbytes
        if arena.managed:
            gpu.prefetch(arena.ptr(t), keep, True, stream)
            gpu.prefetch(arena.ptr(t) + keep, tensor.nbytes - keep, False, stream)
        resident.append(0 if dead is not None and not tensor.persistent else keep if arena.managed else tensor.nbytes)
    if dead is not None:  # no temporary is alive as an iteration begins
        gpu.discard([(arena.at(s), e - s) for s, e in dead.at_start], stream)
    stream.synchronize()
    return resident


class _Events:
    """A run's CUDA events, made once: one at each iteration's start, and each step's begin and done.

    An iteration records them all again, so their times are read once it has finished (`elapsed_ns`);
    making two events a step every iteration cost the host about as much as a small kernel's launch."""

    def __init__(self, cp: Any, steps: tuple[Step, ...]) -> None:
        self.origin = cp.cuda.Event()
        self.spans = {step.done: (cp.cuda.Event(), cp.cuda.Event()) for step in steps}

    def elapsed_ns(self, cp: Any) -> dict[tuple[str, int], tuple[float, float]]:
        """Each step's (begin, done) in ns from the iteration's start event."""
        def ns(event: Any) -> float:
            return cp.cuda.get_elapsed_time(self.origin, event) * 1e6

        return {key: (ns(begin), ns(end)) for key, (begin, end) in self.spans.items()}


def _iteration(cp: Any, graph: Graph, plan: Plan, arena: Arena | SwapArena, streams: dict[Stream, Any],
               steps: tuple[Step, ...], attrs: list[dict], ledger: Ledger, ranges: gpu.Ranges, events: _Events,
               operands: list[tuple[list[Any], list[Any]]]) -> None:
    """Enqueue one iteration, recording its start and each step's begin and done on `events`."""
    compute = streams[Stream.COMPUTE]
    events.origin.record(compute)
    done: dict[tuple[str, int], Any] = {}
    with compute:  # the ops' kernels go to the compute stream without a switch each
        for step in steps:
            stream = streams[step.stream]
            for event in step.waits:
                stream.wait_event(done[event])
            begin, end = events.spans[step.done]
            begin.record(stream)
            _issue(cp, graph, plan, arena, stream, step, attrs, ledger, ranges, operands)
            end.record(stream)
            done[step.done] = end


def _issue(cp: Any, graph: Graph, plan: Plan, arena: Arena | SwapArena, stream: Any, step: Step, attrs: list[dict],
           ledger: Ledger, ranges: gpu.Ranges, operands: list[tuple[list[Any], list[Any]]]) -> None:
    """Enqueue one step on its stream and keep the ledger."""
    if step.kind is StepKind.OP:
        op = graph.ops[step.index]
        ranges.push(op_range_name(op))
        reads, writes = operands[step.index]
        if step.stream is Stream.COMPUTE:
            OPS[op.kind](cp, reads, writes, attrs[step.index])
        else:
            with stream:
                OPS[op.kind](cp, reads, writes, attrs[step.index])
        ranges.pop()
        ledger.apply(step, plan)
    elif step.kind in (StepKind.DISCARD, StepKind.POPULATE):
        assert isinstance(arena, Arena)
        ranges.push(f"{step.kind.value} {op_range_name(graph.ops[step.index]) if step.index >= 0 else 'kept'}")
        pieces = [(arena.at(s), e - s) for s, e in step.ranges]
        (gpu.discard if step.kind is StepKind.DISCARD else gpu.populate)(pieces, stream)
        ranges.pop()
        ledger.apply(step, plan)
    elif step.kind is not StepKind.FAULT:  # faults need no call: the op's kernels take them
        m = plan.memops[step.index]
        ranges.push(memop_range_name(graph, m))
        offset, size = ledger.apply(step, plan)
        if isinstance(arena, SwapArena):
            arena.copy(step.index, stream)
        else:
            gpu.prefetch(arena.ptr(m.tensor) + offset, size, m.direction is Direction.TO_DEVICE, stream)
        ranges.pop()


def _timeline(graph: Graph, plan: Plan, records: list[dict]) -> tuple[Timeline, list[float], list[float]]:
    """The measured timeline, and each iteration's offset and length on its axis."""
    n, m = len(graph.ops), len(plan.memops)
    faults = np.zeros(n, dtype=np.int64)
    for memop in plan.memops:
        if memop.mode is Mode.FAULT:
            faults[memop.complete_before] += memop.nbytes
    cols: dict[str, list] = {k: [] for k in ("oi", "ox", "os", "oe", "ost", "of", "mi", "mx", "ms", "me", "rt", "rb")}
    offset, offsets, lengths = 0.0, [], []
    for it, rec in enumerate(records):
        offsets.append(offset)
        spans = rec["spans"]
        op_start = np.array([spans[("op", k)][0] for k in range(n)])
        op_end = np.array([spans[("op", k)][1] for k in range(n)])
        mem_start, mem_end = np.zeros(m), np.zeros(m)
        for i, memop in enumerate(plan.memops):
            if memop.mode is Mode.FAULT:  # taken inside the op's kernels
                mem_start[i], mem_end[i] = op_start[memop.complete_before], op_end[memop.complete_before]
            else:
                mem_start[i], mem_end[i] = spans[("memop", i)]
        stall = op_start - np.concatenate([[0.0], op_end[:-1]])
        rt, rb = resident_curve(graph, plan, op_start, op_end, mem_start, mem_end)
        for key, values in (("oi", np.full(n, it)), ("ox", np.arange(n)), ("os", op_start + offset),
                            ("oe", op_end + offset), ("ost", np.maximum(stall, 0)), ("of", faults),
                            ("mi", np.full(m, it)), ("mx", np.arange(m)), ("ms", mem_start + offset),
                            ("me", mem_end + offset), ("rt", rt + offset), ("rb", rb)):
            cols[key].append(values)
        lengths.append(max(op_end.max(), mem_end.max() if m else 0.0))
        offset += lengths[-1]
    cat = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    i64 = lambda a: np.rint(a).astype(np.int64)  # noqa: E731
    return Timeline("measured", i64(cat["oi"]), i64(cat["ox"]), i64(cat["os"]), i64(cat["oe"]), i64(cat["ost"]),
                    i64(cat["of"]), i64(cat["mi"]), i64(cat["mx"]), i64(cat["ms"]), i64(cat["me"]),
                    i64(cat["rt"]), i64(cat["rb"])), offsets, lengths
