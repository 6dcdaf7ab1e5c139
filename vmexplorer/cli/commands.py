"""The headless commands: each `cmd_*` takes the parsed arguments and returns the JSON document its table
shows; the steps they share (a plan from the arguments, sessions loaded, files refused before the work)."""

from __future__ import annotations

import os
import sys

from . import UsageError, _note
from .tables import _SWAP_TRANSFER_RATES, _TRANSFER_RATES, _config_line, _flag

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import Any

    from ..graph import Graph
    from ..plan import Plan
    from ..session import Session
    from ..session.planned import Planned
    from ..simulator import CostModel

_OPTION_DEST = "policy_option_"  # argparse dest prefix of policy options, so they cannot clash


def cmd_models(args: argparse.Namespace) -> dict[str, Any]:
    from ..graph import MODELS, GraphError, build_graph

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
    return graph_doc(_graph(args))


def _graph(args: argparse.Namespace) -> Graph:
    """The graph of `--model` or of `--model-file` (an ONNX file) at `--batch` and `--image-size`."""
    from ..graph import DEFAULT_IMAGE_SIZE, build_graph, import_onnx

    if getattr(args, "model_file", None) is not None:
        return import_onnx(args.model_file, args.batch, args.image_size)
    return build_graph(args.model, args.batch, DEFAULT_IMAGE_SIZE if args.image_size is None else args.image_size)


def cmd_plan(args: argparse.Namespace) -> dict[str, Any]:
    planned = _compile(args)
    session = planned.simulated()
    # the session's graph is the one the plan runs: a recomputing plan's memory operations are numbered
    # among its re-runs, and named from it
    doc = plan_doc(session.graph, session.plan, summary_of(session), planned.cost_model.name)
    return {**doc, "cost_model_gpu": cost_model_gpu(planned.cost_model), "bound": _bound_json(planned),
            "notes": list(planned.reports)}


def summary_of(session: Session) -> dict[str, Any]:
    """The session's summary with where its typical iteration went, part by part (`records.breakdown`:
    `compute_ns`, `recompute_ns`, `fault_wait_ns`, `transfer_wait_ns`, `idle_ns`, adding up to
    `iteration_ns`): the parts the app's bars stack."""
    from ..records.breakdown import PARTS

    split = session.time_split()
    return {**session.summary, **{key: getattr(split, key) for key, _ in PARTS}}


def cmd_simulate(args: argparse.Namespace) -> dict[str, Any]:
    from ..session import save_session

    _refuse_existing(args.out, args.force)  # before the work, not after it
    planned = _compile(args)
    session = planned.simulated(notes=args.note)
    save_session(session, args.out, force=args.force)
    return {"path": str(args.out), "config": _config(session.plan), "cost_model": planned.cost_model.name,
            "cost_model_gpu": cost_model_gpu(planned.cost_model), "summary": summary_of(session),
            "bound": _bound_json(planned), "notes": list(planned.reports)}


def _bound_json(planned: Any) -> dict[str, Any]:
    # a plan was made, so the capacity holds the largest op's working set: there is a bound
    bound = planned.bound
    assert bound is not None
    result: dict[str, Any] = bound.as_json()
    return result


def _cost_session(value: str | Path | None) -> Any:
    """What `--cost-model` names: a named model's name (`h200`, a str), the measured session FILE names with
    its calibrated model, or None without one."""
    from pathlib import Path

    from ..simulator.named import GPUS

    if value is None:
        return None
    if isinstance(value, str) and value in GPUS:
        return value
    path = Path(value)
    session = _load(path)
    if session.timeline.source != "measured" or session.cost_model is None:
        what = "a measured session with no cost model" if session.cost_model is None else "a simulated session"
        raise UsageError(f"--cost-model {path}: {what}; it takes a measured session with a calibrated cost model "
                         f"(`vmexplorer calibrate MEASURED --device DEVICE --out FILE` stores one), or the name "
                         f"of one shipped with vmexplorer ({', '.join(GPUS)})")
    return session


