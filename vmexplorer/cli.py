"""The `vmexplorer` command: graphs, plans, simulated sessions, inspection and export, headless; and
`serve`, the web app's server.

Every command prints a table for people or, with `--format json`, one JSON document with sorted keys for
scripts (docs/cli.md gives each shape). Bad input of any kind ends in one line on stderr,
`vmexplorer: error: ...`, and exit status 2, never a traceback; Ctrl-C ends with 130, and a stdout that
is closed (or a pipe whose reader stopped) with 1. Strings from files are shown with their control
characters escaped, as a session someone shared could otherwise drive the terminal.

This module imports nothing at its top that Python has not loaded already (`sys`, `os`): the entry
point imports it before `main` runs, and a Ctrl-C landing in an import there would be a traceback.
Commands import what they need (argparse, the models, Bokeh, sessions, the simulator) themselves,
inside main's handlers, which also keeps `vmexplorer models` fast on a laptop.
"""

from __future__ import annotations

import os
import sys

from . import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterable, Sequence
    from pathlib import Path
    from typing import Any, NoReturn

    from .graph import Graph
    from .plan import Plan
    from .session.planned import Planned
    from .simulator import CostModel

EXIT_OK, EXIT_PIPE_CLOSED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_OPTION_DEST = "policy_option_"  # argparse dest prefix of policy options, so they cannot clash


class UsageError(Exception):
    """Bad arguments or input: reported as one line, exit status 2."""


class StdoutClosed(Exception):
    """stdout is closed (`>&-`): there is nowhere to write the output; exit status 1."""


def _parser_class() -> type[argparse.ArgumentParser]:
    import argparse

    class _Parser(argparse.ArgumentParser):
        # argparse prints the usage block and exits; scripts want one parseable line, and main() decides
        def error(self, message: str) -> NoReturn:
            raise UsageError(f"{message} (see `{self.prog} --help`)")

    return _Parser


# --- commands -------------------------------------------------------------------------------------
def cmd_models(args: argparse.Namespace) -> dict[str, Any]:
    from .graph import MODELS, GraphError, build_graph

    rows, unavailable = [], []
    for name in MODELS:
        try:  # AlexNet cannot take 32 px images while the others can: say so per model
            graph = build_graph(name, args.batch, args.image_size)
        except GraphError as e:
            unavailable.append({"name": name, "reason": str(e)})
            continue
        need, _ = graph.min_capacity
        rows.append({"name": name, "param_count": graph.param_count, "ops": len(graph.ops),
                     "tensors": len(graph.tensors), "footprint_bytes": graph.footprint,
                     "min_capacity_bytes": need})
    if not rows:
        reasons = list(dict.fromkeys(u["reason"] for u in unavailable))
        raise UsageError(reasons[0] if len(reasons) == 1 else
                         f"no model can be built at batch {args.batch} with {args.image_size}px images: "
                         + "; ".join(reasons))
    return {"batch": args.batch, "image_size": args.image_size, "models": rows, "unavailable": unavailable}


def cmd_graph(args: argparse.Namespace) -> dict[str, Any]:
    from .graph import build_graph

    return graph_doc(build_graph(args.model, args.batch, args.image_size))


def cmd_plan(args: argparse.Namespace) -> dict[str, Any]:
    from .records import summarize
    from .simulator import simulate

    planned = _compile(args)
    graph, plan = planned.graph, planned.plan
    timeline = simulate(graph, plan, planned.cost_model)
    doc = plan_doc(graph, plan, summarize(graph, plan, timeline), planned.cost_model.name)
    return {**doc, "bound": _bound_json(planned), "notes": list(planned.reports)}


def cmd_simulate(args: argparse.Namespace) -> dict[str, Any]:
    from .session import save_session

    _refuse_existing(args.out, args.force)  # before the work, not after it
    planned = _compile(args)
    session = planned.simulated(notes=args.note)
    save_session(session, args.out, force=args.force)
    return {"path": str(args.out), "config": _config(session.plan), "cost_model": planned.cost_model.name,
            "summary": session.summary, "bound": _bound_json(planned), "notes": list(planned.reports)}


def _bound_json(planned: Any) -> dict[str, Any]:
    # a plan was made, so the capacity holds the largest op's working set: there is a bound
    bound = planned.bound
    assert bound is not None
    result: dict[str, Any] = bound.as_json()
    return result


def _cost_session(path: Path | None) -> Any:
    """The measured session `--cost-model FILE` names, with its calibrated model, or None without one."""
    if path is None:
        return None
    session = _load(path)
    if session.timeline.source != "measured" or session.cost_model is None:
        what = "a measured session with no cost model" if session.cost_model is None else "a simulated session"
        raise UsageError(f"--cost-model {path}: {what}; it takes a measured session with a calibrated cost model "
                         f"(`vmexplorer calibrate MEASURED --device DEVICE --out FILE` stores one)")
    return session


