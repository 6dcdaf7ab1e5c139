"""A convolution's time by the workspace it runs in, from cuDNN's plans timed on a GPU.

cuDNN's heuristic lists a convolution's plans in its order of preference and the engine runs the first
whose workspace fits the one it has (`engine.gpu`); in less memory that is a slower one, and a VGG-19
convolution in a workspace cut to a stretch of its pool took up to four times as long
(bench/results/h200/workspace_error.md). `bench/gpu/conv_workspaces.py --plans` times every plan of each
convolution problem of a model; here a table of them becomes the cost model's `workspace_ns`: for each
op, the time the heuristic's choice takes at each workspace, as steps beyond the op's measured time in
the workspace it was measured in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..graph import Graph
from ..units import MAX_BYTES

Steps = tuple[tuple[int, float], ...]  # (workspace bytes, ns), ascending bytes; each holds up to the next


def heuristic_steps(plans: Iterable[tuple[int, int, float]]) -> Steps:
    """From a problem's plans as (heuristic index, workspace bytes, ns; NaN: it failed to run), the time of
    the heuristic's choice in each workspace: the first plan in its order that needs no more and runs."""
    ordered = sorted(p for p in plans if not math.isnan(p[2]))
    steps: list[tuple[int, float]] = []
    for limit in sorted({w for _, w, _ in ordered}):
        ns = next(t for _, w, t in ordered if w <= limit)
        if not steps or steps[-1][1] != ns:
            steps.append((limit, ns))
    return tuple(steps)


def held(steps: Steps, workspace_bytes: int) -> float:
    """The steps' value in `workspace_bytes` (below the first step, the first's)."""
    out = steps[0][1]
    for nbytes, ns in steps:
        if nbytes > workspace_bytes:
            break
        out = ns
    return out


def relative(steps: Steps, workspace_bytes: int) -> Steps:
    """The steps less their value in `workspace_bytes`: what an op measured in that workspace takes more
    (or less) in each other."""
    at = held(steps, workspace_bytes)
    return tuple((nbytes, ns - at) for nbytes, ns in steps)


def workspace_ns(graph: Graph, problems: Sequence[Mapping[str, Any]]) -> dict[str, Steps]:
    """The cost model's `workspace_ns` for `graph`'s convolutions, measured in the workspaces `graph` gives
    them (the graph the calibrating run executed), from a table of timed plans: each problem's "ops" (op
    indices) and "plans" (each with "index", "workspace_bytes" and "ms")."""
    ws = graph.workspace_bytes
    by_op: dict[int, list[Steps]] = {}
    for problem in problems:
        steps = heuristic_steps((int(p["index"]), int(p["workspace_bytes"]), float(p["ms"]) * 1e6)
                                for p in problem["plans"])
        for k in problem["ops"] if steps else ():
            if 0 <= k < len(graph.ops):
                by_op.setdefault(k, []).append(steps)
    # a convolution's backward op runs two problems (the data's gradient, then the weights') one after
    # the other in the one workspace: its time is theirs together
    return {graph.ops[k].name: relative(summed(parts), ws[k]) for k, parts in by_op.items()}


def summed(parts: Sequence[Steps]) -> Steps:
    """The steps of problems run one after another in one workspace: at each workspace, their sum."""
    limits = sorted({nbytes for steps in parts for nbytes, _ in steps})
    out: list[tuple[int, float]] = []
    for limit in limits:
        ns = sum(held(steps, limit) for steps in parts)
        if not out or out[-1][1] != ns:
            out.append((limit, ns))
    return tuple(out)


def rebased(table: Mapping[str, Steps], graph: Graph, names: Iterable[str]) -> dict[str, Steps]:
    """`table` with the steps of the ops in `names` (measured again, in the workspaces `graph` gives them)
    made relative to those workspaces."""
    ws = {op.name: ws for op, ws in zip(graph.ops, graph.workspace_bytes)}
    return {name: relative(steps, ws[name]) if name in names and name in ws else tuple(steps)
            for name, steps in table.items()}


MAX_TABLE_PROBLEMS = 10_000  # a model's convolution problems number tens; a file read is held to this
MAX_PROBLEM_PLANS = 1_000  # and a problem's plans, cuDNN's engine configurations, a few dozen
MAX_PLAN_MS = 1e6  # a plan timed at more than 1000 s is a typo or a hostile file


def plan_table(doc: Any, graph: Graph) -> list[dict[str, Any]]:
    """`graph`'s model and batch's problems in a table of timed plans as `bench/gpu/conv_workspaces.py
    --plans` writes it ({"models": [{"model", "batch", "problems": [{"ops", "plans": [{"index",
    "workspace_bytes", "ms"}]}]}]}), checked; ValueError saying what does not fit. The table is untrusted:
    only what is read here is kept, each number in its range."""
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, list):
        raise ValueError('is not a table of timed plans: it has no "models" list')
    entry = next((m for m in models if isinstance(m, dict) and m.get("model") == graph.model
                  and m.get("batch") == graph.batch), None)
    if entry is None:
        raise ValueError(f"holds no plans of {graph.model} batch {graph.batch}")
    problems = entry.get("problems")
    if not isinstance(problems, list) or not 0 < len(problems) <= MAX_TABLE_PROBLEMS:
        raise ValueError(f'has no list of 1 to {MAX_TABLE_PROBLEMS} "problems" for {graph.model} batch {graph.batch}')
    out = []
    for i, problem in enumerate(problems):
        ops = problem.get("ops") if isinstance(problem, dict) else None
        plans = problem.get("plans") if isinstance(problem, dict) else None
        if not isinstance(ops, list) or not all(type(k) is int and 0 <= k < len(graph.ops) for k in ops):
            raise ValueError(f"problem {i + 1}: its \"ops\" should be op indices of {graph.model} "
                             f"(0 to {len(graph.ops) - 1})")
        if not isinstance(plans, list) or not 0 < len(plans) <= MAX_PROBLEM_PLANS:
            raise ValueError(f'problem {i + 1}: it should have a list of 1 to {MAX_PROBLEM_PLANS} "plans"')
        kept = [_plan(plan, i) for plan in plans]
        out.append({"ops": list(ops), "plans": kept})
    return out



def _plan(plan: Any, i: int) -> dict[str, Any]:
    fields: list[Any] = [plan.get(k) for k in ("index", "workspace_bytes", "ms")] if isinstance(plan, dict) else \
        [None, None, None]
    index, nbytes, ms = fields
    whole = all(isinstance(x, int) and not isinstance(x, bool) for x in (index, nbytes))
    timed = isinstance(ms, (int, float)) and not isinstance(ms, bool) and (math.isnan(ms) or 0 <= ms <= MAX_PLAN_MS)
    if not (whole and timed and 0 <= nbytes <= MAX_BYTES):
        raise ValueError(f'problem {i + 1}: each plan should have a whole "index", "workspace_bytes" from 0 to '
                         f'{MAX_BYTES} and "ms" from 0 to {MAX_PLAN_MS:g} (NaN: it failed)')
    return {"index": index, "workspace_bytes": nbytes, "ms": float(ms)}