def _cost_model(given: Any, graph: Graph, path: Any) -> CostModel:
    """The uncalibrated default, a named model (`--cost-model h200`: its samples' model of this graph, else
    its rates), or the model calibrated on a measured session (`--cost-model FILE`): that GPU's rates, and
    its op times where FILE ran this graph (an op time of another model or batch would be another op's, so
    for another graph they are left out, with a note)."""
    import dataclasses

    from ..simulator import H100_DEFAULT
    from ..simulator.named import calibrated_graphs, named_cost_model

    if given is None:
        return H100_DEFAULT
    if isinstance(given, str):
        if graph.key not in calibrated_graphs(given):
            ran = ", ".join(f"{m} batch {b}" for m, b, _ in calibrated_graphs(given))
            _note(f"--cost-model {given}: its samples ran {ran}, not this graph: its transfer rates are used, and "
                  "this graph's op times come from the default compute rates")
        return named_cost_model(given, graph)
    cost: CostModel = given.cost_model
    if given.graph.key == graph.key:
        return cost
    _note(f"--cost-model {path} was calibrated on {given.graph.model} batch {given.graph.batch} at "
          f"{given.graph.image_size}px: its transfer rates are used, and this graph's op times come from the "
          "default compute rates")
    return dataclasses.replace(cost, name=f"{cost.name}, its rates only", op_ns={}, op_gap_ns={}, workspace_ns={})


def _judging_model(given: Any, graph: Graph, gpu: Any) -> CostModel | None:
    """The `--cost-model` that judges a run of `graph` on `gpu`: one of this GPU and graph (another GPU's or
    graph's planned it, no more), else None."""
    from ..simulator.named import calibrated_graphs, gpu_of_name, named_cost_model

    if isinstance(given, str):
        ran = graph.key in calibrated_graphs(given) and gpu_of_name(given) == gpu
        return named_cost_model(given, graph) if ran else None
    same = given is not None and given.graph.key == graph.key and given.environment.get("gpu") == gpu
    return given.cost_model if same else None


def cost_model_gpu(cost: CostModel) -> str:
    """The GPU a cost model describes, in words: the default says it is an uncalibrated H100's."""
    from ..simulator import H100_DEFAULT
    from ..simulator.named import DEFAULT_GPU, GPUS

    if cost.name == H100_DEFAULT.name:
        return DEFAULT_GPU
    name = cost.name.split(":", 1)[0]
    return f"the {GPUS[name]}, calibrated on its samples" if name in GPUS else "calibrated on a measured session"


def cmd_info(args: argparse.Namespace) -> dict[str, Any]:
    from ..session import bound_for
    from ..simulator import H100_DEFAULT

    session = _load(args.file)
    cost = session.cost_model
    # a measured session is judged by its own GPU's model: with none, it has no bound (another GPU's model
    # would put one above a faster GPU's measurement)
    unjudged = session.timeline.source == "measured" and cost is None
    # a file from before the bound (schema 6 and older) has none stored: it is worked out here, the same way
    bound = session.bound or (None if unjudged else bound_for(session.graph, session.plan, cost))
    return {"path": str(args.file), "config": _config(session.plan), "created": session.created,
            "cost_model": getattr(cost, "name", None), "environment": session.environment,
            "notes": list(session.notes), "summary": summary_of(session),
            "bound": None if bound is None else bound.as_json(), "bound_stored": session.bound is not None,
            "bound_cost_model": None if unjudged else (cost or H100_DEFAULT).name,
            "room_bytes": session.plan.planned_with, "device_memory": _device_memory(session)}


def _device_memory(session: Session) -> dict[str, Any] | None:
    """What a measured run took of the GPU's memory, with the figures people read first worked out."""
    m = session.device_memory
    if m is None:
        return None
    capacity = session.plan.capacity
    return {**m.as_json(), "taken_bytes": m.taken_bytes, "over_capacity_bytes": m.over(capacity),
            "line": m.describe(capacity)}


def cmd_calibrate(args: argparse.Namespace) -> dict[str, Any]:
    import dataclasses

    import numpy as np

    from ..plan.pool import executed_graph
    from ..session import bound_for, save_session, timing_graph
    from ..simulator import H100_DEFAULT, calibrate, simulate
    from ..simulator.workspaces import workspace_ns

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
    table = _plan_table(args.conv_plans, session.graph) if args.conv_plans is not None else None
    if base is not None and table is not None:  # the op times are DEVICE's, measured in its workspaces
        base = dataclasses.replace(base, workspace_ns=workspace_ns(executed_graph(device.graph, device.plan), table))
    cost = calibrate(session.graph, session.plan, session.timeline, **({"base": base} if base else {}),
                     name=f"calibrated on {args.file.name}" + (f" and {args.device.name}" if base else ""))
    if base is None and table is not None:
        cost = dataclasses.replace(cost, workspace_ns=workspace_ns(executed_graph(session.graph, session.plan), table))
    bound = bound_for(session.graph, session.plan, cost)  # the new rates' bound, not the one made with the old
    save_session(dataclasses.replace(session, cost_model=cost, bound=bound), args.out, force=True)
    measured = round(float(np.median(session.timeline.timed_ns())))
    predicted = round(float(np.median(simulate(session.graph, session.plan, cost,
                                               timing_graph(session.graph, session.plan, cost)).iteration_ns())))
    return {"path": str(args.out), "config": _config(session.plan), "cost_model": cost.name,
            "rates": {**{k: getattr(cost, k) for k in (*_TRANSFER_RATES, *_SWAP_TRANSFER_RATES)},
                      "fault_bytes_per_ns_by_kind": dict(cost.fault_bytes_per_ns_by_kind)},
            "not_fitted": _not_fitted(session.plan, cost, base or H100_DEFAULT),
            "ops_timed": len(cost.op_ns), "ops_timed_by_workspace": len(cost.workspace_ns),
            "measured_iteration_ns": measured,
            "simulated_iteration_ns": predicted, "bound": None if bound is None else bound.as_json()}