def _cost_model(session: Any, graph: Graph, path: Path | None) -> CostModel:
    """The uncalibrated default, or the model calibrated on a measured session (`--cost-model FILE`):
    that GPU's rates, and its op times where FILE ran this graph (an op time of another model or batch
    would be another op's, so for another graph they are left out, with a note)."""
    import dataclasses

    from .simulator import H100_DEFAULT

    if session is None:
        return H100_DEFAULT
    cost: CostModel = session.cost_model
    if session.graph.key == graph.key:
        return cost
    _note(f"--cost-model {path} was calibrated on {session.graph.model} batch {session.graph.batch} at "
          f"{session.graph.image_size}px: its transfer rates are used, and this graph's op times come from the "
          "default compute rates")
    return dataclasses.replace(cost, name=f"{cost.name}, its rates only", op_ns={}, op_gap_ns={})


def cmd_info(args: argparse.Namespace) -> dict[str, Any]:
    from .session import bound_for
    from .simulator import H100_DEFAULT

    session = _load(args.file)
    cost = session.cost_model
    # a file from before the bound (schema 6 and older) has none stored: it is worked out here, the same way
    bound = session.bound or bound_for(session.graph, session.plan, cost)
    return {"path": str(args.file), "config": _config(session.plan), "created": session.created,
            "cost_model": getattr(cost, "name", None), "environment": session.environment,
            "notes": list(session.notes), "summary": session.summary,
            "bound": None if bound is None else bound.as_json(), "bound_stored": session.bound is not None,
            "bound_cost_model": (cost or H100_DEFAULT).name}


def cmd_calibrate(args: argparse.Namespace) -> dict[str, Any]:
    import dataclasses

    import numpy as np

    from .session import bound_for, save_session
    from .simulator import H100_DEFAULT, calibrate, simulate

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
    bound = bound_for(session.graph, session.plan, cost)  # the new rates' bound, not the one made with the old
    save_session(dataclasses.replace(session, cost_model=cost, bound=bound), args.out, force=True)
    measured = round(float(np.median(session.timeline.timed_ns())))
    predicted = round(float(np.median(simulate(session.graph, session.plan, cost).iteration_ns())))
    return {"path": str(args.out), "config": _config(session.plan), "cost_model": cost.name,
            "rates": {**{k: getattr(cost, k) for k in (*_TRANSFER_RATES, *_SWAP_TRANSFER_RATES)},
                      "fault_bytes_per_ns_by_kind": dict(cost.fault_bytes_per_ns_by_kind)},
            "not_fitted": _not_fitted(session.plan, cost, base or H100_DEFAULT),
            "ops_timed": len(cost.op_ns), "measured_iteration_ns": measured,
            "simulated_iteration_ns": predicted, "bound": None if bound is None else bound.as_json()}


_TRANSFER_RATES = ("prefetch_bytes_per_ns", "evict_bytes_per_ns", "fault_bytes_per_ns", "host_block")
_SWAP_TRANSFER_RATES = ("swap_to_device_bytes_per_ns", "swap_to_host_bytes_per_ns")


def _not_fitted(plan: Plan, cost: Any, base: Any) -> list[str]:
    """The transfer rates calibration left as they were: all of them for a run that moved nothing
    (a device run), else those its memory operations gave no measurement of."""
    from .plan import Mechanism, Mode

    if not any(m.nbytes for m in plan.memops):
        return list(_TRANSFER_RATES) + (list(_SWAP_TRANSFER_RATES) if plan.mechanism is Mechanism.SWAP else [])
    if plan.mechanism is Mechanism.SWAP:  # its copies fit the swap rates; the uvm ones are the base's
        return list(_TRANSFER_RATES) + [k for k in _SWAP_TRANSFER_RATES if getattr(cost, k) == getattr(base, k)]
    # host blocking is fitted on a grid whose points include the default, so equality says nothing
    kept = [k for k in _TRANSFER_RATES[:3] if getattr(cost, k) == getattr(base, k)]
    return kept + ([] if any(m.mode is Mode.ASYNC for m in plan.memops) else ["host_block"])


def table_calibrate(doc: dict[str, Any]) -> str:
    from .simulator.costmodel import fault_rates_by_kind_text

    r, kept = doc["rates"], set(doc["not_fitted"])
    kinds = fault_rates_by_kind_text(r["fault_bytes_per_ns_by_kind"])

    def rate(key: str, text: str) -> str:
        return text + (" (the default: not fitted)" if key in kept else "")

    swap = doc["config"].get("mechanism") == "swap"
    if kept >= set(_TRANSFER_RATES) | (set(_SWAP_TRANSFER_RATES) if swap else set()):
        rates = ("its transfer rates are the defaults, not fitted: the run moved nothing" if swap else
                 "its prefetch, eviction, demand-fault and host-blocking rates are the defaults, not fitted: "
                 "the run moved nothing")
    elif swap:  # its copies' rates (the uvm ones stay the base's)
        into, out = r["swap_to_device_bytes_per_ns"], r["swap_to_host_bytes_per_ns"]
        rates = ", ".join([rate("swap_to_device_bytes_per_ns", f"copies in {into:.1f} GB/s"),
                           rate("swap_to_host_bytes_per_ns", f"copies out {out:.1f} GB/s")])
    else:
        rates = ", ".join([rate("prefetch_bytes_per_ns", f"prefetch {r['prefetch_bytes_per_ns']:.1f} GB/s"),
                           rate("evict_bytes_per_ns", f"eviction {r['evict_bytes_per_ns']:.1f} GB/s"),
                           rate("fault_bytes_per_ns", f"demand faults {r['fault_bytes_per_ns']:.1f} GB/s"
                                + (f" (by op kind: {kinds})" if kinds else "")),
                           rate("host_block", f"host blocking {r['host_block']:.2f}")])
    text = (f"wrote {_safe(doc['path'])} with the cost model {_safe(repr(doc['cost_model']))}: "
            f"{doc['ops_timed']} op times; {rates}; "
            f"it simulates the session's own plan in {doc['simulated_iteration_ns'] / 1e6:.1f} ms per iteration "
            f"(measured {doc['measured_iteration_ns'] / 1e6:.1f} ms)")
    if doc.get("bound") is None:
        return text
    return f"{text}\n{_bound_line(doc['bound'], doc['measured_iteration_ns'], 'measured')} under its new rates"


