"""The `vmexplorer` command: graphs, plans, simulated sessions, inspection and export, headless.

Every command prints a table for people or, with `--format json`, one JSON document with sorted keys for
scripts (docs/cli.md gives each shape). Bad input of any kind ends in one line on stderr,
`vmexplorer: error: ...`, and exit status 2, never a traceback. Commands import the heavy modules
(Bokeh, sessions, the simulator) themselves, so `vmexplorer models` starts fast on a laptop.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__
from .graph import Graph
from .models import DEFAULT_IMAGE_SIZE, MODELS, build_graph
from .plan import Plan
from .units import format_bytes, format_ns, parse_bytes

EXIT_OK, EXIT_PIPE_CLOSED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_OPTION_DEST = "policy_option_"  # argparse dest prefix of policy options, so they cannot clash


class UsageError(Exception):
    """Bad arguments or input: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the usage block and exits; scripts want one parseable line, and main() decides
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# --- commands -------------------------------------------------------------------------------------
def cmd_models(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for name in MODELS:
        graph = build_graph(name, args.batch, args.image_size)
        need, _ = graph.min_capacity
        rows.append({"name": name, "param_count": graph.param_count, "ops": len(graph.ops),
                     "tensors": len(graph.tensors), "footprint_bytes": graph.footprint,
                     "min_capacity_bytes": need})
    return {"batch": args.batch, "image_size": args.image_size, "models": rows}


def cmd_graph(args: argparse.Namespace) -> dict[str, Any]:
    return graph_doc(build_graph(args.model, args.batch, args.image_size))


def cmd_plan(args: argparse.Namespace) -> dict[str, Any]:
    from .costmodel import H100_DEFAULT
    from .records import summarize
    from .simulator import simulate

    graph, plan = _compile(args)
    timeline = simulate(graph, plan, H100_DEFAULT)
    return plan_doc(graph, plan, summarize(graph, plan, timeline), H100_DEFAULT.name)


def cmd_simulate(args: argparse.Namespace) -> dict[str, Any]:
    from .costmodel import H100_DEFAULT
    from .session import new_session, save_session
    from .simulator import simulate

    _refuse_existing(args.out, args.force)  # before the work, not after it
    graph, plan = _compile(args)
    timeline = simulate(graph, plan, H100_DEFAULT)
    session = new_session(graph, plan, timeline, cost_model=H100_DEFAULT, notes=tuple(args.note))
    save_session(session, args.out, force=args.force)
    return {"path": str(args.out), "config": _config(session.plan), "summary": session.summary}


def cmd_info(args: argparse.Namespace) -> dict[str, Any]:
    session = _load(args.file)
    cost = session.cost_model
    return {"path": str(args.file), "config": _config(session.plan), "created": session.created,
            "cost_model": getattr(cost, "name", None), "environment": session.environment,
            "notes": list(session.notes), "summary": session.summary}


def cmd_calibrate(args: argparse.Namespace) -> dict[str, Any]:
    import dataclasses

    import numpy as np

    from .costmodel import calibrate
    from .session import save_session
    from .simulator import simulate

    _refuse_existing(args.out, args.force)
    session = _load(args.file)
    if session.timeline.source != "measured":
        raise UsageError(f"{args.file} is a simulated session: calibrate fits a measured one")
    base = None
    if args.device is not None:
        device = _load(args.device)
        if device.timeline.source != "measured" or device.plan.policy != "device":
            raise UsageError(f"{args.device} should be a measured session of the device policy, not a "
                             f"{device.timeline.source} {device.plan.policy} one")
        if device.graph.key != session.graph.key:
            raise UsageError(f"{args.device} ran {_config_line(_config(device.plan))}, not the graph of {args.file}")
        base = calibrate(device.graph, device.plan, device.timeline)
    elif session.plan.policy != "device" and any(m.nbytes for m in session.plan.memops):
        raise UsageError("a paging session needs --device: the same model's measured device run gives the "
                         "fault-free op times its fault throughput is measured against")
    cost = calibrate(session.graph, session.plan, session.timeline, **({"base": base} if base else {}),
                     name=f"calibrated on {args.file.name}" + (f" and {args.device.name}" if base else ""))
    save_session(dataclasses.replace(session, cost_model=cost), args.out, force=True)
    measured = float(np.median(session.timeline.timed_ns()))
    predicted = float(np.median(simulate(session.graph, session.plan, cost).iteration_ns()))
    return {"path": str(args.out), "config": _config(session.plan), "cost_model": cost.name,
            "rates": {**{k: getattr(cost, k) for k in ("prefetch_bytes_per_ns", "evict_bytes_per_ns",
                                                      "fault_bytes_per_ns", "host_block")},
                      "fault_bytes_per_ns_by_kind": dict(cost.fault_bytes_per_ns_by_kind)},
            "ops_timed": len(cost.op_ns), "measured_iteration_ns": measured,
            "simulated_iteration_ns": predicted}


def table_calibrate(doc: dict[str, Any]) -> str:
    from .costmodel import fault_rates_by_kind_text

    r = doc["rates"]
    kinds = fault_rates_by_kind_text(r["fault_bytes_per_ns_by_kind"])
    return (f"wrote {doc['path']} with the cost model {doc['cost_model']!r}: prefetch "
            f"{r['prefetch_bytes_per_ns']:.1f} GB/s, eviction {r['evict_bytes_per_ns']:.1f} GB/s, demand faults "
            f"{r['fault_bytes_per_ns']:.1f} GB/s" + (f" (by op kind: {kinds})" if kinds else "")
            + f", host blocking {r['host_block']:.2f}, {doc['ops_timed']} op times; "
            f"it simulates the session's own plan in {doc['simulated_iteration_ns'] / 1e6:.1f} ms per iteration "
            f"(measured {doc['measured_iteration_ns'] / 1e6:.1f} ms)")


def cmd_compare(args: argparse.Namespace) -> dict[str, Any]:
    a, b = _load(args.a), _load(args.b)
    sa, sb = a.summary, b.summary  # a property that recomputes: take it once
    summary = {k: {"a": sa.get(k), "b": sb.get(k), "ratio": _ratio(sa.get(k), sb.get(k))}
               for k in sorted(set(sa) | set(sb))}
    from .compare import align_op_times

    aligned_by, aligned = align_op_times(a, b)
    rows = [{k: v for k, v in row.items() if k != "op"} for row in aligned]  # the documented JSON shape
    return {"a": {"path": str(args.a), "config": _config(a.plan)},
            "b": {"path": str(args.b), "config": _config(b.plan)},
            "summary": summary, "aligned_by": aligned_by, "rows": rows}


def cmd_export(args: argparse.Namespace) -> dict[str, Any]:
    from .export import export_chrome_trace, export_html

    kind, out = ("html", args.html) if args.html is not None else ("chrome_trace", args.chrome_trace)
    _refuse_existing(out, args.force)
    session = _load(args.file)
    (export_html if kind == "html" else export_chrome_trace)(session, out, force=args.force)
    return {"path": str(out), "format": kind, "source": str(args.file)}


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from .engine.executor import RunSettings, execute, measured_session
    from .engine.gpu import cupy
    from .session import save_session

    if args.iterations < 1 or args.warmup < 0 or args.counted < 0:
        raise UsageError("--iterations must be at least 1, and --warmup and --counted at least 0")
    parts = _collector_parts(args.collectors)
    _refuse_existing(args.out, args.force)
    graph, plan = _compile(args)
    cupy()  # says plainly when there is no GPU, before anything is allocated
    settings = RunSettings(iterations=args.iterations, warmup=args.warmup, seed=args.seed,
                           allow_tf32=not args.no_tf32, autotune=args.autotune, collect=not args.no_collectors,
                           collectors=parts, counted=args.counted)
    progress = (lambda i, n, loss: print(f"iteration {i}/{n}: loss {loss:.4f}", file=sys.stderr)) \
        if args.progress else None
    try:
        result = execute(graph, plan, settings, progress=progress)
    except (UsageError, OSError):
        raise
    except Exception as e:  # a CUDA or cuDNN failure is the run's, reported in one line
        raise RunFailed(f"the GPU run failed: {type(e).__name__}: {e}") from None
    session = measured_session(graph, plan, result, notes=(
        "fault bytes per op are the plan's; measured faults come with the CUPTI collector", *args.note))
    save_session(session, args.out, force=args.force)
    return {"path": str(args.out), "config": _config(session.plan), "summary": session.summary}


def _collector_parts(text: str) -> tuple[str, ...]:
    from .engine.executor import COLLECTOR_PARTS

    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in parts if p not in COLLECTOR_PARTS]
    if unknown or not parts:
        raise UsageError(f"--collectors takes a comma-separated list of {', '.join(COLLECTOR_PARTS)}, not {text!r}")
    return parts