MAX_PLANS_FILE_BYTES = 64 << 20  # a table of every plan of a model's convolutions is well under 1 MiB


def _plan_table(path: Path, graph: Any) -> list[dict[str, Any]]:
    """The timed plans of `graph`'s convolutions in a `--conv-plans` file; UsageError saying what is wrong."""
    import json

    from ..simulator.workspaces import plan_table
    from ..units import quoted

    name = quoted(str(path))
    try:
        if path.stat().st_size > MAX_PLANS_FILE_BYTES:
            raise UsageError(f"--conv-plans {name} is over {MAX_PLANS_FILE_BYTES >> 20} MiB: not a table of plans")
        with open(path, encoding="utf-8") as f:
            doc = json.loads(f.read(MAX_PLANS_FILE_BYTES + 1))
    except OSError as e:
        raise UsageError(f"--conv-plans {name} cannot be read: {e.strerror or type(e).__name__}") from None
    except ValueError as e:  # not UTF-8, or not JSON
        raise UsageError(f"--conv-plans {name} cannot be read as JSON: {type(e).__name__}") from None
    try:
        return plan_table(doc, graph)
    except ValueError as e:
        raise UsageError(f"--conv-plans {name} {e}") from None


def _not_fitted(plan: Plan, cost: Any, base: Any) -> list[str]:
    """The transfer rates calibration left as they were: all of them for a run that moved nothing
    (a device run), else those its memory operations gave no measurement of."""
    from ..plan import Mechanism, Mode

    if not any(m.nbytes for m in plan.memops):
        return list(_TRANSFER_RATES) + (list(_SWAP_TRANSFER_RATES) if plan.mechanism is Mechanism.SWAP else [])
    if plan.mechanism is Mechanism.SWAP:  # its copies fit the swap rates; the uvm ones are the base's
        return list(_TRANSFER_RATES) + [k for k in _SWAP_TRANSFER_RATES if getattr(cost, k) == getattr(base, k)]
    # host blocking is fitted on a grid whose points include the default, so equality says nothing
    kept = [k for k in _TRANSFER_RATES[:3] if getattr(cost, k) == getattr(base, k)]
    return kept + ([] if any(m.mode is Mode.ASYNC for m in plan.memops) else ["host_block"])


MAX_COMPARED = 26  # sessions: A to Z


def cmd_compare(args: argparse.Namespace) -> dict[str, Any]:
    """Any number of sessions (two or more) against the first: `sessions`, each summary key's `values` and
    `ratios` (each later session's over the first's), and the rows' `ns` and `deltas_ns`; `a`, `b`, a key's
    `a`, `b` and `ratio` and a row's `a_ns`, `b_ns` and `delta_ns` are the first two's, as two-session
    scripts read them."""
    if args.top < 0:
        raise UsageError(f"--top takes how many rows to show, 0 for all, not {args.top}")
    files = list(args.files)
    if not 2 <= len(files) <= MAX_COMPARED:
        raise UsageError(f"compare takes 2 to {MAX_COMPARED} session files, not {len(files)}")
    html = getattr(args, "html", None)
    if html is not None:
        _refuse_existing(html, args.force)
    sessions = [_load(path) for path in files]  # the first bad file ends it, named in its one-line error
    summaries = [summary_of(s) for s in sessions]
    keys = sorted(set().union(*summaries))
    summary = {}
    for k in keys:
        values = [s.get(k) for s in summaries]
        ratios = [_ratio(values[0], v) for v in values[1:]]
        summary[k] = {"a": values[0], "b": values[1], "ratio": ratios[0], "values": values, "ratios": ratios}
    from ..session.compare import align_many

    aligned_by, aligned = align_many(sessions)
    rows = [{"name": r["name"], "a_ns": r["ns"][0], "b_ns": r["ns"][1], "delta_ns": r["deltas_ns"][0],
             "ns": r["ns"], "deltas_ns": r["deltas_ns"]} for r in aligned]  # the documented JSON shape
    described = [{"path": str(path), "config": _config(s.plan)} for path, s in zip(files, sessions)]
    if html is not None:
        from ..plots.export import compare_html  # Bokeh: a second of imports the table has no use for

        compare_html(sessions, [chr(ord("A") + i) for i in range(len(sessions))], html, force=args.force)
    return {"a": described[0], "b": described[1], "sessions": described,
            "summary": summary, "aligned_by": aligned_by, "rows": rows,
            **({"html": str(html)} if html is not None else {})}


