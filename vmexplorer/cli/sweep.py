"""`vmexplorer sweep`: models x policies x mechanisms x capacities, one row per point, as CSV or JSON.

Each point is planned and simulated as `simulate` does it (`commands._compile`'s `plan_for` under the same
cost model, `--cost-model`'s or the default), and its bound is the one `simulate` reports (`Planned.bound`),
so a row's figures are those `simulate` prints for the same point. A capacity below a model's least
capacity is a row of its own, its figures empty and its note saying so (and one note on stderr per model);
a policy that refuses a point (PlanError: `device` below the footprint, `uvm` under swap) is a row whose
note holds the refusal. Nothing else is caught: a bug is a traceback.

Points run in worker processes (`--jobs`, spawned, so a sweep behaves the same on every platform), a
model's points of one mechanism and capacity together, as their bound is the same; rows come out in one
order whatever ran where: model, policy, mechanism, capacity. The file (`--out`) is written once every
point is done, whole (`fileio.atomic_write`): an interrupted or failing sweep leaves no part of one and
keeps the file already there.
"""

from __future__ import annotations

import os
import sys

from . import UsageError, _note

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence
    from decimal import Decimal
    from typing import Any

    from ..graph import Graph
    from ..simulator import CostModel

    Key = tuple[str, int, int]  # model, batch, image size
    Point = tuple[int, Key, str, str, int]  # row index, graph, policy, mechanism, capacity bytes
    Row = dict[str, Any]

COLUMNS = ("model", "batch", "image_size", "policy", "mechanism", "capacity_bytes", "capacity_pct",
           "iteration_ns", "bound_ns", "bytes_to_device", "bytes_to_host", "bound_bytes_to_device",
           "bound_bytes_to_host", "stall_ns", "fault_bytes", "peak_bytes", "room_bytes", "pool_bytes", "note")
MAX_POINTS = 100_000  # a range with a step of one byte is a typo, not a sweep
SKIPPED = "skipped: below the least capacity"


def cmd_sweep(args: argparse.Namespace) -> dict[str, Any]:
    from ..graph import build_graph
    from .commands import _cost_model, _cost_session, _refuse_existing

    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs takes how many processes to run points in, at least 1, not {args.jobs}")
    if args.out is not None:  # before the work, not after it
        _refuse_existing(args.out, args.force)
        if not args.out.parent.is_dir():
            raise UsageError(f"cannot write {args.out}: the folder {args.out.parent} does not exist")
    models = parse_models(args.model, args.batch, args.image_size)
    policies, mechanisms = parse_policies(args.policy), parse_mechanisms(args.mechanism)
    items = parse_capacities(args.capacity)
    measured = _cost_session(args.cost_model)
    graphs = {key: build_graph(*key) for key in models}
    costs = {key: _cost_model(measured, graph, args.cost_model) for key, graph in graphs.items()}
    points: list[Point] = []
    for key, graph in graphs.items():
        capacities = capacities_for(items, graph)
        points += [(len(points) + i, key, p, m, c) for i, (p, m, c) in
                   enumerate((p, m, c) for p in policies for m in mechanisms for c in capacities)]
    if len(points) > MAX_POINTS:
        raise UsageError(f"the sweep has {len(points)} points, more than {MAX_POINTS}: give fewer capacities, "
                         "models or policies")
    rows = run_points(points, costs, args.jobs or _cores(), _progress(args.progress, len(points)))
    names = sorted({cost.name for cost in costs.values()})
    doc = {"cost_model": names[0] if len(names) == 1 else names, "columns": list(COLUMNS), "rows": rows}
    text = rows_text(doc, args.rows_format)
    if args.out is None:
        return {"text": text}
    from ..fileio import atomic_write

    atomic_write(args.out, text.encode(), force=args.force)
    refused = sum(1 for r in rows if r["note"] and r["iteration_ns"] is None)
    return {"path": str(args.out), "rows": len(rows), "without_figures": refused}