class RunFailed(RuntimeError):
    """The GPU run itself failed (CUDA, cuDNN): nothing was written."""


# --- shared steps ---------------------------------------------------------------------------------
def _compile(args: argparse.Namespace) -> tuple[Graph, Plan]:
    from .policies import compile_plan

    graph = build_graph(args.model, args.batch, args.image_size)
    try:
        capacity = parse_bytes(args.capacity, graph.footprint)
    except ValueError as e:
        raise UsageError(str(e)) from None
    options = _policy_options(args)
    moves = _read_moves(graph, args.moves) if args.moves is not None else ()
    plan = compile_plan(graph, capacity, args.policy, options, moves)
    if capacity >= graph.footprint:
        _note(f"capacity {format_bytes(capacity)} holds the whole footprint of "
              f"{format_bytes(graph.footprint)}: nothing will page")
    return graph, plan


def _policy_options(args: argparse.Namespace) -> dict[str, Any]:
    from .policies import POLICIES

    given = {k[len(_OPTION_DEST):]: v for k, v in vars(args).items() if k.startswith(_OPTION_DEST)}
    for name in given:
        if name not in POLICIES[args.policy].options:
            owners = [p for p, spec in POLICIES.items() if name in spec.options]
            raise UsageError(f"{_flag(name)} is an option of {' and '.join(owners)}, not of {args.policy}")
    return given