def cmd_compare(args: argparse.Namespace) -> dict[str, Any]:
    if args.top < 0:
        raise UsageError(f"--top takes how many rows to show, 0 for all, not {args.top}")
    a, b = _load(args.a), _load(args.b)
    sa, sb = a.summary, b.summary  # a property that recomputes: take it once
    summary = {k: {"a": sa.get(k), "b": sb.get(k), "ratio": _ratio(sa.get(k), sb.get(k))}
               for k in sorted(set(sa) | set(sb))}
    from .session.compare import align_op_times

    aligned_by, aligned = align_op_times(a, b)
    rows = [{k: v for k, v in row.items() if k != "op"} for row in aligned]  # the documented JSON shape
    return {"a": {"path": str(args.a), "config": _config(a.plan)},
            "b": {"path": str(args.b), "config": _config(b.plan)},
            "summary": summary, "aligned_by": aligned_by, "rows": rows}


def cmd_export(args: argparse.Namespace) -> dict[str, Any]:
    from .plots.export import export_html
    from .session.trace import export_chrome_trace

    kind, out = ("html", args.html) if args.html is not None else ("chrome_trace", args.chrome_trace)
    _refuse_existing(out, args.force)
    session = _load(args.file)
    (export_html if kind == "html" else export_chrome_trace)(session, out, force=args.force)
    return {"path": str(out), "format": kind, "source": str(args.file)}


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from .engine.executor import RunSettings, execute, measured_session
    from .engine.gpu import cupy
    from .session.files import iterations_that_fit, save_session

    if args.iterations < 1 or args.warmup < 0 or args.counted < 0:
        raise UsageError("--iterations must be at least 1, and --warmup and --counted at least 0")
    parts = _collector_parts(args.collectors)
    _refuse_existing(args.out, args.force)
    cupy()  # says plainly when there is no GPU, before `tuned` searches for seconds or anything is allocated
    planned = _compile(args)
    graph, plan, reports = planned.graph, planned.plan, planned.reports
    fit = iterations_that_fit(graph, plan)
    if args.iterations + args.counted > fit:  # refused before the GPU works, not when its session is saved
        raise UsageError(f"{args.iterations} iterations (and {args.counted} counted) of this plan would not fit "
                         f"in one session: at most {fit} in all")
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
        "fault bytes per op are the plan's; measured faults come with the CUPTI collector", *reports, *args.note))
    save_session(session, args.out, force=args.force)
    return {"path": str(args.out), "config": _config(session.plan), "summary": session.summary,
            "bound": None if session.bound is None else session.bound.as_json(), "notes": list(reports)}


def _collector_parts(text: str | None) -> tuple[str, ...]:
    from .engine.executor import COLLECTOR_PARTS

    if text is None:  # the default: every part
        return COLLECTOR_PARTS
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in parts if p not in COLLECTOR_PARTS]
    if unknown or not parts:
        raise UsageError(f"--collectors takes a comma-separated list of {', '.join(COLLECTOR_PARTS)}, not {text!r}")
    return parts


class RunFailed(RuntimeError):
    """The GPU run itself failed (CUDA, cuDNN): nothing was written."""


def cmd_serve(args: argparse.Namespace) -> dict[str, Any]:
    """Serve vmexplorer/app.py as `panel serve` does, with gzip, until Ctrl-C or SIGTERM stops it.

    `panel serve` has no option for HTTP compression, and the app's JavaScript (Bokeh, Panel, Tabulator),
    what a cold page load waits for over a classroom's network, shrinks severalfold gzipped
    (bench/bench_page.py --launcher weighs it). Panel's `pn.serve` hands extra keywords to tornado's
    Application settings, where `compress_response` gzips every text response (the page, scripts,
    stylesheets). `warm` builds one page before listening (as `panel serve --warm`): the first visitor
    does not wait for the imports and the samples read."""
    import signal

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port takes a TCP port from 0 (any free one) to 65535, not {args.port}")
    procs = _serving_processes(args.num_procs)
    ignore_ctrl_c = signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # started in the background
    server = _app_server(args, procs)  # with several processes, each goes on from here on its own
    loop = server.io_loop
    url = f"http://{args.address or 'localhost'}:{server.port}/app"
    first = _task_id() in (None, 0)

    def stop(signum: int, frame: Any) -> None:  # stops between callbacks, never inside one
        loop.asyncio_loop.call_soon_threadsafe(loop.stop)

    # pn.serve set a SIGINT handler of its own; these say the same, for SIGTERM (a service manager) too
    handlers = {signal.SIGINT: signal.SIG_IGN if ignore_ctrl_c else stop, signal.SIGTERM: stop}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        if first:
            many = f", {procs} processes" if procs > 1 else ""
            _write_stdout(f"serving the app at {url} (gzip-compressed{many}); Ctrl-C stops it\n")
        server.start()
        if args.show:
            loop.add_callback(server.show, "/app")
        loop.start()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.stop()
    return {"url": url, "process": _task_id() or 0, "processes": procs}