def table_sweep(doc: dict[str, Any]) -> str:
    if "text" in doc:
        return str(doc["text"]).rstrip("\n")
    return (f"wrote {doc['path']}: {doc['rows']} points"
            + (f", {doc['without_figures']} of them skipped or refused (see their note)" if doc["without_figures"]
               else ""))


def rows_text(doc: dict[str, Any], form: str) -> str:
    """The rows as CSV (a header of COLUMNS, empty cells for what a point has not) or as one JSON document
    with sorted keys: integer nanoseconds and bytes, the capacity's share of the footprint a float."""
    if form == "json":
        import json

        return json.dumps(doc, sort_keys=True, indent=2, allow_nan=False) + "\n"
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in doc["rows"]:
        writer.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
    return out.getvalue()


# --- what the arguments ask for ------------------------------------------------------------------
def parse_models(text: str, batch: int | None, image_size: int) -> list[Key]:
    """`vgg19:64,resnet50` (a model's batch after its colon, else `--batch`) as graph keys, in order."""
    from ..graph import MODELS

    keys: list[Key] = []
    for item in _items(text, "--model"):
        name, _, given = item.partition(":")
        if name not in MODELS:
            raise UsageError(f"--model: unknown model {name!r}; choose from {', '.join(MODELS)}")
        if given:
            if not given.isdigit() or int(given) < 1:
                raise UsageError(f"--model {item}: the batch after the colon must be a positive integer")
            size = int(given)
        elif batch is None:
            raise UsageError(f"--model {name} has no batch: write {name}:64, or give --batch for every model")
        else:
            size = batch
        if (name, size, image_size) not in keys:
            keys.append((name, size, image_size))
    return keys


def parse_policies(text: str) -> list[str]:
    """A comma list of policies, or `all`: every policy but `manual` (whose moves a sweep has not)."""
    from ..policies import POLICIES

    if text.strip() == "all":
        return [name for name, spec in POLICIES.items() if not spec.takes_moves]
    names = _items(text, "--policy")
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise UsageError(f"--policy: unknown policy {unknown[0]!r}; choose from {', '.join(POLICIES)}, or all")
    return list(dict.fromkeys(names))


def parse_mechanisms(text: str) -> list[str]:
    from ..config import Mechanism

    names = _items(text, "--mechanism")
    known = [m.value for m in Mechanism]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--mechanism: unknown mechanism {unknown[0]!r}; choose from {', '.join(known)}")
    return list(dict.fromkeys(names))


def _items(text: str, flag: str) -> list[str]:
    items = [item.strip() for item in str(text).split(",")]
    if not all(items):
        raise UsageError(f"{flag} {text!r}: an empty item; give a comma-separated list")
    return items