def _read_moves(graph: Graph, path: Path) -> list[Any]:
    from .plan import PlanError
    from .policies import load_moves

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text file; --moves wants a JSON manual plan") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    try:
        return load_moves(graph, data)
    except PlanError as e:
        raise PlanError(f"{path}: {e}") from None


def _load(path: Path) -> Any:
    from .session import load_session

    return load_session(path)


def _refuse_existing(path: Path, force: bool) -> None:
    if not force and (path.exists() or path.is_symlink()):
        raise UsageError(f"{path} exists; pass --force to replace it")


def _ratio(a: Any, b: Any) -> float | None:
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    return b / a if numbers and a else None


# --- JSON documents -------------------------------------------------------------------------------
def graph_doc(graph: Graph) -> dict[str, Any]:
    need, at = graph.min_capacity
    names = [op.name for op in graph.ops]
    tnames = [t.name for t in graph.tensors]
    ops = [{"index": i, "name": op.name, "kind": op.kind, "phase": op.phase.value, "layer": op.layer,
            "flops": op.flops, "bytes_touched": op.bytes_touched,
            "reads": [tnames[t] for t in op.reads], "writes": [tnames[t] for t in op.writes]}
           for i, op in enumerate(graph.ops)]
    tensors = [{"index": i, "name": t.name, "kind": t.kind.value, "dtype": t.dtype, "shape": list(t.shape),
                "nbytes": t.nbytes, "producer": None if t.persistent else names[t.producer],
                "consumers": [names[c] for c in t.consumers]} for i, t in enumerate(graph.tensors)]
    totals = {"footprint_bytes": graph.footprint, "min_capacity_bytes": need,
              "min_capacity_op": {"index": at, "name": names[at]}, "param_count": graph.param_count,
              "bytes_by_kind": graph.bytes_by_kind(), "flops": sum(op.flops for op in graph.ops),
              "ops": len(graph.ops), "tensors": len(graph.tensors)}
    return {"model": graph.model, "batch": graph.batch, "image_size": graph.image_size,
            "totals": totals, "ops": ops, "tensors": tensors}