def _serving_processes(asked: int) -> int:
    """How many server processes `--num-procs` asks for, refused where the processes cannot be had."""
    if asked < 0:
        raise UsageError(f"--num-procs takes 1 or more processes (0: one per CPU core), not {asked}")
    procs = asked or os.cpu_count() or 1
    if procs > 1 and not sys.platform.startswith("linux"):
        raise UsageError("--num-procs above 1 needs Linux (the processes are forked, and each must stop "
                         "when the first one does); serve with one process here")
    return procs


def _task_id() -> int | None:
    from tornado.process import task_id

    return task_id()


def _forked_server_process() -> None:
    """In each forked server process: stop when the process that forked it does (a service manager's
    SIGTERM, or Ctrl-C, reaches that one first), through Linux's parent-death signal."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _app_server(args: argparse.Namespace, procs: int = 1) -> Any:
    """A Bokeh server (Panel's) of the app, listening but not started; with `procs` above 1, forked
    into that many processes after it binds the port, this returning in each of them."""
    from pathlib import Path

    import panel as pn

    app = Path(__file__).with_name("app.py")
    if procs > 1:
        # Bokeh forks only if no page has been built yet (a built page may hold threads and open files,
        # which a fork would copy half-made), so instead of `warm` the app's modules and the samples are
        # read before the fork, shared by the processes until one writes them. Each process makes its
        # own threads (the GPU check, the run queue, the spare page) when its first page asks for them
        import signal

        import vmexplorer.ui.serving  # noqa: F401
        from vmexplorer.session.samples import sample_index

        sample_index()
        os.register_at_fork(after_in_child=_forked_server_process)
        # the first process only waits for the others: Ctrl-C stops them, each on its own, and once all
        # have stopped it ends too, quietly (a SIGTERM to it stops them through the parent-death signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the page (its HTML: the template and where each part goes) is the same for every visitor: render
    # it from one session, and build each visitor's own when the browser connects, after it has loaded
    # the scripts. Built at the request instead, the session's build competes with the browser for the
    # CPU as it starts the page, and holds up the scripts' requests behind it
    pn.config.reuse_sessions = True
    try:
        return pn.serve({"app": str(app)}, port=args.port, address=args.address,
                        websocket_origin=args.allow_websocket_origin, show=False, start=False, verbose=False,
                        warm=procs == 1, num_procs=procs, compress_response=True)
    except OSError as e:
        where = f"{args.address or 'every address'} port {args.port}"
        raise UsageError(f"cannot listen on {where}: {e.strerror or e}") from None
    except ValueError as e:  # a malformed --allow-websocket-origin
        raise UsageError(f"--allow-websocket-origin: {e}") from None


def table_serve(doc: dict[str, Any]) -> str:
    which = f" (process {doc['process'] + 1} of {doc['processes']})" if doc.get("processes", 1) > 1 else ""
    return f"stopped serving {_safe(doc['url'])}{which}"


# --- shared steps ---------------------------------------------------------------------------------
def _compile(args: argparse.Namespace) -> Planned:
    """The policy's plan of the arguments' configuration (`session.planned.plan_for`) under the cost model
    it is simulated with (`--cost-model`'s, or the default): a policy that searches in the simulator
    (`tuned`) searches with that same model, so the plan it keeps is the one the simulation shows best."""
    from .config import Config, Mechanism
    from .graph import build_graph
    from .session.planned import plan_for
    from .units import format_bytes, parse_bytes

    path = getattr(args, "cost_model", None)
    measured = _cost_session(path)  # a bad file is refused before the work
    graph = build_graph(args.model, args.batch, args.image_size)
    try:
        capacity = parse_bytes(args.capacity, graph.footprint)
    except ValueError as e:
        raise UsageError(str(e)) from None
    moves = _read_moves(graph, args.moves) if args.moves is not None else ()
    config = Config(graph.model, graph.batch, graph.image_size, capacity, args.policy, _policy_options(args),
                    Mechanism(args.mechanism))
    planned = plan_for(config, _cost_model(measured, graph, path), moves, graph=graph)
    if args.policy == "manual" and args.moves is None:
        _note("--policy manual without --moves has no moves to plan: the plan is what uvm gives (demand "
              "faults, LRU eviction); give your moves with --moves FILE")
    if capacity >= graph.footprint:
        _note(f"capacity {format_bytes(capacity)} holds the whole footprint of "
              f"{format_bytes(graph.footprint)}: nothing will page")
    return planned


def _policy_options(args: argparse.Namespace) -> dict[str, Any]:
    from .policies import POLICIES

    given = {k[len(_OPTION_DEST):]: v for k, v in vars(args).items() if k.startswith(_OPTION_DEST)}
    for name in given:
        if name not in POLICIES[args.policy].options:
            owners = [p for p, spec in POLICIES.items() if name in spec.options]
            raise UsageError(f"{_flag(name)} is an option of {' and '.join(owners)}, not of {args.policy}")
    return given


def _read_moves(graph: Graph, path: Path) -> list[Any]:
    import stat

    from .plan import PlanError
    from .plan.moves import MAX_MOVES_FILE_BYTES, parse_moves
    from .units import format_bytes

    with open(path, "rb") as f:
        size = os.fstat(f.fileno())
        if stat.S_ISREG(size.st_mode) and size.st_size > MAX_MOVES_FILE_BYTES:  # refused before it is read
            raise UsageError(f"{path}: {size.st_size} bytes is more than a moves file may hold "
                             f"({format_bytes(MAX_MOVES_FILE_BYTES)}); a manual plan of the largest model takes "
                             "well under 1 MiB")
        raw = f.read(MAX_MOVES_FILE_BYTES + 1)  # a pipe has no size: read one byte past the limit at most
    try:
        return parse_moves(graph, raw)
    except PlanError as e:
        raise PlanError(f"{path}: {e}") from None


def _load(path: Path) -> Any:
    from .session import load_session

    return load_session(path)


def _refuse_existing(path: Path, force: bool) -> None:
    # the writer checks again as it writes; this check comes before the work, so none is wasted
    from .fileio import refuse_unless_replaceable

    refuse_unless_replaceable(path, force)


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
    return plan.config.as_json()


def _op_name(graph: Graph, index: int) -> str | None:
    # the iteration's start (-1) and end (len(ops)) are not ops
    return graph.ops[index].name if 0 <= index < len(graph.ops) else None


def _op_ref(graph: Graph, index: int) -> str | int:
    name = _op_name(graph, index)
    return index if name is None else name  # load_moves takes -1 for "at the iteration start"


# --- tables ---------------------------------------------------------------------------------------
# Characters a terminal acts on instead of showing, or that make text read in another order than it
# is stored: C0 and C1 controls (ESC starts sequences that retitle the window or write the clipboard;
# \x9b is a one-byte CSI), DEL, bidi marks, embeddings, overrides and isolates, line and paragraph
# separators, and lone surrogates (which no encoder takes).
_UNSAFE = "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def _safe(text: Any, keep: str = "") -> str:
    """`text` with the characters in _UNSAFE, but those in `keep`, written as escapes (\\x1b, \\u202e)."""
    import re

    def escape(m: re.Match[str]) -> str:
        c = m.group()
        if c in keep:
            return c
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return re.sub(_UNSAFE, escape, str(text))


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
    from .units import format_bytes, format_ns

    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _safe(value)  # a string from a file: a newline or an escape sequence would break the table
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
    from .units import format_bytes

    opts = "".join(f" {_flag(_safe(k))} {_safe(v)}" for k, v in sorted(c["options"].items()))
    return (f"{_safe(c['model'])} batch {c['batch']} at {c['image_size']}px, {_safe(c['policy'])}{opts} "
            f"through {_safe(c.get('mechanism', 'uvm'))}, capacity {format_bytes(c['capacity_bytes'])}")


def table_models(doc: dict[str, Any]) -> str:
    rows = [(m["name"], f"{m['param_count']:,}", m["ops"], m["tensors"], m["footprint_bytes"],
             m["min_capacity_bytes"]) for m in doc["models"]]
    skipped = "".join(f"\nnot at this size: {u['reason']}" for u in doc["unavailable"])
    return (f"models at batch {doc['batch']}, {doc['image_size']}x{doc['image_size']} images\n"
            + _table(("model", "params", "ops", "tensors", "footprint", "min capacity"), rows) + skipped)


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
    from .units import format_bytes

    p = doc["plan"]
    memops = ((m["tensor"], m["nbytes"], m["direction"], m["mode"], m["origin"],
               f"{m['issue_after_op'] or 'start'} ({m['issue_after']})",
               f"{m['complete_before_op'] or 'end'} ({m['complete_before']})") for m in p["memops"])
    head = (f"{_config_line(doc['config'])}; cost model {_safe(doc['cost_model'])}\n"
            f"{len(p['memops'])} memory operations, {len(p['moves'])} planned round trips, "
            f"{len(p['resident_at_start'])} tensors resident at start, "
            f"peak resident {format_bytes(p['peak_resident_bytes'])}\n"
            f"{_bound_line(doc['bound'], doc['summary'].get('iteration_ns'))}"
            + "".join(f"\n{_safe(n)}" for n in doc.get("notes", ())))
    return "\n".join([head, _title("simulated summary"), _pairs(doc["summary"]), _title("memory operations"),
                      _table(("tensor", "bytes", "direction", "mode", "origin", "issue after",
                              "complete before"), memops)])


def table_simulate(doc: dict[str, Any]) -> str:
    from .units import format_ns

    s = doc["summary"]
    text = (f"wrote {_safe(doc['path'])}: {_config_line(doc['config'])}; "
            f"iteration {format_ns(s.get('iteration_ns', 0))} ({_safe(s.get('source', '?'))})")
    if doc.get("bound") is not None:
        text += f"\n{_bound_line(doc['bound'], s.get('iteration_ns'), s.get('source', 'simulated'))}"
    return text + "".join(f"\n{_safe(n)}" for n in doc.get("notes", ()))


def _bound_line(bound: dict[str, Any], iteration_ns: float | None, source: str = "simulated") -> str:
    """The bound for people: "the simulated iteration is 1.4x the bound, set by migration bandwidth (any
    schedule moves at least 3.12 GiB each way and takes at least 469.12 ms)"."""
    from .simulator.bound import Bound
    from .units import format_ns

    b = Bound(**bound)
    head = "bound" if iteration_ns is None else f"the {_safe(source)} iteration is {b.versus(iteration_ns)}"
    return f"{head} (any schedule moves at least {_moved(b)} and takes at least {format_ns(b.lower_bound_ns)})"


def _moved(b: Any) -> str:
    from .units import format_bytes

    out, into = b.min_bytes_to_host, b.min_bytes_to_device
    return f"{format_bytes(out)} each way" if out == into else \
        f"{format_bytes(out)} to the host and {format_bytes(into)} to the device"


def _info_bound_line(doc: dict[str, Any]) -> str:
    """The bound in `info`: "lower bound 469.12 ms, set by migration bandwidth (any schedule moves at least
    3.12 GiB each way, under the cost model 'h100-uncalibrated'); this measured iteration is 1.4x it"."""
    from .simulator.bound import Bound
    from .units import format_ns

    if doc["bound"] is None:
        return "lower bound: none (the capacity is below what any plan needs)"
    b = Bound(**doc["bound"])
    text = (f"lower bound {format_ns(b.lower_bound_ns)}, set by {_safe(b.set_by)} (any schedule moves at least "
            f"{_moved(b)}, under the cost model {_safe(repr(doc['bound_cost_model']))}"
            + ("" if doc["bound_stored"] else "; worked out now, as the file stores none") + ")")
    iteration = doc["summary"].get("iteration_ns")
    if isinstance(iteration, int | float) and b.lower_bound_ns > 0:
        text += f"; this {_safe(doc['summary'].get('source', ''))} iteration is {iteration / b.lower_bound_ns:.1f}x it"
    return text


def table_info(doc: dict[str, Any]) -> str:
    env = doc["environment"] if isinstance(doc["environment"], dict) else {"environment": doc["environment"]}
    notes = "\n".join(f"- {_safe(n)}" for n in doc["notes"]) or "(none)"
    return "\n".join([_safe(doc["path"]), f"{_config_line(doc['config'])}",
                      f"created {_safe(doc['created'])}; cost model {_safe(doc['cost_model'] or '-')}",
                      _info_bound_line(doc), _title("summary"), _pairs(doc["summary"]), _title("environment"),
                      _pairs(env), _title("notes"), notes])


def table_compare(doc: dict[str, Any], top: int) -> str:
    summary = ((k, _cell(k, v["a"]), _cell(k, v["b"]), "-" if v["ratio"] is None else f"{v['ratio']:.3f}")
               for k, v in doc["summary"].items())
    rows = [r for r in doc["rows"] if r["delta_ns"] is not None]
    rows.sort(key=lambda r: -abs(r["delta_ns"]))
    shown = rows if top <= 0 else rows[:top]
    missing = [r["name"] for r in doc["rows"] if r["delta_ns"] is None]
    out = [f"A: {_safe(doc['a']['path'])}: {_config_line(doc['a']['config'])}",
           f"B: {_safe(doc['b']['path'])}: {_config_line(doc['b']['config'])}",
           _title("summary"), _table(("key", "A", "B", "B/A"), summary),
           _title(f"largest per-iteration time changes by {doc['aligned_by']} "
                  f"({len(shown)} of {len(rows)})"),
           _table((doc["aligned_by"], "a_ns", "b_ns", "delta_ns"),
                  ((r["name"], r["a_ns"], r["b_ns"], r["delta_ns"]) for r in shown))]
    if missing:
        out.append(f"\nin only one of them: {', '.join(map(_safe, missing))}")
    return "\n".join(out)


def table_export(doc: dict[str, Any]) -> str:
    return f"wrote {_safe(doc['path'])} ({doc['format'].replace('_', ' ')} of {_safe(doc['source'])})"


# --- the parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from pathlib import Path

    from .graph import DEFAULT_IMAGE_SIZE

    parser = _parser_class()(prog="vmexplorer", description="Profile, simulate and compare GPU unified-memory "
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
    p = command("plan", cmd_plan, table_plan, "compile a policy's plan and simulate it")
    _plan_args(p)
    _cost_model_arg(p)
    p = command("simulate", cmd_simulate, table_simulate, "simulate a plan and save it as a session file")
    _plan_args(p)
    _cost_model_arg(p)
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
    p.add_argument("--cost-model", type=Path, metavar="FILE",
                   help="--policy tuned searches with the cost model calibrated on a measured session FILE (the "
                        "GPU's own rates) instead of the uncalibrated H100 default; the run itself is measured")
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
    p.add_argument("--collectors", metavar="PARTS",
                   help="what to collect, comma-separated (default: all): kernels, migrations (bytes each way), "
                        "faults (GPU page-fault records), memcpy (explicit copies), nvml; counting unified "
                        "memory (migrations, faults) is what slows a paging run")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="session file to write")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="a note kept in the session (repeatable)")

    p = command("serve", cmd_serve, table_serve,
                "serve the web app at http://localhost:PORT/app, gzip-compressed (the app `panel serve "
                "vmexplorer/app.py` serves); Ctrl-C stops it", formats=False)
    _serve_arguments(p)
    return parser


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=5006, metavar="N", help="TCP port (default 5006; 0: any free one)")
    p.add_argument("--address", metavar="A",
                   help="address to listen on (default: every address of this machine, as `panel serve`)")
    p.add_argument("--allow-websocket-origin", action="append", metavar="HOST[:PORT]",
                   help="a host whose pages may connect (repeatable; default localhost:PORT): the name or "
                        "address people type to reach this server, e.g. 10.0.0.5:5006")
    p.add_argument("--show", action="store_true", help="open the app in a browser once it serves")
    p.add_argument("--num-procs", type=int, default=1, metavar="N",
                   help="server processes sharing the port (default 1; 0: one per CPU core; Linux only): a "
                        "class opening the page at once is served by every core, and GPU runs still go one "
                        "at a time")


