"""The figures the page shows beside the shown session, each worked out in one place and from one cost
model: the store's (`AppState.cost_model`, the one its edits are simulated with; a sample's was fitted to
its GPU's runs), so the headline, the bars, the summary, the paging cliff and the lesson say the same
numbers, and `vmexplorer info` says them of the same file.

- the **bound** of the shown configuration (`bound`): at its capacity and mechanism, under that model;
- each other policy's **baseline** (`baseline`), like against like: a measured session beside the
  measured sample of that policy on the same GPU where there is one, else beside its simulation with
  the same cost model; labelled by source;
- the **paging cliff** (`sweep`): every policy's simulated time from the least capacity to the
  footprint, the measured samples as points, and the bound at each capacity.

Everything here is pure; what takes time (a plan, a simulation, a bound) is kept by `session.planned`
for the life of the process, so the pages of a class share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import Config, Mechanism, share_of_footprint
from ..graph import Graph
from ..plots import SUMMARY_ROWS, figures, summary_items
from ..plots.summary import WHERE_SOME
from ..policies import POLICIES
from ..records.breakdown import PARTS as BREAKDOWN_PARTS
from ..records.breakdown import TimeSplit
from ..session import Session, SessionError
from ..session.compare import align_op_times
from ..session.planned import bound_at, simulated_split
from ..session.samples import gpu_of, measured_samples, read_sample, sweep_samples
from ..simulator import H100_DEFAULT, CostModel
from ..simulator.bound import Bound
from ..units import format_bytes, format_ns
from . import edits

if TYPE_CHECKING:
    from .state import AppState

SWEEP_POINTS = 16


@dataclass(frozen=True)
class Baseline:
    """Another policy at the shown session's model and capacity: where its typical iteration's time goes."""

    policy: str
    split: TimeSplit
    source: str  # "measured" (a sample) or "simulated" (with the shown session's cost model)
    sample: str | None = None  # the sample it was measured in

    @property
    def iteration_ns(self) -> int:
        return self.split.iteration_ns


def cost_of(state: AppState) -> CostModel:
    """The cost model every figure beside the shown session comes from."""
    return state.cost_model or H100_DEFAULT


def bound(state: AppState) -> Bound | None:
    """The least time any schedule could take at the shown session's model, capacity and mechanism."""
    s = state.session
    return None if s is None else bound_through(state, s.plan.mechanism)


def bound_through(state: AppState, mechanism: Mechanism) -> Bound | None:
    """The bound at the shown session's model and capacity through `mechanism`, under the same cost model
    (the joint one where its plan recomputes)."""
    s = state.session
    return None if s is None else bound_at(s.graph, s.plan.capacity, cost_of(state), mechanism,
                                           recompute=bool(s.plan.recomputes))


def baseline(state: AppState, policy: str) -> Baseline | None:
    """`policy` beside the shown session (`device` with the whole footprint), through the shown
    session's mechanism where the policy runs through it; None where it cannot run."""
    s = state.session
    if s is None:
        return None
    mechanism = Mechanism.UVM if POLICIES[policy].uvm_only else s.plan.mechanism
    if s.timeline.source == "measured":
        for name in measured_samples(s.graph, s.plan.capacity, policy, gpu_of(s), mechanism):
            try:
                return Baseline(policy, read_sample(name).time_split(), "measured", name)
            except SessionError:
                continue
    g = s.graph
    capacity = max(s.plan.capacity, g.footprint) if policy == "device" else s.plan.capacity
    split = simulated_split(Config(g.model, g.batch, g.image_size, capacity, policy, {}, mechanism,
                                          g.workspaces, g.definition), cost_of(state))
    return None if split is None else Baseline(policy, split, "simulated")


