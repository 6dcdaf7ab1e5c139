"""The session file's tables, both ways: objects to columns, and columns back to checked objects.

`vmexplorer.session.files` is the interface; this module is the schema of docs/session-format.md. A table
is {"rows": N, "columns": {name: [N values]}}, and lists of varying length (an op's reads, a tensor's
shape) are CSR pairs {"offsets": [N + 1], "values": [...]} under "ragged". The reader checks every
value as it turns it back into objects, so a bad file fails at the first wrong value with its place,
and it checks that what loads makes sense: the graph is the configured model's, the plan is valid
for it, times and sizes lie in ranges whose sums cannot overflow (every column's values add up to
less than 2**62), so whatever loads can be summarised, compared, drawn and exported. The checks of
objects, values and tables are reader.py's; what each place of the file must hold is this module's, and
plan_format.py's for the configuration and the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any

import numpy as np

from ..graph import PERSISTENT, Graph, GraphError, Kind, Op, Phase, Tensor, build_graph
from ..graph.recompute import recomputed
from ..plan import Plan
from ..records.collected import (
    MEMCPY_KINDS,
    UM_KINDS,
    Collected,
    CollectedError,
    CollectorStatus,
    UmKind,
    check_against,
)
from ..records.device_memory import DeviceMemory
from ..records.spans import MAX_NS, Timeline
from ..simulator.bound import SET_BY, Bound
from ..simulator.costmodel import RATES, SWAP_RATES, CostModel
from ..units import MAX_BYTES, quoted
from .definition_format import definition_graph_error, encode_definition, read_definition
from .plan_format import encode_plan, foreign_policy, read_config, read_plan, read_recomputes, room_of
from .reader import BOOL, INT, MAX_ROWS, NUM, STR, Reader, key_text, write_table
from .session import Session

# A cost model's numbers: rates in bytes (or flops) per ns from 1 MB/s to 1 EB/s, fixed costs up to a
# second, op times up to 1000 s. Anything outside is a typo or a hostile file, and would make the
# simulator's times overflow.
RATE_RANGE = (1e-3, 1e9)
FIXED_NS_MAX = 1e9
MAX_ITERATIONS = 1_000  # recorded in one session: a run times a handful, a simulation one
OP_NS_MAX = 1e12
MAX_WORKSPACE_STEPS = 256  # a convolution's timed plans number a few dozen, and steps are fewer
SOURCES = ("simulated", "measured")
_COST_FIELDS = tuple(f for f in RATES if f != "call_ns")  # the cost model's numbers up to schema 2
TOP_LEVEL_V1 = ("format", "schema_version", "created", "environment", "notes", "config", "graph", "plan",
                "timeline", "cost_model")
TOP_LEVEL_V2 = (*TOP_LEVEL_V1, "collected")  # schema 2 added the collectors' records
TOP_LEVEL_V7 = (*TOP_LEVEL_V2, "bound")  # schema 7 the bound
TOP_LEVEL = (*TOP_LEVEL_V7, "device_memory")  # schema 10 what a measured run took of the GPU's memory
DEVICE_MEMORY_FIELDS = tuple(f.name for f in dataclass_fields(DeviceMemory))  # sizes in bytes, then `managed`
BOUND_FIELDS = ("min_bytes_to_host", "min_bytes_to_device", "lower_bound_ns", "set_by")


# --- writing --------------------------------------------------------------------------------------

def encode(s: Session) -> dict[str, Any]:
    g, p, tl = s.graph, s.plan, s.timeline
    return {
        "created": s.created,
        "environment": dict(s.environment),
        "notes": list(s.notes),
        "config": p.config.as_json(),
        "graph": {"tensors": _tensors(g), "ops": _ops(g), "definition": encode_definition(g.definition)},
        "plan": encode_plan(p),
        "timeline": {
            "source": tl.source,
            "ops": write_table({"iteration": tl.op_iteration.tolist(), "op": tl.op_index.tolist(),
                                "start_ns": tl.op_start_ns.tolist(), "end_ns": tl.op_end_ns.tolist(),
                                "stall_ns": tl.op_stall_ns.tolist(), "fault_bytes": tl.op_fault_bytes.tolist()}),
            "memops": write_table({"iteration": tl.memop_iteration.tolist(), "memop": tl.memop_index.tolist(),
                                   "start_ns": tl.memop_start_ns.tolist(), "end_ns": tl.memop_end_ns.tolist()}),
            "resident": write_table({"t_ns": tl.resident_t_ns.tolist(), "bytes": tl.resident_bytes.tolist()}),
            "counted_iterations": int(tl.counted),
        },
        "cost_model": None if s.cost_model is None else _cost_model(s.cost_model),
        "collected": None if s.collected is None else _collected(s.collected),
        "bound": None if s.bound is None else s.bound.as_json(),
        "device_memory": None if s.device_memory is None else s.device_memory.as_json(),
    }


def _tensors(g: Graph) -> dict[str, Any]:
    ts = g.tensors
    return write_table({"name": [t.name for t in ts], "kind": [t.kind.value for t in ts],
                        "dtype": [t.dtype for t in ts], "nbytes": [t.nbytes for t in ts],
                        "producer_op": [t.producer for t in ts]},
                       {"shape": [t.shape for t in ts], "consumer_ops": [t.consumers for t in ts]})


def _ops(g: Graph) -> dict[str, Any]:
    ops = g.ops
    return write_table({"name": [o.name for o in ops], "kind": [o.kind for o in ops],
                        "phase": [o.phase.value for o in ops], "layer": [o.layer for o in ops],
                        "flops": [o.flops for o in ops], "bytes_touched": [o.bytes_touched for o in ops]},
                       {"read_tensors": [o.reads for o in ops], "write_tensors": [o.writes for o in ops]})


def _cost_model(c: CostModel) -> dict[str, Any]:
    # float(): calibration computes with numpy, and the file holds plain JSON numbers
    return {"name": c.name, **{f: float(getattr(c, f)) for f in (*RATES, *SWAP_RATES)},
            "serialises_directions": bool(c.serialises_directions),
            **{table: {k: float(v) for k, v in getattr(c, table).items()}
               for table in ("op_ns", "op_gap_ns", "fault_bytes_per_ns_by_kind")},
            "workspace_ns": {k: [[int(b), float(ns)] for b, ns in steps] for k, steps in c.workspace_ns.items()},
            "evict_fastest_bytes_per_ns": float(c.evict_fastest_bytes_per_ns)}


def _collected(c: Collected) -> dict[str, Any]:
    kinds = np.array(UM_KINDS, dtype=object)
    st = c.status
    return {
        "kernel_names": write_table({"name": list(c.kernel_names)}),
        "kernels": write_table({"iteration": c.kernel_iteration.tolist(), "start_ns": c.kernel_start_ns.tolist(),
                                "end_ns": c.kernel_end_ns.tolist(), "stream": c.kernel_stream.tolist(),
                                "name": c.kernel_name.tolist()}),
        "um": write_table({"iteration": c.um_iteration.tolist(), "start_ns": c.um_start_ns.tolist(),
                           "end_ns": c.um_end_ns.tolist(), "kind": kinds[c.um_kind].tolist(),
                           "value": c.um_value.tolist(), "records": c.um_records.tolist()}),
        "memcpy": write_table({"iteration": c.memcpy_iteration.tolist(), "start_ns": c.memcpy_start_ns.tolist(),
                               "end_ns": c.memcpy_end_ns.tolist(), "stream": c.memcpy_stream.tolist(),
                               "kind": np.array(MEMCPY_KINDS, dtype=object)[c.memcpy_kind].tolist(),
                               "bytes": c.memcpy_bytes.tolist()}),
        "nvml": write_table({"t_ns": c.nvml_t_ns.tolist(), "memory_used_bytes": c.nvml_memory_used_bytes.tolist(),
                             "pcie_tx_bytes_per_s": c.nvml_pcie_tx_bytes_per_s.tolist(),
                             "pcie_rx_bytes_per_s": c.nvml_pcie_rx_bytes_per_s.tolist(),
                             "gpu_util_pct": c.nvml_gpu_util_pct.tolist()}),
        "status": write_table({"name": [s.name for s in st], "available": [s.available for s in st],
                               "reason": [s.reason for s in st], "dropped_records": [s.dropped_records for s in st],
                               "overhead_ns": [s.overhead_ns for s in st]}),
    }


# --- reading --------------------------------------------------------------------------------------

def decode(doc: dict[str, Any], r: Reader, version: int) -> dict[str, Any]:
    """The Session's fields from a parsed document whose format and version are already known
    (schema 1 has no "collected" field: it loads with none; schema 6 and older no "bound": none)."""
    r.fields(doc, "the file", TOP_LEVEL if version >= 10 else TOP_LEVEL_V7 if version >= 7 else
             TOP_LEVEL_V2 if version >= 2 else TOP_LEVEL_V1)
    created = r.scalar(doc["created"], "created", STR)
    if not _is_iso_time(created):
        r.fail(f"created is {quoted(created)}, not an ISO-8601 date and time")
    env = r.fields(doc["environment"], "environment", None)
    for key, value in env.items():
        r.scalar(value, f"environment.{key_text(key)}", STR)
    notes = r.column(doc["notes"], "notes", STR, None)
    stored = r.fields(doc["graph"], "graph", ("tensors", "ops") + (("definition",) if version >= 15 else ()))
    definition = read_definition(r, stored.get("definition"))  # (schema 15) a model not built in: its layers
    foreign = foreign_policy(doc["config"])  # read as manual: the note says which policy made it
    config = read_config(r, doc["config"], version, definition)
    try:
        model = build_graph(*config.key, workspaces=config.workspaces, definition=definition)
    except GraphError as e:
        r.fail(f"config: {e}" if definition is None else definition_graph_error(e))
    plain = model.fitted(room_of(doc["plan"]) or config.capacity)
    recomputes = read_recomputes(r, doc["plan"], plain, version)
    expected = recomputed(plain, recomputes)  # what the plan runs, and what the file holds (Plan.graph_of)
    _same_graph(r, _graph(r, stored, *config.key), expected)
    graph = expected  # equal, and it carries what the engine needs beyond the file (op attributes)
    plan = read_plan(r, doc["plan"], graph, config, recomputes, version)
    timeline = _timeline(r, doc["timeline"], graph, plan, version)
    cost = None if doc["cost_model"] is None else _read_cost_model(r, doc["cost_model"], version)
    raw = doc.get("collected")
    collected = None if raw is None else _read_collected(r, raw, timeline, version)
    bound = None if doc.get("bound") is None else _read_bound(r, doc["bound"])
    if doc.get("device_memory") is not None and timeline.source != "measured":
        r.fail("device_memory is what a measured run took; this session is simulated")
    memory = None if doc.get("device_memory") is None else _read_device_memory(r, doc["device_memory"])
    return dict(graph=graph, plan=plan, timeline=timeline, cost_model=cost, environment=dict(env),
                notes=tuple(notes) + ((foreign,) if foreign else ()), created=created, collected=collected,
                bound=bound, device_memory=memory)


def _read_device_memory(r: Reader, value: Any) -> DeviceMemory:
    d = r.fields(value, "device_memory", DEVICE_MEMORY_FIELDS)
    sizes: dict[str, Any] = {}
    for k in DEVICE_MEMORY_FIELDS[:-1]:  # all but `managed`
        if k == "context_bytes" and d[k] is None:
            sizes[k] = None
            continue
        sizes[k] = r.scalar(d[k], f"device_memory.{k}", INT, 0)
        if sizes[k] > MAX_BYTES:
            r.fail(f"device_memory.{k} is {sizes[k]}, more than the {MAX_BYTES} bytes (1 PiB) any GPU holds")
    if not sizes["least_free_bytes"] <= sizes["free_before_bytes"] <= sizes["total_bytes"]:
        r.fail("device_memory: the least free bytes, the free bytes before the run and the GPU's total should "
               f"rise in that order, not {sizes['least_free_bytes']}, {sizes['free_before_bytes']}, "
               f"{sizes['total_bytes']}")
    return DeviceMemory(**sizes, managed=r.scalar(d["managed"], "device_memory.managed", BOOL))


def _same_graph(r: Reader, graph: Graph, expected: Graph) -> None:
    """The file's graph must be the one vmexplorer builds for its configuration, with the plan's
    recomputations as ops (`Plan.graph_of`): a plan, a timeline and a cost model are only meaningful on
    that graph, and no name in it is anyone's free text."""
    steps = len((expected.full or expected).recomputes)
    what = f"{expected.model} batch {expected.batch} at {expected.image_size}px" + (
        f" with the plan's {steps} recomputation{'s' if steps > 1 else ''}" if steps else "")
    tables: tuple[tuple[str, Sequence[Tensor | Op], Sequence[Tensor | Op]], ...] = (
        ("graph.tensors", graph.tensors, expected.tensors), ("graph.ops", graph.ops, expected.ops))
    for table, got, want in tables:
        if len(got) != len(want):
            r.fail(f"{table} has {len(got)} rows, but {what} has {len(want)}")
        for i, (a, b) in enumerate(zip(got, want)):
            if a != b:
                name = next(f.name for f in dataclass_fields(a)
                            if f.compare and getattr(a, f.name) != getattr(b, f.name))
                r.fail(f"{table} row {i}, {name}: {quoted(getattr(a, name))} is not {what}'s "
                       f"{quoted(getattr(b, name))}")