def plan_doc(graph: Graph, plan: Plan, summary: dict[str, Any], cost_model: str) -> dict[str, Any]:
    tnames = [t.name for t in graph.tensors]
    memops = [{"tensor": tnames[m.tensor], "nbytes": m.nbytes,
               "direction": m.direction.value, "mode": m.mode.value, "origin": m.origin.value,
               "issue_after": m.issue_after, "issue_after_op": _op_name(graph, m.issue_after),
               "complete_before": m.complete_before,
               "complete_before_op": _op_name(graph, m.complete_before)} for m in plan.memops]
    # the moves in load_moves' format, so `jq '{moves: .plan.moves}'` gives a file for --moves
    moves = [{"tensor": tnames[mv.tensor], "offload_after": _op_ref(graph, mv.offload_after),
              "prefetch_after": None if mv.prefetch_after is None else _op_ref(graph, mv.prefetch_after)}
             for mv in plan.moves]
    resident = [{"tensor": tnames[t], "nbytes": nbytes} for t, nbytes in plan.resident_at_start]
    return {"config": _config(plan), "cost_model": cost_model, "summary": summary,
            "plan": {"peak_resident_bytes": plan.peak_resident, "resident_at_start": resident,
                     "memops": memops, "moves": moves}}


def _config(plan: Plan) -> dict[str, Any]:
    return {"model": plan.model, "batch": plan.batch, "image_size": plan.image_size, "policy": plan.policy,
            "capacity_bytes": plan.capacity, "options": dict(plan.options)}


def _op_name(graph: Graph, index: int) -> str | None:
    # the iteration's start (-1) and end (len(ops)) are not ops
    return graph.ops[index].name if 0 <= index < len(graph.ops) else None


def _op_ref(graph: Graph, index: int) -> str | int:
    name = _op_name(graph, index)
    return index if name is None else name  # load_moves takes -1 for "at the iteration start"


# --- tables ---------------------------------------------------------------------------------------
def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[_cell(h, v) for h, v in zip(headers, row)] for row in rows]
    raw_numeric = [True] * len(headers)
    for row in cells:
        for i, c in enumerate(row):
            raw_numeric[i] = raw_numeric[i] and (c[:1].isdigit() or c[:1] == "-")
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if num else h.ljust(w)
                       for h, w, num in zip(headers, widths, raw_numeric)).rstrip()]
    for row in cells:
        lines.append("  ".join(c.rjust(w) if num else c.ljust(w)
                               for c, w, num in zip(row, widths, raw_numeric)).rstrip())
    return "\n".join(lines)


