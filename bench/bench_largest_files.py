"""Time and peak memory of `info`, `compare F F`, `export --html` and `export --chrome-trace` on the
largest sessions the loader accepts (issue 32's goal: each within 10 s and 1 GB on the 2-core machine).

What a file can cost is bounded by the loader's caps (vmexplorer.session.files, format.py): at most
4,000,000 JSON values in 48 MiB of JSON, at most 1,000 iterations, each running every op once and each
memory operation at most once, at most 20,000 memory operations in the plan. Within them, each shape
below is grown until one step more is refused:
- the largest graph (ResNet-152, batch 64) at its least capacity under `uvm`, whose plan moves the most
  (some 6,300 memory operations an iteration: the driver's demand faults and evictions), simulated, its
  iteration repeated until the values run out (91 times);
- the same measured, with the collectors' records a run keeps of each iteration (two kernels an op, a
  migration record per memory operation, page-fault records, an NVML sample a ms);
- one measured iteration of it with as many records in one collector table (unified memory, kernels,
  NVML samples or memory copies) as the values allow: the loader bounds those only by the values;
- a plan no policy makes, of the most memory operations a plan may hold (ResNet-152's persistent tensors
  sent to the host and back between every two ops), its iteration repeated until the values run out;
- the smallest graph (AlexNet) under `uvm` at its least capacity, 1,000 iterations (the iteration cap
  binds before the values): what is worked out per iteration, the most times;
- ResNet-152 and AlexNet as above, with as many iterations as an HTML page draws whole (beyond
  `vmexplorer.plots.export.MAX_DRAWN_ROWS` rows it draws the typical iteration): the costliest pages.
Files are built from one simulated iteration, its rows repeated with times shifted (the cheapest way:
no simulation of a thousand iterations), and written with gzip's fastest level.

    python -m bench.bench_largest_files [--out bench/results/largest_files.txt] [--shape NAME ...]

tests/session/test_largest_files.py holds the costliest shapes to the goal, with the same builder and
measure.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vmexplorer.graph import build_graph
from vmexplorer.plan import Direction, MemOp, Mode, Origin
from vmexplorer.plots.export import MAX_DRAWN_ROWS
from vmexplorer.policies import compile_plan
from vmexplorer.records.collected import UM_KINDS, Collected, CollectorStatus
from vmexplorer.session import bound_for, new_session
from vmexplorer.session import format as schema
from vmexplorer.session.files import MAX_JSON_BYTES, MAX_VALUES
from vmexplorer.session.plan_format import MAX_MEMOPS
from vmexplorer.session.session import FORMAT, SCHEMA_VERSION
from vmexplorer.simulator import H100_DEFAULT, simulate

ROOT = Path(__file__).resolve().parent.parent
SECONDS, RSS_BYTES = 10.0, 2**30  # the goal, per tool and file
TOOLS = ("info", "compare F F", "export --html", "export --chrome-trace")
_TIMES = ("start_ns", "end_ns", "t_ns")  # the columns that are points in time: shifted when repeated

# Runs argv[1:] and prints its peak RSS (KiB), wall time and exit status as JSON: started from this small
# process, os.wait4's ru_maxrss is that child's alone, nothing of the caller's memory (a fork's copy
# counts in the child's RSS, and a test process that built a file is large)
MEASURE = """
import json, os, subprocess, sys, time
t = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read().decode(errors="replace")
_, status, usage = os.wait4(p.pid, 0)
print(json.dumps({"rss_kib": usage.ru_maxrss, "seconds": time.monotonic() - t,
                  "status": os.waitstatus_to_exitcode(status), "stderr": err.strip()[-500:]}))
"""


@dataclass(frozen=True)
class Shape:
    """A kind of session, grown by `size`: its iterations, or with `grows="um rows"` (or "kernels rows",
    "nvml rows", "memcpy rows") the collectors' records of that table in its one iteration."""

    name: str
    model: str
    policy: str = "uvm"
    share: float | None = None  # of the footprint; None: the least capacity the graph runs in
    measured: bool = False  # with the collectors' records of each iteration
    grows: str = "iterations"  # or "<table> rows"
    trips: int | None = None  # the plan: the policy's, or this many round trips of `_ping_pong`
    whole_page: bool = False  # grown to the most rows an HTML page draws whole, not to the loader's limits

    def document(self, size: int) -> dict[str, Any]:
        """The session's JSON document at `size`."""
        base, span = _one_iteration(self)
        if self.grows != "iterations":
            return _with_records(base, self.grows.removesuffix(" rows"), size, span)
        return _repeated(base, size, span)