def parse_capacities(text: str) -> list[tuple[str, int | Decimal]]:
    """`--capacity`'s comma list as (kind, value) items: ("bytes", n), ("share", percent), or ("bare", n)
    for a number typed with no unit (which `capacities_for` holds to the least capacity). A range
    `A..B:STEP` is A, A+STEP, ... up to B inclusive, all three shares (`45%..100%:5%`) or all sizes
    (`2GiB..4GiB:256MiB`); worked out exactly. UsageError, one line, for anything else."""

    found: list[tuple[str, int | Decimal]] = []
    for item in _items(text, "--capacity"):
        if ".." not in item:
            found.append(_one_capacity(item))
            continue
        ends, colon, step = item.partition(":")
        first, _, last = ends.partition("..")
        parts = [_one_capacity(p, item) for p in (first, last, step)] if colon else []
        if not parts or len({kind == "share" for kind, _ in parts}) > 1:
            raise UsageError(f"--capacity {item!r}: a range is A..B:STEP, the three all shares (45%..100%:5%) or "
                             "all sizes (2GiB..4GiB:256MiB)")
        (kind, a), (_, b), (_, d) = parts
        if not 0 < d or b < a:
            raise UsageError(f"--capacity {item!r}: a range runs up from A to B by a step above 0")
        if (b - a) / d >= MAX_POINTS:
            raise UsageError(f"--capacity {item!r} is more than {MAX_POINTS} capacities: take a larger step")
        count = int((b - a) // d) + 1
        found += [(kind, a + k * d) for k in range(count)]
    return found


def _one_capacity(text: str, within: str | None = None) -> tuple[str, int | Decimal]:
    import re
    from decimal import Decimal

    from ..units import parse_bytes

    where = f"--capacity {within!r}" if within else "--capacity"
    item = text.strip()
    try:
        if item.endswith("%"):
            parse_bytes(item, 2**40)  # the same checks of a share as plan's, of a 1 TiB footprint
            return "share", Decimal(item[:-1].strip())
        nbytes = parse_bytes(item)
    except ValueError as e:
        raise UsageError(f"{where}: {e}") from None
    return ("bare" if re.fullmatch(r"[0-9.eE+-]+", item) else "bytes"), nbytes


def capacities_for(items: Sequence[tuple[str, int | Decimal]], graph: Graph) -> list[int]:
    """The items' bytes for `graph`, each once, in the order given. A share below the graph's least capacity
    is kept (its rows say they were skipped, and a note here says so once); a bare number below it is
    refused as `plan` refuses it (`commands.capacity_of`: a share with its % left out)."""
    from ..config import capacity_text
    from ..units import format_bytes, parse_bytes
    from .commands import capacity_of

    out: list[int] = []
    for kind, value in items:
        if kind == "share":
            nbytes = parse_bytes(f"{value}%", graph.footprint)
        else:
            nbytes = capacity_of(str(value), graph) if kind == "bare" else int(value)
        if nbytes not in out:
            out.append(nbytes)
    need, _ = graph.min_capacity
    below = [c for c in out if c < need]
    if below:
        some = "1 capacity below its least" if len(below) == 1 else f"{len(below)} capacities below its least"
        _note(f"{graph.model} batch {graph.batch}: {some}, {format_bytes(need)} ({100 * need / graph.footprint:.1f}%), "
              f"{'is' if len(below) == 1 else 'are'} skipped: "
              + ", ".join(capacity_text(c, graph.footprint) for c in below))
    return out


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --- running the points --------------------------------------------------------------------------
def run_points(points: Sequence[Point], costs: dict[Key, CostModel], jobs: int,
               progress: Callable[[int], None]) -> list[Row]:
    """Each point's row, in the points' order; in `jobs` spawned processes where that is more than one."""
    groups: dict[tuple[Key, str, int], list[Point]] = {}
    for point in points:  # one task per graph, mechanism and capacity: its points share a bound
        groups.setdefault((point[1], point[3], point[4]), []).append(point)
    tasks = list(groups.values())
    rows: list[Row | None] = [None] * len(points)
    if jobs <= 1 or len(tasks) <= 1:
        _start_worker(costs, ignore_interrupts=False)
        for task in tasks:
            _place(rows, _rows_of(task))
            progress(len(task))
        return [r for r in rows if r is not None]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(costs, True))
    try:
        futures = [pool.submit(_rows_of, task) for task in tasks]
        for future in as_completed(futures):
            got = future.result()
            _place(rows, got)
            progress(len(got))
    except BaseException:  # Ctrl-C, SIGTERM or a bug: nothing is written, and no worker goes on working
        _stop(pool)
        raise
    pool.shutdown()
    return [r for r in rows if r is not None]


def _stop(pool: Any) -> None:
    """End the workers now: a point a worker has started (a search: up to a minute) is not waited for."""
    stop = getattr(pool, "terminate_workers", None)  # Python 3.14 on
    if stop is not None:
        stop()
        return
    workers = list((getattr(pool, "_processes", None) or {}).values())  # before it, the pool's own record
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()