def _graph(r: Reader, d: dict[str, Any], model: str, batch: int, size: int) -> Graph:
    t = r.table(d["tensors"], "graph.tensors",
                {"name": STR, "kind": Kind, "dtype": STR, "nbytes": INT, "producer_op": INT},
                {"shape": INT, "consumer_ops": INT})
    o = r.table(d["ops"], "graph.ops",
                {"name": STR, "kind": STR, "phase": Phase, "layer": STR, "flops": INT, "bytes_touched": INT},
                {"read_tensors": INT, "write_tensors": INT})
    n_t, n_o = t["rows"], o["rows"]
    if not n_o:
        r.fail("graph.ops has no rows; a training iteration has ops")
    r.within(t, "nbytes", 0, None, "a size in bytes")
    r.within(t, "shape", 0, None, "a dimension")
    r.within(t, "producer_op", PERSISTENT, n_o, "an op id (or -1 for a persistent tensor)")
    r.within(t, "consumer_ops", 0, n_o, "an op id")
    r.within(o, "flops", 0, None, "a count")
    r.within(o, "bytes_touched", 0, None, "a size in bytes")
    r.within(o, "read_tensors", 0, n_t, "a tensor id")
    r.within(o, "write_tensors", 0, n_t, "a tensor id")
    tensors = tuple(Tensor(*row) for row in zip(
        t["name"], (Kind(k) for k in t["kind"]), r.split(t, "shape"), t["dtype"], t["nbytes"].tolist(),
        t["producer_op"].tolist(), r.split(t, "consumer_ops")))
    ops = tuple(Op(name, kind, Phase(phase), layer, reads, writes, flops, touched) for
                name, kind, phase, layer, reads, writes, flops, touched in zip(
                    o["name"], o["kind"], o["phase"], o["layer"], r.split(o, "read_tensors"),
                    r.split(o, "write_tensors"), o["flops"].tolist(), o["bytes_touched"].tolist()))
    return Graph(model, batch, size, tensors, ops)


