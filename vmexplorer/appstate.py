"""What the app shows and edits, as one param.Parameterized with pure methods and no widgets.

The page (app.py) only draws this state and calls its methods; tests drive it directly. Every method
that takes input from a person returns normally: a problem becomes `message` (shown in place on the
page, with the last action's `status` cleared) and leaves the state as it was; and should the page fail
to draw what an action opened, it puts back what it showed (`shown`, `restore`). Editing follows the
plan's own model: a plan-origin round trip is a `Move`; a drag changes one move's `offload_after` or
`prefetch_after`, clamped to where it can work, and the edited moves are compiled as a `manual` plan
and simulated at once (a few ms).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import param

from .config import Mechanism, share_of_footprint
from .graph import Graph, GraphError, build_graph
from .plan import Move, Plan, PlanError
from .plan.moves import format_edits, parse_edits
from .plan.residency import next_use
from .plots import SUMMARY_ROWS, figures, summary_items
from .policies import POLICIES, compile_plan, non_default_options
from .policies.common import reuse_gaps
from .policies.spec import Simulation
from .records.breakdown import PARTS as BREAKDOWN_PARTS
from .records.breakdown import TimeSplit, time_split
from .session import Session, SessionError, load_session, new_session, session_from_bytes
from .session.compare import align_op_times
from .simulator import H100_DEFAULT, CostModel, calibrate, simulate
from .simulator.bound import Bound, lower_bound
from .units import format_bytes, format_ns, parse_bytes, quoted

SAMPLES = Path(__file__).resolve().parent.parent / "sample_sessions"
DEFAULT_SAMPLE = "vgg19-b64-autovm-50pct.measured.vms"
MARKER_KINDS = ("offload", "prefetch")


@dataclass(frozen=True)
class _Baseline:
    iteration_ns: int
    source: str  # "measured" (a session on disk) or "simulated" (just now)
    split: TimeSplit  # where its typical iteration's time went


@dataclass(frozen=True)
class Shown:
    """Everything of an AppState that a page draws, but its messages."""

    session: Session | None
    loaded: Session | None
    cost_model: CostModel | None
    moves: tuple[Move, ...]
    origin: str
    comparison: Session | None
    comparison_origin: str


class AppState(param.Parameterized):
    session = param.Parameter(default=None, doc="the Session shown (loaded, or simulated after an edit)")
    origin = param.String(default="", doc="where the shown session came from, in words")
    loaded = param.Parameter(default=None, doc="the session as loaded or configured, before any edit")
    cost_model = param.Parameter(default=None, doc="what edits are simulated with")
    moves = param.List(default=[], item_type=Move, doc="the plan's round trips, as edited")
    sample = param.String(default="", doc="the sample session shown (by file name), or empty: a link can name it")
    comparison = param.Parameter(default=None, doc="the session compared against, or None")
    comparison_origin = param.String(default="")
    message = param.String(default="", doc="the last problem, in words; empty when the last action worked")
    status = param.String(default="", doc="what the last action did (clamping included)")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._baselines: dict[tuple[Any, ...], _Baseline] = {}
        self._sweeps: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._bounds: dict[tuple[Any, ...], Bound | None] = {}
        self._unedited: tuple[Any, Session | None] = (None, None)

    # --- loading and configuring ------------------------------------------------------------------
    def load(self, source: str | os.PathLike[str] | bytes, name: str | None = None) -> bool:
        """Open a session file (a path) or an upload (bytes); False and `message` if it is not one."""
        try:
            session, label = _open(source, name)
        except (SessionError, PlanError, ValueError) as e:
            return self.fail(str(e))
        return self._open_shown(session, label)

    def show_measured(self, session: Session, name: str) -> bool:
        """Show the session a GPU run of this page measured. It comes from the app's own worker, which
        ran the plan this page compiled and the executor checked, so it is not read back from a file."""
        if not isinstance(session, Session):
            return self.fail(f"{name} returned no session")
        return self._open_shown(session, name)

    def _open_shown(self, session: Session, label: str) -> bool:
        try:
            cost = self._cost_for(session)
        except (SessionError, PlanError, ValueError) as e:
            return self.fail(str(e))
        self._show(session, f"{session.timeline.source} session `{label}`", loaded=session, cost=cost)
        self.status = f"opened {label}"
        return True

    def load_sample(self, name: str = DEFAULT_SAMPLE) -> bool:
        if Path(name).name != name or not (SAMPLES / name).is_file():
            return self.fail(f"there is no sample session {quoted(name[:80])}; the samples are: "
                             f"{', '.join(samples())}")
        if not self.load(SAMPLES / name):
            return False
        self.sample = name
        return True

    def simulate_config(self, model: str, batch: int, capacity_text: str, policy: str,
                        options: Mapping[str, Any] | None = None, mechanism: str = "uvm") -> bool:
        """Compile `policy` for the model under `mechanism` (uvm or swap) and simulate it. The cost
        model is the loaded session's when it ran this graph (its op times are by name, for this batch),
        else the uncalibrated H100."""
        try:
            graph = build_graph(model, int(batch))
            capacity = parse_bytes(capacity_text, graph.footprint)
            spec = POLICIES.get(policy)  # a policy that plans a person's moves plans the ones shown
            moves = self._moves_for(graph) if spec is not None and spec.takes_moves else []
            cost = self.cost_model if self._same_graph(graph) else H100_DEFAULT
            plan, searched = plan_in(graph, capacity, policy, cost, dict(options or {}), moves, mechanism)
            session = new_session(graph, plan, simulate(graph, plan, cost), cost,
                                  notes=[f"simulated in the app with {cost.name}", *searched])
        except (GraphError, PlanError, SessionError, ValueError, TypeError) as e:
            return self.fail(str(e))
        through = "" if plan.mechanism is Mechanism.UVM else f" through {plan.mechanism}"
        self._show(session, f"simulated: {model} batch {batch}, {policy}{through} at {format_bytes(capacity)}",
                   loaded=session, cost=cost)
        self.status = f"simulated {policy} with {cost.name}"
        return True

    # --- editing the plan -------------------------------------------------------------------------
    def marker_range(self, kind: str, tensor: int | str, from_op: int | None = None) -> tuple[int, int]:
        """The ops (as `issue_after`) a marker may be dragged to: an offload stays after the tensor's
        last use before its trip (never before its producer) and before its prefetch; a prefetch stays
        after its offload and before the first use after the offload."""
        graph, move = self._graph(), self._find(kind, tensor, from_op)[1]
        return _marker_range(graph, move, kind)

    def drag(self, marker_kind: str, tensor: int | str, to_op: int, from_op: int | None = None) -> bool:
        """Move one marker: `to_op` is the op it is issued after (-1: the iteration's start), snapped
        and clamped to `marker_range`; then re-plan as `manual` and re-simulate. `from_op` picks one
        of the tensor's trips when it has several (the marker's current `issue_after`)."""
        try:
            graph = self._graph()
            i, move = self._find(marker_kind, tensor, from_op)
            lo, hi = _marker_range(graph, move, marker_kind)
            to = int(round(float(to_op)))
            snapped = min(max(to, lo), hi)
            edited = (Move(move.tensor, snapped, move.prefetch_after) if marker_kind == "offload"
                      else Move(move.tensor, move.offload_after, snapped))
            moves = list(self.moves)
            moves[i] = edited
            self._replan(moves)
        except (PlanError, KeyError, ValueError, TypeError) as e:
            return self.fail(_text(e))
        name = graph.tensors[move.tensor].name
        clamp = "" if snapped == to else f" (clamped from {to}: it may go from {lo} to {hi})"
        self.status = f"{marker_kind} of {name} now issued after {_op(graph, snapped)}{clamp}"
        return True

    def toggle_offload(self, tensor: int | str) -> bool:
        """Drop every round trip of a tensor, or add one over its longest gap between uses, with the
        prefetch issued three ops before the use that ends the gap (as AutoVM does)."""
        try:
            graph = self._graph()
            t = _tensor_id(graph, tensor)
            name = graph.tensors[t].name
            if any(mv.tensor == t for mv in self.moves):
                self._replan([mv for mv in self.moves if mv.tensor != t])
                self.status = f"{name} is no longer offloaded"
                return True
            move = _new_move(graph, t)
            self._replan(sorted([*self.moves, move], key=lambda mv: (mv.offload_after, mv.tensor)))
        except (PlanError, KeyError, ValueError) as e:
            return self.fail(_text(e))
        self.status = (f"{name} offloaded after {_op(graph, move.offload_after)}, prefetched after "
                       f"{_op(graph, move.prefetch_after if move.prefetch_after is not None else -1)}")
        return True

    def reset_edits(self) -> bool:
        if self.loaded is None:
            return self.fail("nothing is loaded")
        self._show(self.loaded, self.origin.split(" (edited)")[0], loaded=self.loaded, cost=self.cost_model)
        self.status = "edits undone"
        return True

    @property
    def edited(self) -> bool:
        """Whether the shown session is an edit of the one loaded."""
        return self.session is not None and self.loaded is not None and self.session is not self.loaded

    def unedited(self) -> Session | None:
        """The loaded plan simulated with the cost model edits are simulated with: what an edit is
        held against, so its effect is never confused with the model's error against a measurement.
        None when nothing is edited."""
        if not self.edited:
            return None
        loaded, cost = self.loaded, self.cost_model or H100_DEFAULT
        # the loaded session itself in the key, not its id: a later one may be given a freed one's id
        key = (loaded, cost.name)
        was = self._unedited[0]
        if was is None or was[0] is not loaded or was[1] != cost.name:
            g = loaded.graph
            self._unedited = (key, new_session(g, loaded.plan, simulate(g, loaded.plan, cost), cost,
                                               notes=[f"the plan before the edits, simulated with {cost.name}"]))
        return self._unedited[1]

    def edits_text(self) -> str:
        """The edits of the shown plan against the loaded one, as a link holds them (empty: none)."""
        if not self.edited:
            return ""
        return format_edits(self.loaded.plan.moves, self.moves)

    def apply_edits(self, text: str) -> bool:
        """Apply a link's edits (`edits_text`) to the loaded plan and simulate; False and `message` when
        the text is not edits of this plan."""
        if self.loaded is None:
            return self.fail("nothing is loaded to apply the link's edits to")
        try:
            moves = parse_edits(self.loaded.graph, self.loaded.plan.moves, text)
            if moves != list(self.loaded.plan.moves):
                self._replan(moves)  # the shown plan's graph and capacity are the loaded one's
            elif self.edited:
                self.reset_edits()
        except PlanError as e:
            return self.fail(f"the link's edits cannot be applied: {_text(e)}")
        self.status = "opened the link's edits" if text else self.status
        return True

    # --- comparing --------------------------------------------------------------------------------
    def compare_with(self, other: Session | str | os.PathLike[str] | bytes | None, name: str | None = None) -> bool:
        """Set the session compared against (None clears it); paths and uploads are opened first."""
        try:
            if other is None or isinstance(other, Session):
                session, label = other, name or ("" if other is None else "a session")
            else:
                session, label = _open(other, name)
        except SessionError as e:
            return self.fail(str(e))
        with param.parameterized.batch_call_watchers(self):
            self.comparison_origin = label
            self.comparison = session
            self.message, self.status = "", ("comparison cleared" if session is None else f"comparing with {label}")
        return True

    def twin(self, policy: str, mechanism: Mechanism | None = None) -> str | None:
        """The measured sample of `policy` on the shown session's graph and capacity (the `uvm` twin of
        the default sample, say), through `mechanism` (None: the shown session's), by file name; None
        when there is none or it is the shown one."""
        s = self.session
        if s is None:
            return None
        through = s.plan.mechanism if mechanism is None else mechanism
        return next((n for n in _measured_samples(s.graph, s.plan.capacity, policy, gpu_of(s), through)
                     if n != self.origin), None)

    def compare_with_twin(self, policy: str = "uvm") -> bool:
        """Compare the shown session with its measured twin of `policy` (one click in the app)."""
        name = self.twin(policy)
        if name is None:
            return self.fail(f"no measured {policy} sample of this model, batch and capacity to compare with")
        return self.compare_with(SAMPLES / name, name)

    def other_mechanism(self) -> Mechanism | None:
        """The mechanism the shown schedule is not run through (swap for uvm and back); None with nothing
        shown."""
        s = self.session
        return None if s is None else Mechanism.SWAP if s.plan.mechanism is Mechanism.UVM else Mechanism.UVM

    def compare_mechanisms(self) -> bool:
        """Compare the shown schedule (its moves, edits included) with the same schedule through the
        other mechanism, simulated with the cost model edits are (one click in the app): what the UVM
        driver costs against pinned copies, or back."""
        s, other = self.session, self.other_mechanism()
        if s is None or other is None:
            return self.fail("nothing shown to compare")
        g, cost = s.graph, self.cost_model or H100_DEFAULT
        try:
            plan = compile_plan(g, s.plan.capacity, "manual", moves=list(self.moves), mechanism=other,
                                simulation=Simulation(simulate, lower_bound, cost))
            session = new_session(g, plan, simulate(g, plan, cost), cost,
                                  notes=[f"the moves of {self.origin} through {other}, simulated with {cost.name}"])
        except (PlanError, SessionError, ValueError) as e:
            return self.fail(f"the same schedule cannot run through {other}: {e}")
        return self.compare_with(session, f"the same schedule through {other} (simulated)")

    # --- tables -----------------------------------------------------------------------------------
    def summary_rows(self) -> list[dict[str, str]]:
        """The figures of the shown session, each labelled measured or simulated, then its speedup
        against `device` and `uvm` for the same model, batch and capacity (measured where a sample
        session has it, else simulated with the same cost model, and labelled so). After an edit,
        `edited` and `before the edits` (the loaded plan, simulated with the same cost model) in place
        of `value`."""
        s = self.session
        if s is None:
            return []
        fig, source = figures(s), s.timeline.source
        rows = [{"figure": label, "value": value, "source": source} for _, label, value in summary_items(fig)]
        for policy in ("device", "uvm"):
            base = self._baseline(policy)
            if base is None:
                rows.append({"figure": f"against {policy}", "value": "n/a", "source": "cannot run here"})
                continue
            value = times_than(fig["iteration_ns"], base.iteration_ns, policy)
            rows.append({"figure": f"against {policy}", "value": value,
                         "source": f"{source} vs {base.source} {policy} ({format_ns(base.iteration_ns)})"})
        bound = self.bound()
        if bound is not None:
            rows.append({"figure": "against the bound", "value": bound.versus(fig["iteration_ns"]),
                         "source": f"{source} vs the least any schedule could take here "
                                   f"({format_ns(bound.lower_bound_ns)} under {self._baseline_cost().name}, "
                                   f"moving at least {format_bytes(bound.min_bytes_to_host)} each way)"})
        unedited = self.unedited()
        if unedited is not None and unedited.cost_model is not None:
            # the edit beside the plan it came from, both from one cost model
            was = figures(unedited)
            before = {label: value for _, label, value in summary_items(was)}
            for policy in ("device", "uvm"):
                base = self._baseline(policy)
                if base is not None:
                    before[f"against {policy}"] = times_than(was["iteration_ns"], base.iteration_ns, policy)
            if bound is not None:
                before["against the bound"] = bound.versus(was["iteration_ns"])
            rows = [{"figure": r["figure"], "edited": r["value"], "before the edits": before.get(r["figure"], ""),
                     "source": r["source"]} for r in rows]
        return rows

    def capacity_sweep(self, points: int = 16) -> dict[str, Any]:
        """The paging cliff: the iteration time of each policy from the least capacity the model runs in
        to its footprint, simulated with the shown session's cost model, and the measured samples of
        this model as points. Capacities in % of the footprint, times in ms."""
        s = self.session
        if s is None:
            return {"lines": [], "measured": []}
        g, cost = s.graph, self.cost_model or H100_DEFAULT
        key = (g.key, cost.name, points)
        if key not in self._sweeps:
            self._sweeps[key] = _sweep(g, cost, points)
        measured = [{"name": name, "policy": x.policy, "capacity_pct": share_of_footprint(x.capacity, g.footprint),
                     "iteration_ms": x.iteration_ns / 1e6, "gpu": x.gpu} for name, x in _sweep_samples(s)]
        return {"lines": self._sweeps[key], "measured": measured, "cost_model": cost.name}

    def open_sweep_point(self, policy: str, capacity_pct: float) -> bool:
        """Open a point of the sweep: the measured sample there if there is one, else the simulation."""
        s = self.session
        if s is None:
            return self.fail("nothing shown to sweep")
        g = s.graph
        for name, x in _sweep_samples(s):
            if x.policy == policy and abs(share_of_footprint(x.capacity, g.footprint) - capacity_pct) < 0.5:
                return self.load(SAMPLES / name)
        capacity = int(g.footprint * capacity_pct / 100)
        return self.simulate_config(g.model, g.batch, str(max(capacity, g.min_capacity[0])), policy)

    def breakdown_rows(self) -> list[dict[str, Any]]:
        """Where the time goes, for the shown session and beside it each other policy at the same model
        and capacity (`device` with the whole footprint): measured where a sample has it, else
        simulated with the same cost model, each labelled so. Times in ms, for a stacked bar; `policy`
        is None for the shown session's own bar."""
        s = self.session
        if s is None:
            return []
        bars: list[tuple[str | None, str, str, TimeSplit]] = [
            (None, f"this session ({s.plan.policy})", s.timeline.source, s.time_split())]
        unedited = self.unedited()
        if unedited is not None:
            bars.append(("before the edits", f"before the edits ({unedited.plan.policy})", "simulated",
                         unedited.time_split()))
        for policy in POLICIES:
            if policy == s.plan.policy or POLICIES[policy].takes_moves:
                continue
            base = self._baseline(policy)
            if base is not None:
                bars.append((policy, policy, base.source, base.split))
        return [_bar(policy, f"{label}, {source}", source, split) for policy, label, source, split in bars]

    def delta_rows(self) -> list[dict[str, Any]]:
        """Per op, B (the comparison) against A (the shown session): time per iteration (stall plus
        run), aligned by op index when both ran the same graph, else by layer name."""
        a, b = self.session, self.comparison
        return [] if a is None or b is None else align_op_times(a, b)[1]

    def summary_delta_rows(self) -> list[dict[str, str]]:
        """The figures of A and B side by side, where the time goes first, with B - A and B/A."""
        a, b = self.session, self.comparison
        if a is None or b is None:
            return []
        sa, sb = figures(a), figures(b)
        rows = []
        for key, label, fmt in SUMMARY_ROWS:
            if key in sa and key in sb and key not in ("iterations", "counted_iterations"):
                va, vb = sa[key], sb[key]
                numbers = isinstance(va, int | float) and isinstance(vb, int | float)
                delta = ("-" if vb < va else "+") + fmt(abs(vb - va)) if numbers else ""
                ratio = f"{vb / va:.2f}" if numbers and va else ""
                rows.append({"figure": label, "a": fmt(va), "b": fmt(vb), "b - a": delta, "b/a": ratio})
        rows.append({"figure": "source", "a": str(sa["source"]), "b": str(sb["source"]), "b - a": "", "b/a": ""})
        return rows

    def compare_breakdown_rows(self) -> list[dict[str, Any]]:
        """Where the time goes in A and in B (their typical iterations), as bars of `breakdown_rows`."""
        a, b = self.session, self.comparison
        if a is None or b is None:
            return []
        return [_bar(None, f"{name}: {s.plan.policy}, {s.timeline.source}", s.timeline.source, s.time_split())
                for name, s in (("A", a), ("B", b))]

    def tensor_rows(self) -> list[dict[str, Any]]:
        """Tensors worth paging (2 MiB and more, with a gap between uses), largest first, with their trips."""
        s = self.session
        if s is None:
            return []
        g = s.graph
        trips: dict[int, list[Move]] = {}
        for mv in self.moves:
            trips.setdefault(mv.tensor, []).append(mv)
        rows = []
        for t, tensor in enumerate(g.tensors):
            if tensor.nbytes < (2 << 20) and t not in trips:
                continue
            ms = trips.get(t, [])
            rows.append({"id": t, "tensor": tensor.name, "kind": tensor.kind.value,
                         "bytes": format_bytes(tensor.nbytes), "offloaded": bool(ms),
                         "offload after": ", ".join(str(mv.offload_after) for mv in ms),
                         "prefetch after": ", ".join("-" if mv.prefetch_after is None else str(mv.prefetch_after)
                                                     for mv in ms), "_nbytes": tensor.nbytes})
        rows.sort(key=lambda r: (not r["offloaded"], -r["_nbytes"]))
        for r in rows:
            del r["_nbytes"]
        return rows

    # --- what the page shows, as one value --------------------------------------------------------
    def fail(self, text: str) -> bool:
        """Say what went wrong (False, for `return self.fail(...)`); the status of an earlier action goes,
        so it never reads as the outcome of this one."""
        with param.parameterized.batch_call_watchers(self):
            self.message, self.status = text, ""
        return False

    def shown(self) -> Shown:
        """What is shown now, to put back with `restore` if showing something else fails."""
        return Shown(self.session, self.loaded, self.cost_model, tuple(self.moves), self.origin, self.comparison,
                     self.comparison_origin)

    def restore(self, shown: Shown, why: str) -> None:
        """Show `shown` again and say `why`: the page could not draw what an action opened."""
        with param.parameterized.batch_call_watchers(self):
            self.session, self.loaded, self.cost_model = shown.session, shown.loaded, shown.cost_model
            self.moves, self.origin = list(shown.moves), shown.origin
            self.comparison, self.comparison_origin = shown.comparison, shown.comparison_origin
            self.message, self.status = why, ""

    # --- internals --------------------------------------------------------------------------------

    def _graph(self) -> Graph:
        if self.session is None:
            raise PlanError("load or simulate a session first")
        graph: Graph = self.session.graph
        return graph

    def _same_graph(self, graph: Graph) -> bool:
        return self.loaded is not None and self.loaded.graph.key == graph.key and self.cost_model is not None

    def _moves_for(self, graph: Graph) -> list[Move]:
        return list(self.moves) if self.session is not None and self.session.graph.key == graph.key else []

    def _cost_for(self, session: Session) -> CostModel:
        """What edits of `session` are simulated with: the cost model stored in it (a sample session's
        was fitted to that very run, `vmexplorer calibrate`), else one fitted to it now."""
        if session.cost_model is not None:
            return session.cost_model
        if session.timeline.source == "measured":
            return calibrate(session.graph, session.plan, session.timeline)
        return H100_DEFAULT

    def _show(self, session: Session, origin: str, loaded: Session, cost: CostModel) -> None:
        with param.parameterized.batch_call_watchers(self):
            self.sample = self.sample if loaded is self.loaded else ""
            self.loaded, self.cost_model = loaded, cost
            self.moves = list(session.plan.moves)
            self.origin = origin
            self.message = ""
            self.session = session

    def _find(self, kind: str, tensor: int | str, from_op: int | None) -> tuple[int, Move]:
        if kind not in MARKER_KINDS:
            raise PlanError(f"a marker is 'offload' or 'prefetch', not {kind!r}")
        graph = self._graph()
        t = _tensor_id(graph, tensor)
        found = [(i, mv) for i, mv in enumerate(self.moves) if mv.tensor == t]
        if not found:
            raise PlanError(f"{graph.tensors[t].name} has no planned round trip; add one in the tensor table")
        if from_op is not None:
            at = [(i, mv) for i, mv in found
                  if (mv.offload_after if kind == "offload" else mv.prefetch_after) == from_op]
            found = at or found
        i, mv = found[0]
        if kind == "prefetch" and mv.prefetch_after is None:
            raise PlanError(f"{graph.tensors[t].name} is offloaded and never prefetched: there is no "
                            "prefetch marker to move")
        return i, mv

    def _replan(self, moves: Sequence[Move]) -> None:
        """Compile the moves as a manual plan and simulate; raises PlanError and changes nothing then."""
        s = self.session
        assert s is not None
        graph, cost = s.graph, self.cost_model or H100_DEFAULT
        # the shown mechanism's; under swap the copy streams take the order its simulation runs fastest in
        plan = compile_plan(graph, s.plan.capacity, "manual", moves=list(moves), mechanism=s.plan.mechanism,
                            simulation=Simulation(simulate, lower_bound, cost))
        session = new_session(graph, plan, simulate(graph, plan, cost), cost,
                              notes=[f"a manual plan edited in the app from {self.origin}, simulated with {cost.name}"])
        with param.parameterized.batch_call_watchers(self):
            self.moves = list(moves)
            self.origin = self.origin if self.origin.endswith("(edited)") else f"{self.origin} (edited)"
            self.message = ""
            self.session = session

    def baseline_ns(self, policy: str) -> int | None:
        """The typical iteration of `policy` beside the shown session (`_baseline`), None where it cannot run."""
        base = self._baseline(policy) if self.session is not None else None
        return None if base is None else base.iteration_ns

    def bound(self) -> Bound | None:
        """The least time any schedule could take at the shown session's model and capacity, under the cost
        model its baselines are simulated with (`simulator.bound`)."""
        s = self.session
        if s is None:
            return None
        cost = self._baseline_cost()
        key = ("bound", s.graph.key, s.plan.capacity, cost.name, s.plan.mechanism)
        if key not in self._bounds:
            try:
                self._bounds[key] = lower_bound(s.graph, s.plan.capacity, cost, s.plan.mechanism)
            except PlanError:
                self._bounds[key] = None
        return self._bounds[key]

    def _baseline_cost(self) -> CostModel:
        s = self.session
        assert s is not None
        if s.timeline.source == "simulated" and s.cost_model is not None:
            return s.cost_model
        return self.cost_model if self._same_graph(s.graph) and self.cost_model is not None else H100_DEFAULT

    def _baseline(self, policy: str) -> _Baseline | None:
        """Like against like: a measured session against a measured sample of `policy` when there is
        one, a simulated session against `policy` simulated with the same cost model."""
        s = self.session
        assert s is not None
        g, capacity, source = s.graph, s.plan.capacity, s.timeline.source
        cost = self._baseline_cost()
        # like against like: the shown session's mechanism, where the policy runs through it
        mechanism = Mechanism.UVM if POLICIES[policy].uvm_only else s.plan.mechanism
        key = (g.key, capacity if policy != "device" else None, policy, source, cost.name, mechanism, gpu_of(s))
        if key not in self._baselines:
            found = _measured_baseline(g, capacity, policy, gpu_of(s), mechanism) if source == "measured" else None
            if found is None:
                found = _simulated_baseline(g, capacity if policy != "device" else max(capacity, g.footprint),
                                            policy, cost, mechanism)
                if found is None:
                    return None
            self._baselines[key] = found
        return self._baselines[key]


def _bar(policy: str | None, label: str, source: str, split: TimeSplit) -> dict[str, Any]:
    """One bar of where the time goes, in ms."""
    return {"policy": policy, "label": label, "source": source, "iteration_ns": split.iteration_ns,
            **{key.replace("_ns", "_ms"): getattr(split, key) / 1e6 for key, _ in BREAKDOWN_PARTS},
            "iteration_ms": split.iteration_ns / 1e6}


def _sweep(g: Graph, cost: CostModel, points: int) -> list[dict[str, Any]]:
    """Each policy's simulated iteration time (ms) at `points` capacities from the least to the
    footprint, where it plans at all (`device` only at the footprint)."""
    need = g.min_capacity[0]
    capacities = sorted({int(need + (g.footprint - need) * i / (points - 1)) for i in range(points)})
    lines = []
    for policy, spec in POLICIES.items():
        # a person's moves belong to one capacity, not to a sweep; a search takes seconds a point
        if spec.takes_moves or spec.search is not None:
            continue
        line: dict[str, Any] = {"policy": policy, "capacity_pct": [], "iteration_ms": []}
        for c in capacities:
            try:
                plan = compile_plan(g, c, policy)
            except PlanError:
                continue
            line["capacity_pct"].append(share_of_footprint(c, g.footprint))
            line["iteration_ms"].append(simulate(g, plan, cost).iteration_ns().max() / 1e6)
        lines.append(line)
    return lines


def plan_in(graph: Graph, capacity: int, policy: str, cost: CostModel, options: Mapping[str, Any] | None = None,
            moves: Sequence[Move] = (), mechanism: Mechanism | str = Mechanism.UVM) -> tuple[Plan, tuple[str, ...]]:
    """`compile_plan`, with the simulator and `cost` for a policy that searches schedules in it (`tuned`)
    and for the copy order of a swap plan, and what the search reported. A search is deterministic for its
    options and takes a second or more, so each is done once per server process, whichever page asks."""
    if POLICIES.get(policy) is None or POLICIES[policy].search is None:
        return compile_plan(graph, capacity, policy, options, moves, mechanism=mechanism,
                            simulation=Simulation(simulate, lower_bound, cost)), ()
    cost_json = json.dumps(dataclasses.asdict(cost), sort_keys=True)
    return _searched(graph.model, graph.batch, graph.image_size, capacity, policy,
                     json.dumps(dict(options or {}), sort_keys=True), cost_json, str(mechanism))


@functools.lru_cache(maxsize=32)
def _searched(model: str, batch: int, image_size: int, capacity: int, policy: str, options_json: str,
              cost_json: str, mechanism: str) -> tuple[Plan, tuple[str, ...]]:
    said: list[str] = []
    cost = CostModel(**json.loads(cost_json))
    graph = build_graph(model, batch, image_size)
    plan = compile_plan(graph, capacity, policy, json.loads(options_json),
                        simulation=Simulation(simulate, lower_bound, cost, said.append), mechanism=mechanism)
    return plan, tuple(said)


def _simulated_baseline(graph: Graph, capacity: int, policy: str, cost: CostModel,
                        mechanism: Mechanism) -> _Baseline | None:
    """`policy` planned and simulated with `cost` (None where it cannot run): the same for every page of the
    server process, so a class's first drags, each simulating every baseline of the same sample, share one
    simulation of each."""
    cost_json = json.dumps(dataclasses.asdict(cost), sort_keys=True)
    return _simulated(graph.model, graph.batch, graph.image_size, capacity, policy, cost_json, str(mechanism))


@functools.lru_cache(maxsize=64)
def _simulated(model: str, batch: int, image_size: int, capacity: int, policy: str, cost_json: str,
               mechanism: str) -> _Baseline | None:
    cost = CostModel(**json.loads(cost_json))
    g = build_graph(model, batch, image_size)
    try:
        plan, _ = plan_in(g, capacity, policy, cost, mechanism=mechanism)
    except PlanError:
        return None
    tl = simulate(g, plan, cost)
    its = tl.iteration_ns()
    own = np.array([cost.compute_ns(op.name, op.flops, op.bytes_touched) for op in g.ops])
    return _Baseline(int(np.median(its)) if len(its) else 0, "simulated", time_split(g, plan, tl, own))


def times_than(ns: int, base_ns: int, base: str) -> str:
    """`ns` against `base_ns` as people say it: "10.0x slower than device", never "speedup 0.10x"."""
    if not ns or not base_ns:
        return "n/a"
    if ns == base_ns:
        return f"as fast as {base}"
    return f"{ns / base_ns:.1f}x slower than {base}" if ns > base_ns else f"{base_ns / ns:.1f}x faster than {base}"


def _open(source: str | os.PathLike[str] | bytes, name: str | None) -> tuple[Session, str]:
    """A session file (a path) or an upload (bytes), and its label; SessionError if it is not one."""
    if isinstance(source, bytes | bytearray):
        label = name or "the uploaded file"
        return session_from_bytes(bytes(source), label), label  # which holds it to the loader's limits
    path = Path(source)
    return (read_sample(path.name) if path.parent == SAMPLES else load_session(path)), name or path.name


def read_sample(name: str) -> Session:
    """A sample session, read once per change of its file and shared by every page of the process (a
    Session is frozen): each page opens the default sample and reads its baselines, and reading them
    was a fifth of building a page."""
    st = (SAMPLES / name).stat()
    return _read_sample(name, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)  # the few a page opens by itself; a sample each holds tens of MB
def _read_sample(name: str, _mtime_ns: int, _size: int) -> Session:
    return load_session(SAMPLES / name)


def samples() -> list[str]:
    """The sample sessions beside the package, the default first."""
    names = sorted(p.name for p in SAMPLES.glob("*.vms") if p.is_file()) if SAMPLES.is_dir() else []
    return sorted(names, key=lambda n: n != DEFAULT_SAMPLE)


@dataclass(frozen=True)
class _Sample:
    """What the app needs to know of a sample session without opening it again."""

    key: Any  # the graph's (model, batch, image size)
    capacity: int
    policy: str
    defaults: bool  # run with the policy's default options
    source: str
    iteration_ns: int
    gpu: str  # the GPU it was measured on, or how it was made
    mechanism: Mechanism


def samples_by_gpu() -> dict[str, list[str]]:
    """The sample sessions grouped by the GPU they were measured on (simulated ones by themselves),
    the default sample's group first, for a picker with groups."""
    groups: dict[str, list[str]] = {}
    index = _sample_index()
    for name in samples():
        info = index.get(name)
        groups.setdefault("unreadable" if info is None else info.gpu, []).append(name)
    return groups


def _sample_index() -> dict[str, _Sample]:
    """Every readable sample by name, read once per change of the folder (a page asks at every draw)."""
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(SAMPLES.glob("*.vms"))) if SAMPLES.is_dir() else ()
    return _index(stamp)