@dataclass(frozen=True)
class MoveOrRecompute:
    """Two ways to have a feature map back for the backward pass, under one cost model: move it out and
    back at the copy rates of the shown session's mechanism, or run the forward op that made it again."""

    tensor: int
    out_ns: float  # copying it to the host
    in_ns: float  # and back to the device
    out_bytes_per_ns: float  # the rates those copies run at (bytes per ns: GB/s)
    in_bytes_per_ns: float
    producer: int  # the op that made it
    recompute_ns: float  # that op's time, run again

    @property
    def move_ns(self) -> float:
        return self.out_ns + self.in_ns


def move_or_recompute(state: AppState, tensor: int) -> MoveOrRecompute:
    """What moving `tensor` out and back costs against what making it again costs, under `cost_of(state)`:
    its bytes at the copy rates of the shown plan's mechanism (a copy call's fixed cost included), and its
    producer's time in the workspace the graph gives it."""
    s = state.session
    assert s is not None
    cost, g = cost_of(state), s.graph
    rates = cost.for_mechanism(s.plan.mechanism)
    t = g.tensors[tensor]
    op = g.ops[t.producer]
    return MoveOrRecompute(tensor, rates.copy_ns(t.nbytes, to_device=False), rates.copy_ns(t.nbytes, to_device=True),
                           rates.evict_bytes_per_ns, rates.prefetch_bytes_per_ns, t.producer,
                           cost.compute_ns(op.name, op.flops, op.bytes_touched, g.workspace_bytes[t.producer]))


def times_than(ns: int, base_ns: int, base: str) -> str:
    """`ns` against `base_ns` as people say it: "10.0x slower than device", never "speedup 0.10x"."""
    if not ns or not base_ns:
        return "n/a"
    if ns == base_ns:
        return f"as fast as {base}"
    return f"{ns / base_ns:.1f}x slower than {base}" if ns > base_ns else f"{base_ns / ns:.1f}x faster than {base}"


def bar(label: str, source: str, split: TimeSplit, policy: str | None = None) -> dict[str, Any]:
    """One bar of where the time goes, in ms; `policy` None for the shown session's own."""
    return {"policy": policy, "label": label, "source": source, "iteration_ns": split.iteration_ns,
            **{key.replace("_ns", "_ms"): getattr(split, key) / 1e6 for key, _ in BREAKDOWN_PARTS},
            "iteration_ms": split.iteration_ns / 1e6}


def breakdown_rows(state: AppState) -> list[dict[str, Any]]:
    """Where the time goes: the shown session, the plan before its edits (simulated with the same
    model), then each other policy at the same model and capacity (but `joint`, whose search takes
    seconds), each labelled by its source."""
    s = state.session
    if s is None:
        return []
    rows = [bar(f"this session ({s.plan.policy}), {s.timeline.source}", s.timeline.source, s.time_split())]
    unedited = state.unedited()
    if unedited is not None:
        rows.append(bar(f"before the edits ({unedited.plan.policy}), simulated", "simulated", unedited.time_split(),
                        "before the edits"))
    for policy, spec in POLICIES.items():
        # a policy that searches its recomputations takes seconds a plan: a bar of it waits for it to be chosen
        if policy == s.plan.policy or spec.takes_moves or spec.search_recomputes is not None:
            continue
        base = baseline(state, policy)
        if base is not None:
            rows.append(bar(f"{policy}, {base.source}", base.source, base.split, policy))
    return rows