def _timeline(r: Reader, value: Any, graph: Graph, plan: Plan, version: int) -> Timeline:
    """(schema 5 added `counted_iterations`; an older timeline has none: every iteration is timed.)"""
    d = r.fields(value, "timeline", ("source", "ops", "memops", "resident")
                 + (("counted_iterations",) if version >= 5 else ()))
    source = r.scalar(d["source"], "timeline.source", STR)
    if source not in SOURCES:
        r.fail(f"timeline.source is {quoted(source)}, expected one of {', '.join(SOURCES)}")
    o = r.table(d["ops"], "timeline.ops", {"iteration": INT, "op": INT, "start_ns": NUM, "end_ns": NUM,
                                           "stall_ns": NUM, "fault_bytes": INT})
    m = r.table(d["memops"], "timeline.memops", {"iteration": INT, "memop": INT, "start_ns": NUM,
                                                 "end_ns": NUM})
    res = r.table(d["resident"], "timeline.resident", {"t_ns": NUM, "bytes": INT})
    for table in (o, m):
        r.within(table, "iteration", 0, MAX_ROWS, "an iteration number")
        r.spans(table)
    r.times(res, "t_ns")
    r.times(o, "stall_ns")
    # every recorded iteration has op rows, numbered from 0 without gaps: summaries take each one's span
    iterations = np.unique(o["iteration"])
    if not iterations.size:
        r.fail("timeline.ops has no rows; a session records at least one iteration")
    if iterations[-1] != iterations.size - 1:
        missing = int(np.flatnonzero(iterations != np.arange(iterations.size))[0])
        r.fail(f"timeline.ops has no row for iteration {missing} (iterations are numbered from 0, no gaps)")
    r.within(m, "iteration", 0, int(iterations.size), "an iteration with ops")
    r.within(o, "op", 0, len(graph.ops), "an op id")
    r.within(o, "fault_bytes", 0, MAX_BYTES + 1, "a size in bytes")
    r.within(m, "memop", 0, len(plan.memops), "an index into plan.memops")
    r.within(res, "bytes", 0, MAX_BYTES + 1, "a size in bytes")
    _one_run_each(r, o, m, iterations.size, len(graph.ops), len(plan.memops))
    counted = r.scalar(d["counted_iterations"], "timeline.counted_iterations", INT, 0) if version >= 5 else 0
    if counted >= iterations.size:
        r.fail(f"timeline.counted_iterations is {counted}, but the timeline records {iterations.size} iteration(s); "
               "at least one must be timed")
    if counted and source != "measured":
        r.fail("timeline.counted_iterations is not 0, but only a measured timeline has counted iterations")
    return Timeline(source, o["iteration"], o["op"], o["start_ns"], o["end_ns"], o["stall_ns"],
                    o["fault_bytes"], m["iteration"], m["memop"], m["start_ns"], m["end_ns"],
                    res["t_ns"], res["bytes"], counted)