@functools.lru_cache(maxsize=2)
def _index(stamp: tuple[tuple[str, int], ...]) -> dict[str, _Sample]:
    out = {}
    for name, _ in stamp:
        try:
            s = load_session(SAMPLES / name)
        except SessionError:
            continue
        defaults = not non_default_options(s.plan.policy, s.plan.options)
        out[name] = _Sample(s.graph.key, s.plan.capacity, s.plan.policy, defaults, s.timeline.source,
                            int(s.summary["iteration_ns"]), gpu_of(s) or "simulated", s.plan.mechanism)
    return out


def _measured_samples(graph: Graph, capacity: int, policy: str, gpu: str | None = None,
                      mechanism: Mechanism = Mechanism.UVM) -> list[str]:
    """The measured samples of `policy` through `mechanism` with its default options on this graph at
    this capacity (any capacity holding the footprint, for `device`), measured on `gpu` (None: any), by
    file name."""
    return [name for name, x in _sample_index().items()
            if (x.source, x.key, x.policy, x.defaults) == ("measured", graph.key, policy, True)
            and (x.capacity >= graph.footprint if policy == "device" else x.capacity == capacity)
            and x.mechanism is (Mechanism.UVM if policy == "device" else mechanism) and gpu in (None, x.gpu)]


def _sweep_samples(shown: Session) -> list[tuple[str, _Sample]]:
    """The measured samples the paging cliff draws beside `shown`: its model's, with the policies' default
    options, through uvm (the cliff's lines), and of its GPU when it was measured on one."""
    gpu = gpu_of(shown)
    return [(name, x) for name, x in _sample_index().items()
            if (x.key, x.source, x.defaults, x.mechanism) == (shown.graph.key, "measured", True, Mechanism.UVM)
            and gpu in (None, x.gpu)]