def _graph_args(p: argparse.ArgumentParser) -> None:
    from .graph import DEFAULT_IMAGE_SIZE, MODELS

    p.add_argument("--model", required=True, choices=list(MODELS), metavar="MODEL",
                   help=f"one of: {', '.join(MODELS)}")
    p.add_argument("--batch", type=int, required=True, help="batch size")
    p.add_argument("--image-size", type=int, default=DEFAULT_IMAGE_SIZE, metavar="S",
                   help=f"square input images of S pixels (default {DEFAULT_IMAGE_SIZE})")


def _plan_args(p: argparse.ArgumentParser) -> None:
    import argparse
    from pathlib import Path

    from .config import Mechanism
    from .plan.moves import MAX_MOVES_FILE_BYTES
    from .policies import POLICIES
    from .units import format_bytes

    _graph_args(p)
    p.add_argument("--capacity", required=True, metavar="C",
                   help="emulated device memory: bytes, a size such as 4GiB, or a share such as 50%% "
                        "of the footprint")
    p.add_argument("--policy", required=True, choices=list(POLICIES), metavar="P",
                   help="; ".join(f"{n}: {s.summary}" for n, s in POLICIES.items()).replace("%", "%%"))
    movers = ", ".join(name for name, spec in POLICIES.items() if not spec.uvm_only)
    p.add_argument("--mechanism", choices=[m.value for m in Mechanism], default=Mechanism.UVM.value,
                   help="how the bytes move: uvm (managed memory: the driver's prefetches, evictions and demand "
                        "faults) or swap (a device pool of the capacity, pinned host memory, copies both ways at "
                        f"once; a missing tensor is copied in before its op); swap takes {movers} "
                        "(default uvm)")
    takers = " or ".join(f"--policy {name}" for name, spec in POLICIES.items() if spec.takes_moves)
    p.add_argument("--moves", type=Path, metavar="FILE",
                   help='manual plan, JSON {"moves": [{"tensor", "offload_after", "prefetch_after"}]} '
                        f"({takers}; at most {format_bytes(MAX_MOVES_FILE_BYTES)})")
    group = p.add_argument_group("policy options (each belongs to the policy named in its help)")
    seen: set[str] = set()
    for policy, spec in POLICIES.items():
        for name, opt in spec.options.items():
            if name in seen:  # shared by several policies: one flag, checked against --policy later
                continue
            seen.add(name)
            choices = f"one of {', '.join(map(str, opt.choices))}; " if opt.choices else ""
            text = f"[{policy}] {opt.help} ({choices}default {opt.default})".replace("%", "%%")
            if opt.type is bool:
                group.add_argument(_flag(name), dest=_OPTION_DEST + name, default=argparse.SUPPRESS,
                                   action=argparse.BooleanOptionalAction, help=text)
            else:  # with choices, argparse's metavar is {needed,all}: the usage line lists them too
                group.add_argument(_flag(name), dest=_OPTION_DEST + name, default=argparse.SUPPRESS,
                                   type=opt.type, choices=opt.choices or None,
                                   metavar=None if opt.choices else opt.type.__name__.upper(), help=text)