def cmd_export(args: argparse.Namespace) -> dict[str, Any]:
    kind, out = ("html", args.html) if args.html is not None else ("chrome_trace", args.chrome_trace)
    _refuse_existing(out, args.force)
    session = _load(args.file)
    if kind == "html":
        from ..plots.export import export_html  # Bokeh: a second of imports a trace has no use for

        export_html(session, out, force=args.force)
    else:
        from ..session.trace import export_chrome_trace

        export_chrome_trace(session, out, force=args.force)
    return {"path": str(out), "format": kind, "source": str(args.file)}


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from ..engine.executor import RunSettings, execute, measured_session
    from ..engine.gpu import cupy
    from ..session.files import iterations_that_fit, save_session

    if args.iterations < 1 or args.warmup < 0 or args.counted < 0:
        raise UsageError("--iterations must be at least 1, and --warmup and --counted at least 0")
    parts = _collector_parts(args.collectors)
    _refuse_existing(args.out, args.force)
    capacity_of(args.capacity, _graph(args))  # bad input before "no GPU"
    cupy()  # says plainly when there is no GPU, before `tuned` searches for seconds or anything is allocated
    given = _cost_session(getattr(args, "cost_model", None))
    planned = _compile(args, given)
    graph, plan, reports = planned.graph, planned.plan, planned.reports
    fit = iterations_that_fit(graph, plan)
    if args.iterations + args.counted > fit:  # refused before the GPU works, not when its session is saved
        raise UsageError(f"{args.iterations} iterations (and {args.counted} counted) of this plan would not fit "
                         f"in one session: at most {fit} in all")
    settings = RunSettings(iterations=args.iterations, warmup=args.warmup, seed=args.seed,
                           allow_tf32=not args.no_tf32, autotune=args.autotune, collect=not args.no_collectors,
                           collectors=parts, counted=args.counted, discard=args.dead_pages == "discard")
    progress = (lambda i, n, loss: print(f"iteration {i}/{n}: loss {loss:.4f}", file=sys.stderr)) \
        if args.progress else None
    try:
        result = execute(graph, plan, settings, progress=progress)
    except (UsageError, OSError):
        raise
    except Exception as e:  # a CUDA or cuDNN failure is the run's, reported in one line
        raise RunFailed(f"the GPU run failed: {type(e).__name__}: {e}") from None
    own = _judging_model(given, graph, result.environment.get("gpu"))
    session = measured_session(graph, plan, result, cost_model=own, notes=(
        "fault bytes per op are the plan's; measured faults come with the CUPTI collector", *reports, *args.note))
    save_session(session, args.out, force=args.force)
    return {"path": str(args.out), "config": _config(session.plan), "summary": summary_of(session),
            "bound": None if session.bound is None else session.bound.as_json(), "notes": list(reports)}


def _collector_parts(text: str | None) -> tuple[str, ...]:
    from ..engine.executor import COLLECTOR_PARTS

    if text is None:  # the default: every part
        return COLLECTOR_PARTS
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in parts if p not in COLLECTOR_PARTS]
    if unknown or not parts:
        raise UsageError(f"--collectors takes a comma-separated list of {', '.join(COLLECTOR_PARTS)}, not {text!r}")
    return parts


class RunFailed(RuntimeError):
    """The GPU run itself failed (CUDA, cuDNN): nothing was written."""