def gpu_of(session: Session) -> str | None:
    """The GPU a measured session ran on, as the sample index names it; None for a simulated one."""
    return str(session.environment.get("gpu", "an unnamed GPU")) if session.timeline.source == "measured" else None


def _measured_baseline(graph: Graph, capacity: int, policy: str, gpu: str | None,
                       mechanism: Mechanism) -> _Baseline | None:
    """A measured sample session of `policy` on the same GPU to compare the shown one with (see
    `_measured_samples`)."""
    for name in _measured_samples(graph, capacity, policy, gpu, mechanism):
        try:
            s = read_sample(name)
            split = s.time_split()  # the typical iteration, as the shown session's figures are
            return _Baseline(split.iteration_ns, "measured", split)
        except SessionError:
            continue
    return None


def _marker_range(graph: Graph, move: Move, kind: str) -> tuple[int, int]:
    n, uses = len(graph.ops), graph.uses[move.tensor]
    o, p = move.offload_after, move.prefetch_after
    wraps = p is not None and p < o
    if wraps:  # a persistent tensor away across the iteration boundary: each end stays on its side
        assert p is not None
        return (uses[-1] if uses else o, n - 1) if kind == "offload" else (-1, uses[0] - 1 if uses else p)
    before = [u for u in uses if u <= o]
    last = before[-1] if before else (-1 if graph.tensors[move.tensor].persistent else o)
    first = next_use(graph, move.tensor, o)
    if kind == "offload":
        return last, (p - 1 if p is not None else (first - 1 if first is not None else n - 1))
    return o + 1, (first - 1 if first is not None else n - 1)


def _new_move(graph: Graph, t: int) -> Move:
    """A trip over the tensor's longest reuse gap, prefetched autovm's default distance ahead."""
    n, distance = len(graph.ops), POLICIES["autovm"].options["prefetch_distance"].default
    gaps = [(use - last, last, use) for last, use in reuse_gaps(graph, t) if use - last >= 2]
    if not gaps:
        raise PlanError(f"{graph.tensors[t].name} is used by consecutive ops only: there is no gap to offload it in")
    _, last, use = max(gaps)
    if use >= n:  # wraps into the next iteration
        return Move(t, last, max(use - n - distance, -1))
    return Move(t, last, max(use - distance, last + 1))


def _tensor_id(graph: Graph, tensor: int | str) -> int:
    if isinstance(tensor, str) and not tensor.lstrip("-").isdigit():
        return graph.tensor_id(tensor)
    t = int(tensor)
    if not 0 <= t < len(graph.tensors):
        raise PlanError(f"tensor {t} is not in the graph (it has {len(graph.tensors)} tensors)")
    return t


def _op(graph: Graph, k: int) -> str:
    return "the iteration start" if k < 0 else f"op {k} ({graph.ops[k].name})"


def _text(e: BaseException) -> str:
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