def _cost_model_arg(p: argparse.ArgumentParser) -> None:
    from pathlib import Path

    p.add_argument("--cost-model", type=Path, metavar="FILE",
                   help="simulate with the cost model calibrated on a measured session FILE (that GPU's rates; "
                        "`calibrate` stores one) instead of the uncalibrated H100 default; --policy tuned searches "
                        "with it too")


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


# --- output and errors ----------------------------------------------------------------------------
def _emit(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if getattr(args, "format", "table") == "json":
        import json

        # json.dumps escapes every control character (and all non-ASCII): nothing to make safe
        text = json.dumps(doc, sort_keys=True, indent=2, default=_json_default, allow_nan=False)
    elif args.command == "compare":
        text = _safe(table_compare(doc, args.top), keep="\n")
    else:
        text = _safe(args.table(doc), keep="\n")  # the tables escape cells; this is the net under them
    _write_stdout(text + "\n")


def _write_stdout(text: str) -> None:
    """Write all of `text` to stdout, or raise: BrokenPipeError when the reader has gone.

    The bytes go through stdout's binary layer in a loop: unbuffered (PYTHONUNBUFFERED=1) the text layer
    drops the rest of a short write to a pipe whose reader is closing, and the run would end with 0 as
    if everything had been read."""
    stream = sys.stdout
    if stream is None:
        raise StdoutClosed(_STDOUT_CLOSED)
    buffer = getattr(stream, "buffer", None)
    try:
        if buffer is None:  # a text-only stream (io.StringIO): it takes all of it or raises
            stream.write(text)
            stream.flush()
            return
        stream.flush()  # anything printed before goes first
        view = memoryview(text.encode(stream.encoding or "utf-8", "backslashreplace"))
        while view:
            written = buffer.write(view)
            if written is None:  # a non-blocking stdout that is full: wait until it drains
                import select

                select.select([], [buffer], [])
                continue
            view = view[written:]
        buffer.flush()
    except OSError as e:
        import errno

        if e.errno == errno.EBADF:  # the descriptor was closed under Python's stdout
            raise StdoutClosed(_STDOUT_CLOSED) from None
        raise


_STDOUT_CLOSED = "stdout is closed, so there is nowhere to write the output; redirect it to /dev/null to discard it"


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _note(message: str) -> None:
    _stderr(f"vmexplorer: note: {_safe(message)}")


def _stderr(line: str) -> None:
    # stderr can be closed too (2>&-); a message with nowhere to go is dropped, not a second error
    try:
        if sys.stderr is not None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _user_errors() -> tuple[type[BaseException], ...]:
    """The project's error classes: each means bad input, told in its message, not a bug."""
    from .engine.gpu import NoGPU
    from .engine.memory import ResourceError
    from .fileio import OutputError
    from .graph import GraphError
    from .plan import PlanError

    found: list[type[BaseException]] = [UsageError, GraphError, PlanError, OSError, NoGPU, ResourceError,
                                        RunFailed, OutputError]
    try:
        from .session import SessionError

        found.append(SessionError)
    except ImportError:  # NumPy missing: its own error says so
        pass
    return tuple(found)


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    # one line whatever the message holds: wrapped text joined, and a file name's controls escaped
    import re

    return _safe(re.sub(r"[ \t\r\n]+", " ", text).strip())


def _quiet_stdout() -> None:
    # Python flushes stdout again at exit and would report the closed pipe a second time
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status: 0 ok, 1 stdout closed (or its reader gone) before all
    the output was written, 2 bad usage or input, 130 interrupted (Ctrl-C)."""
    restore = None
    try:
        restore = _watch_interrupts()
        return _run(argv)
    except KeyboardInterrupt:  # also one that lands while an error is being reported
        _stderr("vmexplorer: error: interrupted")
        return EXIT_INTERRUPTED
    finally:
        if restore is not None:
            restore()


_interrupted = False


def _watch_interrupts() -> Callable[[], None]:
    """Note each Ctrl-C as well as raising KeyboardInterrupt: an import that catches it turns it into
    another error (NumPy's import says "could not import module datetime"), which is then reported
    as the interruption it was. Returns what puts the previous handler back."""
    global _interrupted
    _interrupted = False
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        global _interrupted
        _interrupted = True
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, interrupt)
    except ValueError:  # not the main thread: only the main thread gets signals anyway
        return lambda: None
    if previous is signal.SIG_IGN:  # started in the background (`cmd &`): Ctrl-C is not ours to take
        signal.signal(signal.SIGINT, previous)
        return lambda: None

    def restore() -> None:
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGINT, previous)

    return restore


def _run(argv: list[str] | None) -> int:
    try:
        if sys.stdout is None:  # `>&-`: refused before any work, as none of it could be reported
            raise StdoutClosed(_STDOUT_CLOSED)
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} "
                             f"(see `vmexplorer {args.command} --help`)")
        _emit(args, args.run(args))
        return EXIT_OK
    except SystemExit as e:  # --help and --version print and exit on their own
        return e.code if isinstance(e.code, int) else EXIT_OK
    except BrokenPipeError:  # the reader stopped early (`| head`): like any Unix tool, no message
        _quiet_stdout()
        return EXIT_PIPE_CLOSED
    except StdoutClosed as e:
        _stderr(f"vmexplorer: error: {_one_line(e)}")
        return EXIT_PIPE_CLOSED
    except Exception as e:
        if _interrupted:  # a Ctrl-C that some import turned into another error
            raise KeyboardInterrupt from None
        if not isinstance(e, _user_errors()):
            raise  # a bug: its traceback is what a report needs
        _stderr(f"vmexplorer: error: {_one_line(e)}")
        return EXIT_USAGE