def summary_rows(state: AppState) -> list[dict[str, str]]:
    """The shown session's figures, each labelled measured or simulated, then against `device`, `uvm`
    and the bound. After an edit, `edited` and `before the edits` (the loaded plan, simulated with the
    same cost model) in place of `value`."""
    s = state.session
    if s is None:
        return []
    fig, source = figures(s), s.timeline.source
    rows = [{"figure": label, "value": value, "source": source} for _, label, value in summary_items(fig)]
    rows += _memory_rows(s)
    rows += [_against(state, fig["iteration_ns"], source, policy) for policy in ("device", "uvm")]
    b = bound(state)
    if b is not None:
        rows.append({"figure": "against the bound", "value": b.versus(fig["iteration_ns"]),
                     "source": f"{source} vs the least any schedule could take here ({format_ns(b.lower_bound_ns)} "
                               f"under {cost_of(state).name}, moving at least {format_bytes(b.min_bytes_to_host)} "
                               "each way)"})
    unedited = state.unedited()
    if unedited is None:
        return rows
    was = figures(unedited)
    before = {label: value for _, label, value in summary_items(was)}
    before.update({r["figure"]: _against(state, was["iteration_ns"], "simulated", r["figure"].split()[-1])["value"]
                   for r in rows if r["figure"] in ("against device", "against uvm")})
    if b is not None:
        before["against the bound"] = b.versus(was["iteration_ns"])
    return [{"figure": r["figure"], "edited": r["value"], "before the edits": before.get(r["figure"], ""),
             "source": r["source"]} for r in rows]


def _memory_rows(s: Session) -> list[dict[str, str]]:
    """The room a swap plan was made in, where the pool holding it needed less than the capacity, and what a
    measured run took of the GPU's memory beside the capacity."""
    capacity, rows = s.plan.capacity, []
    if s.plan.planned_with < capacity:
        rows.append({"figure": "planned with", "value": format_bytes(s.plan.planned_with),
                     "source": f"{s.timeline.source} plan: {s.plan.planned_with / capacity:.1%} of the capacity, so "
                               "that the swap pool holding it fits the capacity"})
    if not s.graph.workspaces:
        rows.append({"figure": "kernel workspaces", "value": "outside the capacity",
                     "source": f"{s.timeline.source} before workspaces were graph tensors (schema 10 or older): the "
                               "convolutions' scratch came on top of the capacity"})
    m = s.device_memory
    if m is not None:
        rows.append({"figure": "device memory taken", "value": format_bytes(m.ledger_peak_bytes if m.managed
                                                                            else m.taken_bytes),
                     "source": f"measured: {m.describe(capacity)}"})
    elif s.timeline.source == "measured":
        rows.append({"figure": "device memory taken", "value": "not recorded",
                     "source": "measured before vmexplorer recorded it (convolution workspaces lay outside the "
                               "capacity then)"})
    return rows


def _against(state: AppState, ns: int, source: str, policy: str) -> dict[str, str]:
    base = baseline(state, policy)
    if base is None:
        return {"figure": f"against {policy}", "value": "n/a", "source": "cannot run here"}
    return {"figure": f"against {policy}", "value": times_than(ns, base.iteration_ns, policy),
            "source": f"{source} vs {base.source} {policy} ({format_ns(base.iteration_ns)})"}


def sweep(state: AppState, points: int = SWEEP_POINTS) -> dict[str, Any]:
    """The paging cliff: each policy's simulated iteration time from the least capacity the model runs in
    to its footprint (uvm, no searching policy: a search takes seconds a point), the measured samples of
    the model as points, and the bound through uvm at each capacity. Capacities in % of the footprint,
    times in ms."""
    s = state.session
    if s is None:
        return {"lines": [], "measured": [], "bound": {"capacity_pct": [], "iteration_ms": []}}
    g, cost = s.graph, cost_of(state)
    capacities = _capacities(g, points)
    lines = []
    for policy, spec in POLICIES.items():
        if spec.takes_moves or spec.searches:
            continue
        line: dict[str, Any] = {"policy": policy, "capacity_pct": [], "iteration_ms": []}
        for c in capacities if policy != "device" else capacities[-1:]:
            split = simulated_split(Config(g.model, g.batch, g.image_size, c, policy, {}, Mechanism.UVM,
                                                  g.workspaces, g.definition), cost)
            if split is not None:
                line["capacity_pct"].append(share_of_footprint(c, g.footprint))
                line["iteration_ms"].append(split.iteration_ns / 1e6)
        lines.append(line)
    bounds = [(c, bound_at(g, c, cost, Mechanism.UVM)) for c in capacities]
    measured = [{"name": x.name, "policy": x.policy, "capacity_pct": share_of_footprint(x.capacity, g.footprint),
                 "iteration_ms": x.iteration_ns / 1e6, "gpu": x.gpu} for x in sweep_samples(s)]
    return {"lines": lines, "measured": measured, "cost_model": cost.name,
            "bound": {"capacity_pct": [share_of_footprint(c, g.footprint) for c, b in bounds if b is not None],
                      "iteration_ms": [b.lower_bound_ns / 1e6 for _, b in bounds if b is not None]}}