def _cell(header: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if header.endswith("_ns") or header in ("time", "delta"):
        return format_ns(value)
    if "bytes" in header.split("_") or header in ("footprint", "min capacity"):
        return format_bytes(value)
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _pairs(d: dict[str, Any]) -> str:
    return _table(("key", "value"), ((k, _cell(k, v)) for k, v in sorted(d.items())))


def _title(text: str) -> str:
    return f"\n{text}\n{'-' * len(text)}"


def _config_line(c: dict[str, Any]) -> str:
    opts = "".join(f" {_flag(k)} {v}" for k, v in sorted(c["options"].items()))
    return (f"{c['model']} batch {c['batch']} at {c['image_size']}px, {c['policy']}{opts}, "
            f"capacity {format_bytes(c['capacity_bytes'])}")


def table_models(doc: dict[str, Any]) -> str:
    rows = [(m["name"], f"{m['param_count']:,}", m["ops"], m["tensors"], m["footprint_bytes"],
             m["min_capacity_bytes"]) for m in doc["models"]]
    return (f"models at batch {doc['batch']}, {doc['image_size']}x{doc['image_size']} images\n"
            + _table(("model", "params", "ops", "tensors", "footprint", "min capacity"), rows))


def table_graph(doc: dict[str, Any]) -> str:
    t = doc["totals"]
    totals = {"footprint_bytes": t["footprint_bytes"], "min_capacity_bytes": t["min_capacity_bytes"],
              "min_capacity_op": t["min_capacity_op"]["name"], "param_count": f"{t['param_count']:,}",
              "flops": f"{t['flops']:,}", "ops": t["ops"], "tensors": t["tensors"],
              **{f"{k}_bytes": v for k, v in t["bytes_by_kind"].items()}}
    ops = ((o["index"], o["name"], o["phase"], o["kind"], f"{o['flops']:,}", o["bytes_touched"])
           for o in doc["ops"])
    tensors = ((x["index"], x["name"], x["kind"], "x".join(map(str, x["shape"])) or "scalar", x["nbytes"],
                x["producer"] or "(persistent)", ",".join(x["consumers"])) for x in doc["tensors"])
    return "\n".join([f"{doc['model']} batch {doc['batch']} at {doc['image_size']}px", _pairs(totals),
                      _title("ops"), _table(("#", "op", "phase", "kind", "flops", "bytes"), ops),
                      _title("tensors"),
                      _table(("#", "tensor", "kind", "shape", "bytes", "producer", "consumers"), tensors)])


def table_plan(doc: dict[str, Any]) -> str:
    p = doc["plan"]
    memops = ((m["tensor"], m["nbytes"], m["direction"], m["mode"], m["origin"],
               f"{m['issue_after_op'] or 'start'} ({m['issue_after']})",
               f"{m['complete_before_op'] or 'end'} ({m['complete_before']})") for m in p["memops"])
    head = (f"{_config_line(doc['config'])}; cost model {doc['cost_model']}\n"
            f"{len(p['memops'])} memory operations, {len(p['moves'])} planned round trips, "
            f"{len(p['resident_at_start'])} tensors resident at start, "
            f"peak resident {format_bytes(p['peak_resident_bytes'])}")
    return "\n".join([head, _title("simulated summary"), _pairs(doc["summary"]), _title("memory operations"),
                      _table(("tensor", "bytes", "direction", "mode", "origin", "issue after",
                              "complete before"), memops)])


def table_simulate(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    return (f"wrote {doc['path']}: {_config_line(doc['config'])}; "
            f"iteration {format_ns(s.get('iteration_ns', 0))} ({s.get('source', '?')})")


def table_info(doc: dict[str, Any]) -> str:
    env = doc["environment"] if isinstance(doc["environment"], dict) else {"environment": doc["environment"]}
    notes = "\n".join(f"- {n}" for n in doc["notes"]) or "(none)"
    return "\n".join([doc["path"], f"{_config_line(doc['config'])}",
                      f"created {doc['created']}; cost model {doc['cost_model'] or '-'}",
                      _title("summary"), _pairs(doc["summary"]), _title("environment"), _pairs(env),
                      _title("notes"), notes])


def table_compare(doc: dict[str, Any], top: int) -> str:
    summary = ((k, _cell(k, v["a"]), _cell(k, v["b"]), "-" if v["ratio"] is None else f"{v['ratio']:.3f}")
               for k, v in doc["summary"].items())
    rows = [r for r in doc["rows"] if r["delta_ns"] is not None]
    rows.sort(key=lambda r: -abs(r["delta_ns"]))
    shown = rows if top <= 0 else rows[:top]
    missing = [r["name"] for r in doc["rows"] if r["delta_ns"] is None]
    out = [f"A: {doc['a']['path']}: {_config_line(doc['a']['config'])}",
           f"B: {doc['b']['path']}: {_config_line(doc['b']['config'])}",
           _title("summary"), _table(("key", "A", "B", "B/A"), summary),
           _title(f"largest per-iteration time changes by {doc['aligned_by']} "
                  f"({len(shown)} of {len(rows)})"),
           _table((doc["aligned_by"], "a_ns", "b_ns", "delta_ns"),
                  ((r["name"], r["a_ns"], r["b_ns"], r["delta_ns"]) for r in shown))]
    if missing:
        out.append(f"\nin only one of them: {', '.join(missing)}")
    return "\n".join(out)


def table_export(doc: dict[str, Any]) -> str:
    return f"wrote {doc['path']} ({doc['format'].replace('_', ' ')} of {doc['source']})"


# --- the parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vmexplorer", description="Profile, simulate and compare GPU unified-memory "
                     "paging policies for CNN training. docs/cli.md documents every command.")
    parser.add_argument("--version", action="version", version=f"vmexplorer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[..., dict[str, Any]], table: Callable[..., str], text: str,
                formats: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(run=run, table=table)
        if formats:
            p.add_argument("--format", choices=("table", "json"), default="table",
                           help="table for people (default), json for scripts")
        return p

    p = command("models", cmd_models, table_models, "list the models with their sizes")
    p.add_argument("--batch", type=int, default=64, help="batch size for the sizes (default 64)")
    p.add_argument("--image-size", type=int, default=DEFAULT_IMAGE_SIZE, metavar="S")

    _graph_args(command("graph", cmd_graph, table_graph, "ops and tensors of one training iteration"))
    _plan_args(command("plan", cmd_plan, table_plan, "compile a policy's plan and simulate it"))
    p = command("simulate", cmd_simulate, table_simulate, "simulate a plan and save it as a session file")
    _plan_args(p)
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="session file to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="a note kept in the session (repeatable)")

    p = command("info", cmd_info, table_info, "show a session file: config, environment, summary, notes")
    p.add_argument("file", type=Path, metavar="FILE")

    p = command("calibrate", cmd_calibrate, table_calibrate,
                "fit the simulator's cost model to a measured session and store it in the session")
    p.add_argument("file", type=Path, metavar="FILE", help="a measured session")
    p.add_argument("--device", type=Path, metavar="DEVICE",
                   help="the same model's measured device session (needed for a paging FILE)")
    p.add_argument("--out", type=Path, required=True, metavar="OUT", help="where to write FILE with its cost model")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists (OUT may be FILE itself)")

    p = command("compare", cmd_compare, table_compare, "compare two session files side by side (B/A)")
    p.add_argument("a", type=Path, metavar="A")
    p.add_argument("b", type=Path, metavar="B")
    p.add_argument("--top", type=int, default=20, metavar="N",
                   help="table: show the N largest per-op changes (0: all; json has all)")

    p = command("export", cmd_export, table_export,
                "export a session as a standalone HTML page or a Chrome trace", formats=False)
    p.add_argument("file", type=Path, metavar="FILE")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--html", type=Path, metavar="OUT", help="standalone HTML page (no server needed)")
    out.add_argument("--chrome-trace", type=Path, metavar="OUT", help="trace-event JSON for Perfetto")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")

    p = command("run", cmd_run, table_simulate, "run a plan on the GPU and save the measured session")
    _plan_args(p)
    p.add_argument("--iterations", type=int, default=5, metavar="N", help="iterations timed (default 5)")
    p.add_argument("--warmup", type=int, default=1, metavar="N", help="iterations run first, not recorded")
    p.add_argument("--counted", type=int, default=1, metavar="N",
                   help="iterations run after the timed ones with CUPTI's unified-memory counters on, which "
                        "slow paging (default 1); 0 counts in every iteration, the timed ones included")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the synthetic batch")
    p.add_argument("--no-tf32", action="store_true", help="full fp32 convolutions and matmuls")
    p.add_argument("--autotune", action="store_true",
                   help="time every cuDNN plan once per shape and keep the fastest (like cudnn.benchmark)")
    p.add_argument("--progress", action="store_true", help="print each iteration's loss on stderr")
    p.add_argument("--no-collectors", action="store_true", help="record without CUPTI and NVML")
    p.add_argument("--collectors", default="kernels,migrations,faults,memcpy,nvml", metavar="PARTS",
                   help="what to collect, comma-separated (default: all): kernels, migrations (bytes each way), "
                        "faults (GPU page-fault records), memcpy (explicit copies), nvml; counting unified "
                        "memory (migrations, faults) is what slows a paging run")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="session file to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="a note kept in the session (repeatable)")
    return parser


def _graph_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, choices=list(MODELS), metavar="MODEL",
                   help=f"one of: {', '.join(MODELS)}")
    p.add_argument("--batch", type=int, required=True, help="batch size")
    p.add_argument("--image-size", type=int, default=DEFAULT_IMAGE_SIZE, metavar="S",
                   help=f"square input images of S pixels (default {DEFAULT_IMAGE_SIZE})")


def _plan_args(p: argparse.ArgumentParser) -> None:
    from .policies import POLICIES

    _graph_args(p)
    p.add_argument("--capacity", required=True, metavar="C",
                   help="emulated device memory: bytes, a size such as 4GiB, or a share such as 50%% "
                        "of the footprint")
    p.add_argument("--policy", required=True, choices=list(POLICIES), metavar="P",
                   help="; ".join(f"{n}: {s.summary}" for n, s in POLICIES.items()).replace("%", "%%"))
    p.add_argument("--moves", type=Path, metavar="FILE",
                   help='manual plan, JSON {"moves": [{"tensor", "offload_after", "prefetch_after"}]} '
                        "(--policy manual)")
    group = p.add_argument_group("policy options (each belongs to the policy named in its help)")
    seen: set[str] = set()
    for policy, spec in POLICIES.items():
        for name, opt in spec.options.items():
            if name in seen:  # shared by several policies: one flag, checked against --policy later
                continue
            seen.add(name)
            text = f"[{policy}] {opt.help} (default {opt.default})".replace("%", "%%")
            if opt.type is bool:
                group.add_argument(_flag(name), dest=_OPTION_DEST + name, default=argparse.SUPPRESS,
                                   action=argparse.BooleanOptionalAction, help=text)
            else:
                group.add_argument(_flag(name), dest=_OPTION_DEST + name, default=argparse.SUPPRESS,
                                   type=opt.type, choices=getattr(opt, "choices", None) or None,
                                   metavar=opt.type.__name__.upper(), help=text)


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


# --- output and errors ----------------------------------------------------------------------------
def _emit(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if getattr(args, "format", "table") == "json":
        text = json.dumps(doc, sort_keys=True, indent=2, default=_json_default, allow_nan=False)
    elif args.command == "compare":
        text = table_compare(doc, args.top)
    else:
        text = args.table(doc)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()  # a closed pipe should fail here, inside main's handler, not at exit


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _note(message: str) -> None:
    print(f"vmexplorer: note: {message}", file=sys.stderr)


def _user_errors() -> tuple[type[BaseException], ...]:
    """The project's error classes: each means bad input, told in its message, not a bug."""
    from .engine.gpu import NoGPU
    from .engine.memory import ResourceError
    from .layers import GraphError
    from .plan import PlanError

    found: list[type[BaseException]] = [UsageError, GraphError, PlanError, OSError, NoGPU, ResourceError,
                                        RunFailed]
    for module, name in (("session", "SessionError"), ("fileio", "OutputError")):
        try:
            found.append(getattr(__import__(f"vmexplorer.{module}", fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(found)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) if str(error) else type(error).__name__
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    return text


def _quiet_stdout() -> None:
    # Python flushes stdout again at exit and would report the closed pipe a second time
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 1 stdout closed early, 2 bad usage or input)."""
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} "
                             f"(see `vmexplorer {args.command} --help`)")
        _emit(args, args.run(args))
        return EXIT_OK
    except SystemExit as e:  # --help and --version print and exit on their own
        return e.code if isinstance(e.code, int) else EXIT_OK
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE_CLOSED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except _user_errors() as e:
        print(f"vmexplorer: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