def _one_run_each(r: Reader, ops: dict[str, Any], memops: dict[str, Any], iterations: int, n_ops: int,
                  n_memops: int) -> None:
    """What a timeline's size may cost to open is bounded by its iterations: each runs every op once, and
    each memory operation at most once, and a session holds at most `MAX_ITERATIONS` of them."""
    if iterations > MAX_ITERATIONS:
        r.fail(f"timeline records {iterations} iterations; a session holds at most {MAX_ITERATIONS}")
    runs = ops["iteration"].astype(np.int64) * n_ops + ops["op"]
    if len(runs) != iterations * n_ops or np.unique(runs).size != len(runs):
        r.fail(f"timeline.ops: each iteration must run each of the graph's {n_ops} ops exactly once "
               f"({len(runs)} rows for {iterations} iteration(s))")
    issued = memops["iteration"].astype(np.int64) * max(n_memops, 1) + memops["memop"]
    if np.unique(issued).size != len(issued):
        r.fail("timeline.memops: a memory operation of the plan runs at most once in an iteration; "
               f"{len(issued) - np.unique(issued).size} row(s) repeat one")


def _read_cost_model(r: Reader, value: Any, version: int) -> CostModel:
    """(Each schema's additions, missing from an older file: 3 `call_ns` (0) and `op_gap_ns` (none); 6
    `fault_bytes_per_ns_by_kind` (none: one rate); 7 `serialises_directions` (true: the driver's); 8 the swap
    rates (the defaults); 12 `workspace_ns` (none); 13 `evict_fastest_bytes_per_ns` (0: the fitted rate).)"""
    newer = (("call_ns", "op_gap_ns") if version >= 3 else ()) + (
        ("fault_bytes_per_ns_by_kind",) if version >= 6 else ()) + (
        ("serialises_directions",) if version >= 7 else ()) + (SWAP_RATES if version >= 8 else ()) + (
        ("workspace_ns",) if version >= 12 else ()) + (("evict_fastest_bytes_per_ns",) if version >= 13 else ())
    d = r.fields(value, "cost_model", ("name", *_COST_FIELDS, "op_ns", *newer))

    def number(v: Any, where: str, lo: float, hi: float, what: str) -> float:
        x = float(r.scalar(v, where, NUM))
        if not lo <= x <= hi:
            r.fail(f"{where} is {x:g}: expected {what}")
        return x

    rate = (*RATE_RANGE, f"a rate from {RATE_RANGE[0]:g} to {RATE_RANGE[1]:g} per ns")
    fixed = (0.0, FIXED_NS_MAX, f"a time from 0 to {FIXED_NS_MAX:g} ns")
    limits = {"host_block": (0.0, 1.0, "a share from 0 to 1"),
              **dict.fromkeys(("launch_ns", "call_ns", "swap_call_ns"), fixed),
              "evict_fastest_bytes_per_ns": (0.0, RATE_RANGE[1], f"0 or a rate up to {RATE_RANGE[1]:g} per ns")}
    names = (*_COST_FIELDS, *(f for f in newer if f in (*RATES, *SWAP_RATES, "evict_fastest_bytes_per_ns")))
    rates = {f: number(d[f], f"cost_model.{f}", *limits.get(f, rate)) for f in names}
    op_time = (0.0, OP_NS_MAX, f"a time from 0 to {OP_NS_MAX:g} ns")
    by_op = {}
    for table in ("op_ns", "op_gap_ns"):
        values = r.fields(d.get(table, {}), f"cost_model.{table}", None)
        by_op[table] = {k: number(v, f"cost_model.{table}.{key_text(k)}", *op_time) for k, v in values.items()}
    kinds = r.fields(d.get("fault_bytes_per_ns_by_kind", {}), "cost_model.fault_bytes_per_ns_by_kind", None)
    by_kind = {k: number(v, f"cost_model.fault_bytes_per_ns_by_kind.{key_text(k)}", *rate) for k, v in kinds.items()}
    serialised = r.scalar(d.get("serialises_directions", True), "cost_model.serialises_directions", BOOL)
    return CostModel(r.scalar(d["name"], "cost_model.name", STR), **rates, op_ns=by_op["op_ns"],
                     op_gap_ns=by_op["op_gap_ns"], fault_bytes_per_ns_by_kind=by_kind,
                     serialises_directions=serialised, workspace_ns=_read_workspace_ns(r, d.get("workspace_ns", {})))