def _place(rows: list[Row | None], got: list[tuple[int, Row]]) -> None:
    for index, row in got:
        rows[index] = row


_COSTS: dict[Key, CostModel] = {}  # this process's cost model per graph (`_start_worker`)
_GRAPHS: dict[Key, Graph] = {}  # and its graphs, built once: their sizes and lifetimes are worked out once


def _start_worker(costs: dict[Key, CostModel], ignore_interrupts: bool) -> None:
    _COSTS.clear()
    _COSTS.update(costs)
    if ignore_interrupts:  # Ctrl-C is the main process's to handle: it drops the points not yet started
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _rows_of(task: Sequence[Point]) -> list[tuple[int, Row]]:
    return [(point[0], point_row(point, _COSTS[point[1]])) for point in task]


def point_row(point: Point, cost: CostModel) -> Row:
    """One point planned and simulated as `simulate` does it (`plan_for`, `Planned.simulated`), with the
    bound `simulate` reports (`Planned.bound`) and, where the run allocates one, its device pool."""
    from ..config import Config, Mechanism
    from ..graph import build_graph
    from ..plan import PlanError
    from ..plan.mechanisms import managed
    from ..plan.pool import kept_tensors, run_pool
    from ..session.planned import plan_for

    _, key, policy, mechanism, capacity = point
    graph = _GRAPHS.get(key) or _GRAPHS.setdefault(key, build_graph(*key))
    row: Row = dict.fromkeys(COLUMNS)
    row.update(model=key[0], batch=key[1], image_size=key[2], policy=policy, mechanism=mechanism,
               capacity_bytes=capacity, capacity_pct=round(100 * capacity / graph.footprint, 3), note="")
    need, _ = graph.min_capacity
    if capacity < need:
        return {**row, "note": f"{SKIPPED} ({need} bytes)"}
    try:
        planned = plan_for(Config(*key, capacity, policy, {}, Mechanism(mechanism)), cost, graph=graph)
    except PlanError as e:
        return {**row, "note": "refused: " + " ".join(str(e).split())}
    session = planned.simulated()
    s, bound, plan = session.summary, planned.bound, planned.plan
    assert bound is not None  # a plan was made, so the capacity holds the largest op's working set
    pool = None
    if not managed(plan):  # the one allocation the run's tensors share, as the engine places it
        ran = plan.graph_of(planned.graph)
        pool = run_pool(ran, plan, kept_tensors(ran, keep_weights=False)).total
    row.update(iteration_ns=s["iteration_ns"], bound_ns=bound.lower_bound_ns, bytes_to_device=s["bytes_to_device"],
               bytes_to_host=s["bytes_to_host"], bound_bytes_to_device=bound.min_bytes_to_device,
               bound_bytes_to_host=bound.min_bytes_to_host, stall_ns=s["stall_ns"], fault_bytes=s["fault_bytes"],
               peak_bytes=s["peak_resident_bytes"], room_bytes=plan.planned_with, pool_bytes=pool)
    return row


def _progress(asked: bool, total: int) -> Callable[[int], None]:
    """A plain-text bar on stderr, rewritten in place (`\\r`), where stderr is a terminal or `--progress`
    asks for it; finished with a newline when the last point is done."""
    import time

    stream = sys.stderr
    shown = asked or bool(stream is not None and getattr(stream, "isatty", lambda: False)())
    began, done = time.monotonic(), [0]

    def step(n: int) -> None:
        done[0] += n
        if not shown or stream is None:
            return
        filled = 30 * done[0] // max(total, 1)
        line = (f"\rsweep [{'#' * filled}{'.' * (30 - filled)}] {done[0]}/{total} points "
                f"{time.monotonic() - began:.0f} s")
        try:
            stream.write(line + ("\n" if done[0] >= total else ""))
            stream.flush()
        except (OSError, ValueError):
            pass

    return step
