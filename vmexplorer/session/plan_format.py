"""The plan's places in a session file, both ways: `config`, what the plan was compiled for (the model, the
policy and its options, the mechanism), and `plan`, what it decided (its memory operations, what is resident
as an iteration begins, its copy order and room, the activations it recomputes).

format.py reads the rest of the file and the graph between these two. The graph a file holds is the one
the plan runs (`Plan.graph_of`): the configured model's, fitted to the plan's room (`room_of`) and with the
plan's recomputations as ops (`read_recomputes`), both read ahead of the plan; the file's graph is compared
with it, and the plan is then checked against it. What each place holds is docs/session-format.md's; the
checks of values are reader.py's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import Config, Mechanism
from ..graph import MODELS, Definition, Graph, GraphError
from ..graph.recompute import Recompute, recomputed
from ..plan import Direction, MemOp, Mode, Origin, Plan, PlanError
from ..plan.mechanisms import MECHANISMS
from ..plan.validate import validate_plan
from ..policies import POLICIES, check_mechanism
from ..units import MAX_BYTES, quoted, typed
from .reader import BOOL, INT, NUM, STR, Reader, key_text, write_table

# memory operations in one plan: the policies plan at most some 6,400 (uvm at ResNet-152's least capacity);
# every tool works through the plan's operations one at a time (validating, naming, drawing), and a file
# could otherwise hold 300,000 of them (a tensor sent to the host and back between every two ops)
MAX_MEMOPS = 20_000


# --- writing --------------------------------------------------------------------------------------

def encode_plan(p: Plan) -> dict[str, Any]:
    return {
        "memops": write_table({"tensor": [m.tensor for m in p.memops],
                               "direction": [m.direction.value for m in p.memops],
                               "mode": [m.mode.value for m in p.memops],
                               "origin": [m.origin.value for m in p.memops],
                               "issue_after_op": [m.issue_after for m in p.memops],
                               "complete_before_op": [m.complete_before for m in p.memops],
                               "nbytes": [m.nbytes for m in p.memops]}),
        "resident_at_start": write_table({"tensor": [t for t, _ in p.resident_at_start],
                                          "nbytes": [b for _, b in p.resident_at_start]}),
        "peak_resident_bytes": int(p.peak_resident),
        "copy_order": list(p.copy_order),
        "room_bytes": int(p.room_bytes),
        "recomputes": write_table({"tensor": [step.tensor for step in p.recomputes],
                                   "before_op": [step.before for step in p.recomputes]}),
    }


# --- reading --------------------------------------------------------------------------------------

def read_config(r: Reader, value: Any, version: int, definition: Definition | None = None) -> Config:
    """(schema 8 added `mechanism`, 11 `workspaces`.) A model vmexplorer builds (or the one `definition`, the
    file's `graph.definition`, defines), a policy it has with its own options (a policy it does not have is
    read as `manual`, its options dropped: `foreign_policy` says so), a mechanism the policy takes."""
    config = r.fields(value, "config", ("model", "batch", "image_size", "policy", "capacity_bytes", "options")
                      + (("mechanism",) if version >= 8 else ()) + (("workspaces",) if version >= 11 else ()))
    # (schema 11 made the kernels' workspaces graph tensors; an older run's lay outside its capacity)
    workspaces = r.scalar(config["workspaces"], "config.workspaces", BOOL) if version >= 11 else False
    model, policy = (r.scalar(config[k], f"config.{k}", STR) for k in ("model", "policy"))
    batch, size, capacity = (r.scalar(config[k], f"config.{k}", INT, 1)
                             for k in ("batch", "image_size", "capacity_bytes"))
    if capacity > MAX_BYTES:
        r.fail(f"config.capacity_bytes is {capacity}, more than the {MAX_BYTES} bytes (1 PiB) any capacity may be")
    options = r.fields(config["options"], "config.options", None)
    if policy in POLICIES:
        options = _options(r, policy, options)
    else:  # a policy of a newer vmexplorer, or of a plugin not installed here: its moves, as a person's plan
        policy, options = "manual", {}
    mechanism = _mechanism(r, policy, config.get("mechanism", Mechanism.UVM.value))
    if definition is not None and model != definition.name:
        r.fail(f"config.model is {quoted(model)}, but graph.definition defines {quoted(definition.name)}")
    if definition is None and model not in MODELS:
        r.fail(f"config.model is {quoted(model)}, not a model this vmexplorer knows ({', '.join(MODELS)}), and "
               "graph.definition does not define it")
    return Config(model, batch, size, capacity, policy, dict(options), mechanism, workspaces, definition)


FOREIGN_POLICY = "made by the policy "  # how the note `foreign_policy` makes begins


def foreign_policy(value: Any) -> str | None:
    """The note a session made by a policy this vmexplorer does not have opens with (`read_config` reads it
    as `manual`, the same moves as a person's plan), or None: read ahead of the config, whose reader
    checks what this takes on trust."""
    config = value if isinstance(value, dict) else {}
    policy, options = config.get("policy"), config.get("options")
    if not isinstance(policy, str) or policy in POLICIES:
        return None
    given = ", ".join(f"{key_text(k)} {quoted(str(v)[:40])}" for k, v in list(options.items())[:8]) \
        if isinstance(options, dict) and options else "none"
    return (f"{FOREIGN_POLICY}{typed(policy, 200)} (options: {given}), which this vmexplorer does not have "
            f"(its policies: {', '.join(POLICIES)}; a newer vmexplorer, or the package that adds it, may): opened "
            "as a manual plan of the same moves, which editing and simulating re-plan as manual")


def room_of(plan: Any) -> int:
    """The room the plan was made with, read ahead of the plan (its workspaces are fitted to it); a bad
    value is the plan's reader's to refuse."""
    nbytes = plan.get("room_bytes", 0) if isinstance(plan, dict) else 0
    return nbytes if isinstance(nbytes, int) and not isinstance(nbytes, bool) and 0 < nbytes <= MAX_BYTES else 0


def read_recomputes(r: Reader, value: Any, plain: Graph, version: int) -> tuple[Recompute, ...]:
    """(schema 14) The plan's recomputations, read ahead of the plan: the graph it runs holds them as ops.
    Numbered in `plain`, the graph without them, each a step that can run there; an older plan has none."""
    d = r.fields(value, "plan", _plan_fields(version))
    if version < 14:
        return ()
    t = r.table(d["recomputes"], "plan.recomputes", {"tensor": INT, "before_op": INT})
    # each activation is recomputed at most once: no more steps than tensors, checked before any is made
    if t["rows"] > len(plain.tensors):
        r.fail(f"plan.recomputes has {t['rows']:,} rows, more than the graph's {len(plain.tensors):,} tensors; "
               "each is recomputed at most once")
    r.within(t, "tensor", 0, len(plain.tensors), "a tensor id of the graph without recomputation")
    r.within(t, "before_op", 0, len(plain.ops), "an op id of the graph without recomputation")
    steps = tuple(Recompute(a, b) for a, b in zip(t["tensor"].tolist(), t["before_op"].tolist()))
    try:
        recomputed(plain, steps)  # kept by the graph: the caller's graph of these steps is this one
    except GraphError as e:
        r.fail(f"plan.recomputes: {e}")
    return steps


def _plan_fields(version: int) -> tuple[str, ...]:
    """(schema 9 added `copy_order`, 10 `room_bytes`, 14 `recomputes`.)"""
    return (("memops", "resident_at_start", "peak_resident_bytes") + (("copy_order",) if version >= 9 else ())
            + (("room_bytes",) if version >= 10 else ()) + (("recomputes",) if version >= 14 else ()))


def _options(r: Reader, policy: str, options: dict[str, Any]) -> dict[str, Any]:
    """The policy must be one this vmexplorer has, and each option one of its own, of its type: the app
    draws a policy's knobs from them, and re-plans with them."""
    spec = POLICIES.get(policy)
    if spec is None:
        r.fail(f"config.policy is {quoted(policy)}, not a policy this vmexplorer knows ({', '.join(POLICIES)}); "
               "a newer vmexplorer may open it")
    for key, value in options.items():
        opt = spec.options.get(key)
        where = f"config.options.{key_text(key)}"
        if opt is None:
            known = ", ".join(spec.options) or "none"
            r.fail(f"{where}: the {policy} policy has no option {quoted(key)} (its options: {known})")
        kind = {int: INT, float: NUM, str: STR, bool: BOOL}.get(opt.type, STR)
        r.scalar(value, where, kind, opt.minimum)
        if opt.maximum is not None and value > opt.maximum:  # a stored knob a visitor could not set
            r.fail(f"{where} is {value!r}, expected at most {opt.maximum:g}")
        if opt.choices and value not in opt.choices:
            r.fail(f"{where} is {quoted(value)}, expected one of {', '.join(quoted(c) for c in opt.choices)}")
    return options


def _mechanism(r: Reader, policy: str, value: Any) -> Mechanism:
    """(schema 8 added `config.mechanism`; an older file's plans all ran through managed memory: uvm.)
    One this vmexplorer has, that the policy takes."""
    text = r.scalar(value, "config.mechanism", STR)
    if text not in {m.value for m in MECHANISMS}:
        r.fail(f"config.mechanism is {quoted(text)}, expected one of "
               f"{', '.join(quoted(m.value) for m in MECHANISMS)}")
    try:
        return check_mechanism(POLICIES[policy], text)
    except PlanError as e:
        r.fail(f"config: {e}")


def read_plan(r: Reader, value: Any, graph: Graph, config: Config, recomputes: tuple[Recompute, ...],
              version: int) -> Plan:
    """The plan, on `graph`, the graph it runs (with `recomputes`, from `read_recomputes`, as ops)."""
    d = r.fields(value, "plan", _plan_fields(version))
    m = r.table(d["memops"], "plan.memops",
                {"tensor": INT, "direction": Direction, "mode": Mode, "origin": Origin,
                 "issue_after_op": INT, "complete_before_op": INT, "nbytes": INT})
    if m["rows"] > MAX_MEMOPS:
        r.fail(f"plan.memops has {m['rows']:,} rows; a plan holds at most {MAX_MEMOPS:,} memory operations "
               "(the policies plan at most some 6,400)")
    n_t, n_o = len(graph.tensors), len(graph.ops)
    r.within(m, "issue_after_op", -1, n_o, "an op id (or -1 for the iteration start)")
    r.within(m, "complete_before_op", 0, n_o + 1, f"an op id (or {n_o} for the iteration end)")
    start = r.table(d["resident_at_start"], "plan.resident_at_start", {"tensor": INT, "nbytes": INT})
    for table in (m, start):
        r.within(table, "tensor", 0, n_t, "a tensor id")
        r.within(table, "nbytes", 0, None, "a size in bytes")
        sizes = np.array([t.nbytes for t in graph.tensors], dtype=np.int64)[table["tensor"]]
        over = np.flatnonzero(table["nbytes"] > sizes)
        if over.size:
            i = int(over[0])
            r.fail(f"{table['where']} row {i}: nbytes {table['nbytes'][i]} is more than its tensor's "
                   f"{sizes[i]} bytes")
    peak = r.scalar(d["peak_resident_bytes"], "plan.peak_resident_bytes", INT, 0)
    # the enums by value from dicts: an Enum call per value is most of the time a long plan takes here
    direction = {e.value: e for e in Direction}
    mode, origin = {e.value: e for e in Mode}, {e.value: e for e in Origin}
    memops = tuple(MemOp(t, direction[di], mode[mo], a, b, origin[og], nb) for t, di, mo, og, a, b, nb in zip(
        m["tensor"].tolist(), m["direction"], m["mode"], m["origin"], m["issue_after_op"].tolist(),
        m["complete_before_op"].tolist(), m["nbytes"].tolist()))
    resident = tuple(zip(start["tensor"].tolist(), start["nbytes"].tolist()))
    order = r.column(d.get("copy_order", []), "plan.copy_order", INT, None)
    room = r.scalar(d.get("room_bytes", 0), "plan.room_bytes", INT, 0)
    if room > config.capacity:
        r.fail(f"plan.room_bytes is {room}, more than the capacity {config.capacity} it was planned within")
    plan = Plan(config, memops, resident, peak, tuple(int(i) for i in order), room, recomputes)
    try:
        validate_plan(graph, plan)  # what `vmexplorer plan` and the executor hold every plan to
    except PlanError as e:
        r.fail(f"plan: {e}")
    return plan