def _capacities(g: Graph, points: int) -> list[int]:
    need = g.min_capacity[0]
    return sorted({int(need + (g.footprint - need) * i / (points - 1)) for i in range(points)})


def delta_rows(state: AppState) -> list[dict[str, Any]]:
    """Per op, B (the comparison) against A (the shown session): time per iteration (stall plus run),
    aligned by op index when both ran the same graph, else by layer name."""
    a, b = state.session, state.comparison
    return [] if a is None or b is None else align_op_times(a, b)[1]


def summary_delta_rows(state: AppState) -> list[dict[str, str]]:
    """The figures of A and B side by side, where the time goes first, with B - A and B/A."""
    a, b = state.session, state.comparison
    if a is None or b is None:
        return []
    sa, sb = figures(a), figures(b)
    rows = []
    for key, label, fmt in SUMMARY_ROWS:
        if key in sa and key in sb and key not in ("iterations", "counted_iterations") and \
                not (key in WHERE_SOME and not sa[key] and not sb[key]):
            va, vb = sa[key], sb[key]
            numbers = isinstance(va, int | float) and isinstance(vb, int | float)
            delta = ("-" if vb < va else "+") + fmt(abs(vb - va)) if numbers else ""
            ratio = f"{vb / va:.2f}" if numbers and va else ""
            rows.append({"figure": label, "a": fmt(va), "b": fmt(vb), "b - a": delta, "b/a": ratio})
    rows.append({"figure": "source", "a": str(sa["source"]), "b": str(sb["source"]), "b - a": "", "b/a": ""})
    return rows


def compare_breakdown_rows(state: AppState) -> list[dict[str, Any]]:
    """Where the time goes in A and in B (their typical iterations), as bars of `breakdown_rows`."""
    a, b = state.session, state.comparison
    if a is None or b is None:
        return []
    return [bar(f"{name}: {s.plan.policy}, {s.timeline.source}", s.timeline.source, s.time_split())
            for name, s in (("A", a), ("B", b))]


def tensor_rows(session: Session | None, moves: list[Any], recomputes: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Tensors worth paging (2 MiB and more, with a gap between uses), the moved and recomputed first, largest
    first, with their trips, what the plan does with each (`choice`: keep, move or recompute) and what it
    could (`choices`, `edits.offered`: a re-run's copy has none)."""
    if session is None:
        return []
    trips: dict[int, list[Any]] = {}
    for mv in moves:
        trips.setdefault(mv.tensor, []).append(mv)
    remade = {step.tensor for step in recomputes}
    tensors = session.graph.tensors
    offered = edits.offered(session.graph)
    shown = sorted((t for t, tensor in enumerate(tensors) if tensor.nbytes >= (2 << 20) or t in trips or t in remade),
                   key=lambda t: (t not in trips and t not in remade, -tensors[t].nbytes))
    return [{"id": t, "tensor": tensors[t].name, "kind": tensors[t].kind.value,
             "bytes": format_bytes(tensors[t].nbytes),
             "choice": edits.choice_of(moves, recomputes, t),
             "choices": " / ".join(offered.get(tensors[t].name, ())),
             "offloaded": t in trips, "offload after": ", ".join(str(mv.offload_after) for mv in trips.get(t, [])),
             "prefetch after": ", ".join("-" if mv.prefetch_after is None else str(mv.prefetch_after)
                                         for mv in trips.get(t, []))} for t in shown]