def _read_workspace_ns(r: Reader, value: Any) -> dict[str, tuple[tuple[int, float], ...]]:
    """(schema 12) Each op's steps: [workspace bytes, ns beyond its time] pairs, bytes rising."""
    out: dict[str, tuple[tuple[int, float], ...]] = {}
    for name, steps in r.fields(value, "cost_model.workspace_ns", None).items():
        where, pairs = f"cost_model.workspace_ns.{key_text(name)}", list[tuple[int, float]]()
        if not isinstance(steps, list) or not 0 < len(steps) <= MAX_WORKSPACE_STEPS:
            r.fail(f"{where} should be a list of 1 to {MAX_WORKSPACE_STEPS} [bytes, ns] pairs")
        for step in steps:
            if not isinstance(step, list) or len(step) != 2:
                r.fail(f"{where} should hold [bytes, ns] pairs, not {quoted(str(step)[:40])}")
            nbytes, ns = r.scalar(step[0], f"{where} bytes", INT, 0), float(r.scalar(step[1], f"{where} ns", NUM))
            if nbytes > MAX_BYTES or not -OP_NS_MAX <= ns <= OP_NS_MAX or pairs and nbytes <= pairs[-1][0]:
                r.fail(f"{where} has [{nbytes}, {ns:g}]: expected bytes rising from step to step, up to "
                       f"{MAX_BYTES}, and a time within {OP_NS_MAX:g} ns either way")
            pairs.append((nbytes, ns))
        out[name] = tuple(pairs)
    return out