SHAPES = (
    Shape("resnet152-uvm-least-simulated", "resnet152"),
    Shape("resnet152-uvm-least-measured", "resnet152", measured=True),
    *(Shape(f"resnet152-{table}-records", "resnet152", measured=True, grows=f"{table} rows")
      for table in ("um", "kernels", "nvml", "memcpy")),
    Shape("resnet152-ping-pong-plan", "resnet152", policy="manual", share=1.0, trips=MAX_MEMOPS // 2),
    Shape("alexnet-uvm-least-1000-iterations", "alexnet"),
    Shape("resnet152-uvm-least-drawn-whole", "resnet152", whole_page=True),
    Shape("alexnet-uvm-least-drawn-whole", "alexnet", whole_page=True),
)


# --- building the files ---------------------------------------------------------------------------

_BASES: dict[Shape, tuple[dict[str, Any], int]] = {}


def _one_iteration(shape: Shape) -> tuple[dict[str, Any], int]:
    """The document of one iteration of the shape, and the time after which the next may start."""
    key = dataclasses.replace(shape, name="")
    if key not in _BASES:
        graph = build_graph(shape.model, 64, 224)
        capacity = graph.min_capacity[0] if shape.share is None else int(graph.footprint * shape.share)
        plan = compile_plan(graph, capacity, shape.policy)
        if shape.trips is None:
            timeline = simulate(graph, plan, H100_DEFAULT)
        else:
            plan, timeline = _ping_pong(graph, plan, shape.trips)
        collected = None
        if shape.measured:
            timeline = dataclasses.replace(timeline, source="measured")
            collected = _records(timeline, plan.memops, with_um=shape.grows == "iterations")
        session = new_session(graph, plan, timeline, H100_DEFAULT, notes=(f"bench_largest_files: {shape.name}",),
                              collected=collected, bound=bound_for(graph, plan, H100_DEFAULT))
        doc = {"format": FORMAT, "schema_version": SCHEMA_VERSION, **schema.encode(session)}
        ends = [timeline.op_end_ns.max(), timeline.memop_end_ns.max(initial=0), timeline.resident_t_ns.max()]
        _BASES[key] = doc, int(max(ends)) + 1000
    return _BASES[key]


def _ping_pong(graph: Any, plan: Any, trips: int) -> tuple[Any, Any]:
    """A plan no policy makes and the loader accepts, with one iteration of it: every persistent tensor
    (resident whole, at the footprint's capacity) offloaded after an op and prefetched back after the
    next, again and again between its uses, `trips` round trips in all, each transfer run once. The ops
    keep their simulated times; each transfer runs from the end of the op it is issued after (the loader
    holds a timeline to its plan only by its indices), and the resident bytes change at each one's end."""
    resident = dict(plan.resident_at_start)
    memops: list[MemOp] = []
    for t, tensor in enumerate(graph.tensors):
        if tensor.persistent and resident.get(t) == tensor.nbytes:
            for a, b in zip(graph.uses[t], graph.uses[t][1:]):
                memops += [MemOp(t, direction, Mode.ASYNC, k + j, k + j + 1, Origin.PLAN, tensor.nbytes)
                           for k in range(a, b - 2, 2) for j, direction in enumerate(_THERE_AND_BACK)]
    if not 0 < trips <= len(memops) // 2:
        raise ValueError(f"from 1 to {len(memops) // 2} round trips, not {trips}")
    tl = simulate(graph, plan, H100_DEFAULT)
    plan = dataclasses.replace(plan, memops=tuple(sorted(memops[:2 * trips], key=lambda m: m.issue_after)))
    nbytes = np.array([m.nbytes for m in plan.memops], dtype=np.int64)
    op_end = np.zeros(len(graph.ops), dtype=np.int64)
    op_end[tl.op_index] = tl.op_end_ns
    start = op_end[[m.issue_after for m in plan.memops]]
    end = start + nbytes // 25  # 25 bytes a ns
    order = np.argsort(end, kind="stable")
    back = np.array([m.direction is Direction.TO_DEVICE for m in plan.memops])[order]
    timeline = dataclasses.replace(tl, memop_iteration=np.zeros(2 * trips, dtype=np.int64),
                                   memop_index=np.arange(2 * trips), memop_start_ns=start, memop_end_ns=end,
                                   resident_t_ns=end[order],
                                   resident_bytes=plan.capacity - np.where(back, 0, nbytes[order]))
    return plan, timeline


_THERE_AND_BACK = (Direction.TO_HOST, Direction.TO_DEVICE)


def _records(tl: Any, memops: Any, with_um: bool) -> Collected:
    """What the collectors keep of one iteration, as a run records it: two kernels per op, a migration
    row per memory operation and four page-fault rows per faulting op (CUPTI's), an NVML sample a ms."""
    k_start = np.stack([tl.op_start_ns, (tl.op_start_ns + tl.op_end_ns) // 2], axis=1).ravel()
    k_end = np.stack([(tl.op_start_ns + tl.op_end_ns) // 2, tl.op_end_ns], axis=1).ravel()
    n_k = len(k_start)
    u_start, u_end, u_kind, u_value = [], [], [], []
    if with_um:
        to_device = np.array([m.direction.value == "to_device" for m in memops], dtype=bool)[tl.memop_index]
        nbytes = np.array([m.nbytes for m in memops], dtype=np.int64)[tl.memop_index]
        u_start, u_end = list(tl.memop_start_ns), list(tl.memop_end_ns)
        u_kind = np.where(to_device, UM_KINDS.index("bytes_htod"), UM_KINDS.index("bytes_dtoh")).tolist()
        u_value = nbytes.tolist()
        faulting = np.flatnonzero(tl.op_fault_bytes > 0)
        for part in range(4):
            at = tl.op_start_ns[faulting] + (tl.op_end_ns[faulting] - tl.op_start_ns[faulting]) * part // 4
            u_start += at.tolist()
            u_end += at.tolist()
            u_kind += [UM_KINDS.index("gpu_page_fault_groups")] * len(faulting)
            u_value += [1] * len(faulting)
    nvml_t = np.arange(0, int(tl.op_end_ns.max()), 1_000_000, dtype=np.int64)
    n_u, n_v = len(u_start), len(nvml_t)
    um = [np.array(c, np.int64) for c in (u_start, u_end, u_kind, u_value)]
    status = tuple(CollectorStatus(name, True, "", 0, 0)
                   for name in ("cupti", "cupti_kernels", "cupti_um", "cupti_faults", "cupti_memcpy", "nvml"))
    return Collected(np.zeros(n_k, np.int64), k_start, k_end, np.full(n_k, 7), np.arange(n_k) % 2,
                     ("volta_sgemm_128x64_nn", "void cudnn::winograd_nonfused::winogradForwardData4x4"),
                     np.zeros(n_u, np.int64), um[0], um[1], um[2], um[3],
                     nvml_t, np.full(n_v, 2**34), np.full(n_v, 1e9), np.full(n_v, 2e9), np.full(n_v, 87.0), status)


def _tables(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The tables that grow with the iterations: the timeline's and the collectors'."""
    tl, c = doc["timeline"], doc["collected"]
    return [tl[t] for t in ("ops", "memops", "resident")] + (
        [] if c is None else [c[t] for t in ("kernels", "um", "memcpy", "nvml")])


def _repeated(base: dict[str, Any], iterations: int, span: int) -> dict[str, Any]:
    """`base`'s one iteration `iterations` times back to back, each `span` ns after the one before."""
    doc = json.loads(json.dumps(base))  # a deep copy: the base is kept for the next size
    for table in _tables(doc):
        for name, values in table["columns"].items():
            column = np.asarray(values)
            if name == "iteration":
                column = (column[None, :] + np.arange(iterations)[:, None]).ravel()
            elif name in _TIMES:
                column = (column[None, :] + span * np.arange(iterations, dtype=np.int64)[:, None]).ravel()
            else:
                column = np.tile(column, iterations)
            table["columns"][name] = column.tolist()
        table["rows"] *= iterations
    return doc


def _with_records(base: dict[str, Any], table: str, rows: int, span: int) -> dict[str, Any]:
    """`base` with `rows` records in its one iteration in the collectors' `table` ("um", "kernels", "nvml"
    or "memcpy") and as many as before in the others: page-fault groups, short kernels on four streams,
    NVML samples, copies of a thousand sizes, spread evenly over the iteration."""
    doc = json.loads(json.dumps(base))
    at = ((np.arange(rows, dtype=np.int64) * (span - 1000)) // max(rows, 1)).tolist()
    zeros, ones, ends = [0] * rows, [1] * rows, [t + 5 for t in at]
    columns = {"um": {"iteration": zeros, "start_ns": at, "end_ns": at, "kind": ["gpu_page_fault_groups"] * rows,
                      "value": ones, "records": ones},
               "kernels": {"iteration": zeros, "start_ns": at, "end_ns": ends, "stream": [i % 4 for i in range(rows)],
                           "name": [i % 2 for i in range(rows)]},
               "nvml": {"t_ns": at, "memory_used_bytes": [2**34] * rows, "pcie_tx_bytes_per_s": [1e9] * rows,
                        "pcie_rx_bytes_per_s": [2e9] * rows, "gpu_util_pct": [87.0] * rows},
               "memcpy": {"iteration": zeros, "start_ns": at, "end_ns": ends, "stream": [3] * rows,
                          "kind": ["htod"] * rows, "bytes": [4096 * (i % 1000) for i in range(rows)]}}[table]
    doc["collected"][table] = {"rows": rows, "columns": columns}
    return doc


def text(doc: dict[str, Any]) -> bytes:
    """As `session_to_bytes` writes it (sorted keys, no spaces)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def values(data: bytes) -> int:
    """The loader's count of the values a text may make (vmexplorer.session.files)."""
    return 1 + sum(data.count(c) for c in (b"{", b"[", b",", b":"))


def largest(shape: Shape) -> tuple[int, bytes]:
    """The largest size whose file the loader's caps allow, and its text: values grow linearly with the
    size, so two small documents give the size, then its text is checked (and the size stepped down
    while the text is over a cap: its bytes grow a little faster, as its times gain digits)."""
    if shape.whole_page:  # as many iterations as a page draws whole: the export's costliest page
        timeline = _one_iteration(shape)[0]["timeline"]
        size = MAX_DRAWN_ROWS // (timeline["ops"]["rows"] + timeline["memops"]["rows"])
        return size, text(shape.document(size))
    one, two = (values(text(shape.document(n))) for n in (1, 2))
    size = (MAX_VALUES - one) // (two - one) + 1
    if shape.grows == "iterations":
        size = min(size, schema.MAX_ITERATIONS)
    while True:
        data = text(shape.document(size))
        if values(data) <= MAX_VALUES and len(data) <= MAX_JSON_BYTES:
            return size, data
        size -= 1


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data, compresslevel=1, mtime=0))
    return path


# --- measuring ------------------------------------------------------------------------------------

def commands(path: Path, out: Path) -> dict[str, list[str]]:
    """Each tool's command line on `path`, writing into the folder `out`."""
    cli = [sys.executable, "-m", "vmexplorer"]
    return {"info": [*cli, "info", str(path)],
            "compare F F": [*cli, "compare", str(path), str(path)],
            "export --html": [*cli, "export", str(path), "--html", str(out / "out.html"), "--force"],
            "export --chrome-trace": [*cli, "export", str(path), "--chrome-trace", str(out / "out.json"), "--force"]}


def measure(argv: list[str]) -> dict[str, Any]:
    """Peak RSS (bytes), wall time (s), exit status and stderr's tail of one command, run from the root."""
    done = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True, check=True,
                          cwd=ROOT)
    r: dict[str, Any] = json.loads(done.stdout)
    r["rss_bytes"] = int(r.pop("rss_kib")) * 1024
    return r


def row(shape: Shape, size: int, data: bytes, path: Path, tool: str, r: dict[str, Any]) -> str:
    grown = f"{size:,} {shape.grows}" + (" (drawn whole)" if shape.whole_page else "")
    ok = r["status"] == 0 and r["seconds"] <= SECONDS and r["rss_bytes"] <= RSS_BYTES
    return (f"| {shape.name} | {grown} | {len(data) / 2**20:.1f} MiB, {values(data):,} values | "
            f"{path.stat().st_size / 2**20:.1f} MiB | {tool} | exit {r['status']} | "
            f"{r['rss_bytes'] / 2**20:,.0f} MiB | {r['seconds']:.1f} s | {'yes' if ok else 'NO'} |")


def run(shapes: tuple[Shape, ...], emit: Callable[[str], None]) -> bool:
    """Build each shape's largest file, run every tool on it, emit the table's rows; True if all met the goal."""
    emit(f"# bench/bench_largest_files.py, {datetime.date.today().isoformat()}, on {platform.node()} "
         f"({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}); goal: each tool "
         f"within {SECONDS:g} s and {RSS_BYTES / 2**30:g} GiB")
    emit("")
    emit("| shape | largest accepted | JSON | gzip | tool | outcome | peak RSS | time | within |")
    emit("|---|---:|---:|---:|---|---|---:|---:|---|")
    within, worst = True, (0.0, 0)
    with tempfile.TemporaryDirectory() as d:
        for shape in shapes:
            size, data = largest(shape)
            path = write(Path(d) / f"{shape.name}.vms", data)
            for tool, argv in commands(path, Path(d)).items():
                r = measure(argv)
                emit(row(shape, size, data, path, tool, r))
                within &= r["status"] == 0 and r["seconds"] <= SECONDS and r["rss_bytes"] <= RSS_BYTES
                worst = (max(worst[0], r["seconds"]), max(worst[1], r["rss_bytes"]))
            path.unlink()
    emit("")
    emit(f"slowest: {worst[0]:.1f} s, largest peak RSS: {worst[1] / 2**20:,.0f} MiB "
         f"({'within' if within else 'NOT within'} the goal)")
    return within


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--shape", action="append", choices=[s.name for s in SHAPES], help="only these shapes")
    args = parser.parse_args()
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    ok = run(tuple(s for s in SHAPES if not args.shape or s.name in args.shape), emit)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