def _compile(args: argparse.Namespace, measured: Any = None) -> Planned:
    """The policy's plan of the arguments' configuration (`session.planned.plan_for`) under the cost model
    it is simulated with (`--cost-model`'s, or the default): a policy that searches in the simulator
    (`tuned`) searches with that same model, so the plan it keeps is the one the simulation shows best."""
    from ..config import Config, Mechanism
    from ..session.planned import plan_for
    from ..units import format_bytes

    path = getattr(args, "cost_model", None)
    measured = measured or _cost_session(path)  # a bad file is refused before the work
    graph = _graph(args)
    capacity = capacity_of(args.capacity, graph)
    moves, steps = _read_moves(graph, args.moves) if args.moves is not None else ([], [])
    config = Config(graph.model, graph.batch, graph.image_size, capacity, args.policy, _policy_options(args),
                    Mechanism(args.mechanism), definition=graph.definition)
    planned = plan_for(config, _cost_model(measured, graph, path), moves, graph=graph, recomputes=steps)
    if args.policy == "manual" and args.moves is None:
        _note("--policy manual without --moves has no moves to plan: the plan is what uvm gives (demand "
              "faults, LRU eviction); give your moves with --moves FILE")
    if capacity >= graph.footprint:
        _note(f"capacity {format_bytes(capacity)} holds the whole footprint of "
              f"{format_bytes(graph.footprint)}: nothing will page")
    return planned


def capacity_of(text: str, graph: Graph) -> int:
    """`--capacity`'s bytes for `graph`; UsageError for what is not a size, and for a bare number (no unit)
    below the least capacity the graph runs in: most likely a share typed without its `%`."""
    import re

    from ..units import format_bytes, parse_bytes

    try:
        capacity = parse_bytes(text, graph.footprint)
    except ValueError as e:
        raise UsageError(str(e)) from None
    need, _ = graph.min_capacity
    if capacity < need and re.fullmatch(r"\s*[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\s*", str(text)):
        bare = str(text).strip()  # digits, a point and an exponent only: nothing to escape
        asked = f"{capacity} bytes? did you mean {bare}%?" if 0 < float(bare) <= 1000 else \
            f"{capacity} bytes is too few:"
        raise UsageError(f"--capacity {bare}: {asked} {graph.model} batch {graph.batch} at {graph.image_size}px needs "
                         f"at least {format_bytes(need)} ({need} bytes, {100 * need / graph.footprint:.1f}% of its "
                         "footprint); give a share (50%) or a size with its unit (4GiB)")
    return capacity


def _policy_options(args: argparse.Namespace) -> dict[str, Any]:
    from ..policies import POLICIES

    given = {k[len(_OPTION_DEST):]: v for k, v in vars(args).items() if k.startswith(_OPTION_DEST)}
    for name in given:
        if name not in POLICIES[args.policy].options:
            owners = [p for p, spec in POLICIES.items() if name in spec.options]
            raise UsageError(f"{_flag(name)} is an option of {' and '.join(owners)}, not of {args.policy}")
    return given


def _read_moves(graph: Graph, path: Path) -> tuple[list[Any], list[Any]]:
    import stat

    from ..plan import PlanError
    from ..plan.moves import MAX_MOVES_FILE_BYTES, parse_moves
    from ..units import format_bytes

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
    from ..session import load_session

    return load_session(path)


def _refuse_existing(path: Path, force: bool) -> None:
    # the writer checks again as it writes; this check comes before the work, so none is wasted
    from ..fileio import refuse_unless_replaceable

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
    # the moves and recomputes in load_moves' format, so `jq '.plan | {moves, recomputes}'` gives a file
    # for --moves: the recomputes named in the graph without re-runs, the moves in the one with them
    moves = [{"tensor": tnames[mv.tensor], "offload_after": _op_ref(graph, mv.offload_after),
              "prefetch_after": None if mv.prefetch_after is None else _op_ref(graph, mv.prefetch_after)}
             for mv in plan.moves]
    plain = (graph.full or graph).plain or graph
    recomputes = [{"tensor": plain.tensors[step.tensor].name, "before": plain.ops[step.before].name}
                  for step in plan.recomputes]
    resident = [{"tensor": tnames[t], "nbytes": nbytes} for t, nbytes in plan.resident_at_start]
    return {"config": _config(plan), "cost_model": cost_model, "summary": summary,
            "plan": {"peak_resident_bytes": plan.peak_resident, "room_bytes": plan.planned_with,
                     "resident_at_start": resident,
                     "memops": memops, "moves": moves, "recomputes": recomputes}}


def _config(plan: Plan) -> dict[str, Any]:
    return plan.config.as_json()


def _op_name(graph: Graph, index: int) -> str | None:
    # the iteration's start (-1) and end (len(ops)) are not ops
    return graph.ops[index].name if 0 <= index < len(graph.ops) else None


def _op_ref(graph: Graph, index: int) -> str | int:
    name = _op_name(graph, index)
    return index if name is None else name  # load_moves takes -1 for "at the iteration start"