def _read_bound(r: Reader, value: Any) -> Bound:
    """A record of what was worked out when the session was made (under the cost model then in use,
    by the vmexplorer then), so it is checked for range, not recomputed: sizes and a time a session can
    hold, and a reason this vmexplorer names."""
    d = r.fields(value, "bound", BOUND_FIELDS)
    sizes = [r.scalar(d[k], f"bound.{k}", INT, 0) for k in BOUND_FIELDS[:2]]
    for k, nbytes in zip(BOUND_FIELDS[:2], sizes):
        if nbytes > MAX_BYTES:
            r.fail(f"bound.{k} is {nbytes}, more than the {MAX_BYTES} bytes (1 PiB) any size may be")
    ns = r.scalar(d["lower_bound_ns"], "bound.lower_bound_ns", INT, 0)
    if ns > MAX_NS:
        r.fail(f"bound.lower_bound_ns is {ns}: expected a time from 0 to {MAX_NS} ns (104 days)")
    set_by = r.scalar(d["set_by"], "bound.set_by", STR)
    if set_by not in SET_BY:
        r.fail(f"bound.set_by is {quoted(set_by)}, expected one of {', '.join(quoted(x) for x in SET_BY)}")
    return Bound(sizes[0], sizes[1], ns, set_by)


def _read_collected(r: Reader, value: Any, timeline: Timeline, version: int) -> Collected:
    """The collectors' records (schema 4 added `memcpy`; an older file has none, and its status says
    so), checked value by value and then against the timeline they were recorded with."""
    tables = ("kernel_names", "kernels", "um", "nvml", "status") + (("memcpy",) if version >= 4 else ())
    d = r.fields(value, "collected", tables)
    names = r.table(d["kernel_names"], "collected.kernel_names", {"name": STR})
    k = r.table(d["kernels"], "collected.kernels", {"iteration": INT, "start_ns": NUM, "end_ns": NUM,
                                                    "stream": INT, "name": INT})
    u = r.table(d["um"], "collected.um", {"iteration": INT, "start_ns": NUM, "end_ns": NUM, "kind": UmKind,
                                          "value": INT, "records": INT})
    v = r.table(d["nvml"], "collected.nvml", {"t_ns": NUM, "memory_used_bytes": INT, "pcie_tx_bytes_per_s": NUM,
                                              "pcie_rx_bytes_per_s": NUM, "gpu_util_pct": NUM})
    m = r.table(d["memcpy"], "collected.memcpy", {"iteration": INT, "start_ns": NUM, "end_ns": NUM, "stream": INT,
                                                  "kind": STR, "bytes": INT}) if version >= 4 else None
    st = r.table(d["status"], "collected.status", {"name": STR, "available": BOOL, "reason": STR,
                                                   "dropped_records": INT, "overhead_ns": INT})
    if timeline.source != "measured":
        r.fail(f"collected holds collector records, but the timeline is {timeline.source}, not measured")
    _check_records(r, k, u, m, names["rows"], timeline.iterations)
    _check_nvml(r, v)
    status = _collector_status(r, st, copies_recorded=m is not None)
    index = {kind: i for i, kind in enumerate(UM_KINDS)}
    copies: dict[str, Any] = {}
    if m is not None:
        copies = {f"memcpy_{key}": m[key] for key in ("iteration", "start_ns", "end_ns", "stream", "bytes")}
        copies["memcpy_kind"] = np.array([MEMCPY_KINDS.index(x) for x in m["kind"]], dtype=np.int64)
    try:
        collected = Collected(
            k["iteration"], k["start_ns"], k["end_ns"], k["stream"], k["name"], tuple(names["name"]),
            u["iteration"], u["start_ns"], u["end_ns"], np.array([index[x] for x in u["kind"]], dtype=np.int64),
            u["value"], v["t_ns"], v["memory_used_bytes"], v["pcie_tx_bytes_per_s"], v["pcie_rx_bytes_per_s"],
            v["gpu_util_pct"],
            tuple(status), u["records"], **copies)
        check_against(collected, timeline)
    except CollectedError as e:  # everything above should have caught it first; one message all the same
        r.fail(f"collected: {e}")
    return collected


def _check_records(r: Reader, k: dict[str, Any], u: dict[str, Any], m: dict[str, Any] | None,
                   kernel_names: int, iterations: int) -> None:
    """Kernels, unified-memory records and copies (when the file has them): spans within recorded
    iterations, ids that index what they name, sizes and kinds in range."""
    for table in (k, u) if m is None else (k, u, m):
        r.within(table, "iteration", 0, iterations, "an iteration with ops")
        r.spans(table)
    r.within(k, "stream", 0, None, "a stream id")
    r.within(k, "name", 0, kernel_names, "an index into collected.kernel_names")
    r.within(u, "value", 0, MAX_BYTES + 1, "a count or a size in bytes")
    r.within(u, "records", 1, None, "a number of records")
    if m is not None:
        r.within(m, "stream", 0, None, "a stream id")
        r.within(m, "bytes", 0, MAX_BYTES + 1, "a size in bytes")
        odd = [i for i, kind in enumerate(m["kind"]) if kind not in MEMCPY_KINDS]
        if odd:
            r.fail(f"collected.memcpy row {odd[0]}, kind: {quoted(m['kind'][odd[0]])} is not one of "
                   f"{', '.join(MEMCPY_KINDS)}")


def _check_nvml(r: Reader, v: dict[str, Any]) -> None:
    r.times(v, "t_ns")
    for name in ("memory_used_bytes", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"):
        r.within(v, name, 0, MAX_BYTES + 1, "a size or a rate in bytes")
    r.within(v, "gpu_util_pct", 0, 101, "a percentage")
    over = np.flatnonzero(v["gpu_util_pct"] > 100)
    if over.size:
        r.fail(f"collected.nvml row {over[0]}, gpu_util_pct: {v['gpu_util_pct'][over[0]]} is more than 100%")


def _collector_status(r: Reader, st: dict[str, Any], copies_recorded: bool) -> list[CollectorStatus]:
    """Each collector once, by name, with a reason where it was unavailable; a file from before
    copies were collected says so for their collector."""
    r.within(st, "dropped_records", 0, None, "a count")
    r.within(st, "overhead_ns", 0, None, "a duration")
    seen: set[str] = set()
    for i, (name, available, reason) in enumerate(zip(st["name"], st["available"], st["reason"])):
        if not name or name in seen:
            r.fail(f"collected.status row {i}: the collector's name {quoted(name)} is "
                   f"{'empty' if not name else 'there twice'}")
        seen.add(name)
        if not available and not reason.strip():
            r.fail(f"collected.status row {i}: collector {quoted(name)} is unavailable but gives no reason")
    status = [CollectorStatus(*row) for row in zip(st["name"], st["available"], st["reason"],
                                                   st["dropped_records"].tolist(), st["overhead_ns"].tolist())]
    if not copies_recorded and not any(s.name == "cupti_memcpy" for s in status):
        # its zero copies must not read as "none made"
        status.append(CollectorStatus("cupti_memcpy", False, "not collected: recorded before vmexplorer collected "
                                      "memory copies (schema 3 or older)",
                                      0, 0))
    return status


def _is_iso_time(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True
