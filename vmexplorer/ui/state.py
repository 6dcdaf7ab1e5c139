"""The app's one store: every decision the page shows, as typed parameters, with pure methods and no
widgets. The panels (`ui.*`) draw it and call its methods; tests drive it directly.

What is shown: a session (loaded, or simulated after an edit), the one it was loaded or configured as,
the cost model its edits are simulated with, its moves as edited, where it came from (`Source`: a
sample, a configuration, an upload, a GPU run), and a session compared with it. How it is shown: the x
axis, the iteration, the tab, the lesson step, the projector's large type and the tensor lit up; a link
holds these (`ui.link`). Every method that takes input from a person returns normally: a problem becomes
`message` (shown in place on the page, the last action's `status` cleared) and leaves the store as it
was; should the page fail to draw what an action opened, it puts back what it showed (`shown`,
`restore`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import param

from ..config import Config, Mechanism
from ..graph import MODELS, Graph, GraphError, Recompute, build_graph
from ..plan import Move, PlanError
from ..plan.moves import format_edits, parse_edits
from ..policies import POLICIES
from ..session import Session, SessionError, load_session, new_session, session_from_bytes, timing_graph
from ..session.planned import plan_for
from ..session.samples import DEFAULT_SAMPLE, SAMPLES, gpu_of, is_sample, measured_samples, read_sample, samples
from ..simulator import H100_DEFAULT, CostModel, calibrate, simulate
from ..units import format_bytes, parse_bytes, quoted
from . import edits

TABS = ("Session", "Paging cliff", "Lesson", "Compare")
AXES = ("time", "op")
ALL_ITERATIONS = "all"


@dataclass(frozen=True)
class Source:
    """Where the shown session came from, as a link names it."""

    kind: str  # "sample", "config" (simulated in the app), "upload" or "run" (a GPU run of this page)
    name: str = ""  # the sample's or the uploaded file's name, or the run's
    config: Config | None = None  # the configuration simulated
    cost: str = ""  # the sample whose cost model simulated it ("": the uncalibrated default; "upload": a file's)

    @property
    def reproducible(self) -> bool:
        """Whether a link can open it again: a sample, or a configuration of a built-in model simulated with a
        sample's cost model (a model from a file is in the session only)."""
        return self.kind == "sample" or (self.kind == "config" and self.cost != "upload" and
                                         (self.config is None or self.config.definition is None))


@dataclass(frozen=True)
class Shown:
    """Everything of a store that a page draws, but its messages."""

    session: Session | None
    loaded: Session | None
    cost_model: CostModel | None
    moves: tuple[Move, ...]
    recomputes: tuple[Recompute, ...]
    origin: str
    source: Source | None
    comparison: Session | None
    comparison_origin: str


class AppState(param.Parameterized):
    session = param.ClassSelector(class_=Session, default=None, allow_None=True,
                                  doc="the Session shown (loaded, or simulated after an edit)")
    loaded = param.ClassSelector(class_=Session, default=None, allow_None=True,
                                 doc="the session as loaded or configured, before any edit")
    cost_model = param.ClassSelector(class_=CostModel, default=None, allow_None=True,
                                     doc="what the shown session's edits, baselines and bound are worked out with")
    moves = param.List(default=[], item_type=Move, doc="the plan's round trips, as edited (numbered in the "
                                                        "graph it runs, its re-runs as ops: the session's)")
    recomputes = param.List(default=[], item_type=Recompute,
                            doc="the activations the plan makes again, as edited (numbered in the graph "
                                "without re-runs, as `Plan.recomputes`)")
    origin = param.String(default="", doc="where the shown session came from, in words")
    source = param.ClassSelector(class_=Source, default=None, allow_None=True, doc="where it came from, for a link")
    comparison = param.ClassSelector(class_=Session, default=None, allow_None=True,
                                     doc="the session compared against, or None")
    comparison_origin = param.String(default="")
    axis: param.Selector = param.Selector(default="time", objects=list(AXES), doc="the timeline's x axis")
    iteration = param.String(default="", doc="the iteration drawn, from 1, or 'all'; '' the typical one")
    tab: param.Selector = param.Selector(default=TABS[0], objects=list(TABS))
    step = param.Integer(default=0, bounds=(0, None), doc="the lesson step shown, from 1; 0: no lesson")
    projector = param.Boolean(default=False, doc="large type, for a projector")
    picked = param.Integer(default=None, allow_None=True, doc="the tensor lit up")
    message = param.String(default="", doc="the last problem, in words; empty when the last action worked")
    status = param.String(default="", doc="what the last action did (clamping included)")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._unedited: tuple[Any, Session | None] = (None, None)

    # --- opening ----------------------------------------------------------------------------------
    def open_sample(self, name: str = DEFAULT_SAMPLE) -> bool:
        """Open a sample session by its file name (from a picker or a link: untrusted)."""
        if not is_sample(name):
            return self.fail(f"there is no sample session {quoted(name[:80])}; the samples are: {', '.join(samples())}")
        try:
            session = read_sample(name)
        except SessionError as e:
            return self.fail(str(e))
        return self._open(session, name, Source("sample", name))

    def load(self, source: str | os.PathLike[str] | bytes, name: str | None = None) -> bool:
        """Open a session file (a path) or an upload (bytes); False and `message` if it is not one."""
        try:
            session, label = _open(source, name)
        except (SessionError, PlanError, ValueError) as e:
            return self.fail(str(e))
        return self._open(session, label, Source("upload", label))

    def show_measured(self, session: Session, name: str) -> bool:
        """Show the session a GPU run of this page measured (from the app's own worker, which ran the
        plan this page compiled: not read back from a file)."""
        if not isinstance(session, Session):
            return self.fail(f"{name} returned no session")
        return self._open(session, name, Source("run", name))

    def _open(self, session: Session, label: str, source: Source) -> bool:
        try:
            cost = _cost_for(session)
        except (SessionError, PlanError, ValueError) as e:
            return self.fail(str(e))
        self._show(session, f"{session.timeline.source} session `{label}`", session, cost, source, f"opened {label}")
        return True

    def simulate_config(self, model: str, batch: int, capacity_text: str, policy: str,
                        options: Mapping[str, Any] | None = None, mechanism: str = "uvm",
                        cost: tuple[str, CostModel] | None = None) -> bool:
        """Plan `policy` for the model under `mechanism` and simulate it, with the loaded session's cost
        model when it ran this graph (a model's op times are by name, for its batch), else the
        uncalibrated default; `cost` names another, by the sample it came from (a link's)."""
        try:
            graph = self.model_graph(model, int(batch))
            capacity = parse_bytes(capacity_text, graph.footprint)
            config = Config(model, int(batch), graph.image_size, capacity, policy, dict(options or {}),
                            _mechanism(mechanism), definition=graph.definition)
            named, model_cost = cost or self._cost_for_graph(graph)
            spec = POLICIES.get(policy)  # a policy that plans a person's moves plans the ones shown
            moves, steps = self._edits_for(graph) if spec is not None and spec.takes_moves else ([], [])
            planned = plan_for(config, model_cost, moves, graph=graph, recomputes=steps)
            session = planned.simulated(notes=[f"simulated in the app with {model_cost.name}"])
        except (GraphError, PlanError, SessionError, ValueError, TypeError) as e:
            return self.fail(str(e))
        through = "" if planned.plan.mechanism is Mechanism.UVM else f" through {planned.plan.mechanism}"
        self._show(session, f"simulated: {model} batch {batch}, {policy}{through} at {format_bytes(capacity)}",
                   session, model_cost, Source("config", config=planned.plan.config, cost=named),
                   f"simulated {policy} with {model_cost.name}")
        return True

    def model_graph(self, model: str, batch: int) -> Graph:
        """The graph of `model` at `batch`: a built-in one's, or that of the model from a file whose session is
        shown or loaded (its session carries its definition), at that session's image size."""
        if model not in MODELS:
            for s in (self.session, self.loaded):
                if s is not None and s.graph.definition is not None and s.graph.model == model:
                    return build_graph(model, batch, s.graph.image_size, definition=s.graph.definition)
        return build_graph(model, batch)

    def _cost_for_graph(self, graph: Graph) -> tuple[str, CostModel]:
        """The cost model a new configuration of `graph` is simulated with, and where it came from as a
        link names it (`Source.cost`): the shown session's when it ran this graph, else the default."""
        loaded, cost, source = self.loaded, self.cost_model, self.source
        if loaded is None or cost is None or source is None or not _same_model(loaded.graph, graph):
            return "", H100_DEFAULT
        return {"sample": source.name, "config": source.cost}.get(source.kind, "upload"), cost

    def open_sweep_point(self, policy: str, capacity_pct: float) -> bool:
        """Open a point of the paging cliff: the measured sample there if there is one, else its simulation."""
        s = self.session
        if s is None:
            return self.fail("nothing shown to sweep")
        g = s.graph
        near = _near_samples(g, capacity_pct, policy, gpu_of(s))
        if near:
            return self.open_sample(near[0])
        try:  # simulated today: workspaces inside the capacity, the share of the footprint they make
            g = build_graph(g.model, g.batch, g.image_size, definition=g.definition)
        except GraphError as e:
            return self.fail(str(e))
        capacity = max(int(g.footprint * capacity_pct / 100), g.min_capacity[0])
        return self.simulate_config(g.model, g.batch, str(capacity), policy)

    # --- editing the plan -------------------------------------------------------------------------
    def marker_range(self, kind: str, tensor: int | str, from_op: int | None = None) -> tuple[int, int]:
        """The ops (as `issue_after`) a marker may be dragged to (`edits.marker_range`)."""
        graph = self._graph()
        return edits.marker_range(graph, edits.find_move(graph, list(self.moves), kind, tensor, from_op)[1], kind)

    def drag(self, marker_kind: str, tensor: int | str, to_op: int, from_op: int | None = None) -> bool:
        """Move one marker: `to_op` is the op it is issued after (-1: the iteration's start), snapped
        and clamped to `marker_range`; then re-plan as `manual` and re-simulate. `from_op` picks one
        of the tensor's trips when it has several (the marker's current `issue_after`)."""
        try:
            graph = self._graph()
            i, move = edits.find_move(graph, list(self.moves), marker_kind, tensor, from_op)
            lo, hi = edits.marker_range(graph, move, marker_kind)
            to = int(round(float(to_op)))
            snapped = min(max(to, lo), hi)
            edited = replace(move, offload_after=snapped) if marker_kind == "offload" else \
                replace(move, prefetch_after=snapped)
            clamp = "" if snapped == to else f" (clamped from {to}: it may go from {lo} to {hi})"
            self._replan([*self.moves[:i], edited, *self.moves[i + 1:]],
                         f"{marker_kind} of {graph.tensors[move.tensor].name} now issued after "
                         f"{edits.op_words(graph, snapped)}{clamp}")
        except (PlanError, KeyError, ValueError, TypeError) as e:
            return self.fail(_text(e))
        return True

    def toggle_offload(self, tensor: int | str) -> bool:
        """Drop every round trip of a tensor, or add one over its longest gap between uses (`edits.new_move`)."""
        try:
            graph = self._graph()
            t = edits.tensor_id(graph, tensor)
            name = graph.tensors[t].name
            if any(mv.tensor == t for mv in self.moves):
                self._replan([mv for mv in self.moves if mv.tensor != t], f"{name} is no longer offloaded")
                return True
            move = edits.new_move(graph, t)
            prefetch = move.prefetch_after if move.prefetch_after is not None else -1
            self._replan(sorted([*self.moves, move], key=lambda mv: (mv.offload_after, mv.tensor)),
                         f"{name} offloaded after {edits.op_words(graph, move.offload_after)}, prefetched after "
                         f"{edits.op_words(graph, prefetch)}")
        except (PlanError, KeyError, ValueError) as e:
            return self.fail(_text(e))
        return True

    def choose(self, tensor: int | str, choice: str) -> bool:
        """Switch a tensor (of the shown plan's graph) to keep, move or recompute (`edits.choose`), then re-plan
        as `manual` and re-simulate, as a drag does."""
        try:
            moves, steps, said = edits.choose(self._graph(), self.moves, self.recomputes, tensor, choice)
            self._replan(moves, said, steps)
        except (PlanError, KeyError, ValueError) as e:
            return self.fail(_text(e))
        return True

    def reset_edits(self) -> bool:
        if self.loaded is None:
            return self.fail("nothing is loaded")
        self._show(self.loaded, self.origin.split(" (edited)")[0], self.loaded, self.cost_model, self.source,
                   "edits undone")
        return True

    @property
    def edited(self) -> bool:
        """Whether the shown session is an edit of the one loaded."""
        return self.session is not None and self.loaded is not None and self.session is not self.loaded

    def unedited(self) -> Session | None:
        """The loaded plan simulated with the cost model edits are simulated with: what an edit is held
        against, so its effect is never confused with the model's error against a measurement. None
        when nothing is edited."""
        if not self.edited:
            return None
        loaded, cost = self.loaded, self.cost_model or H100_DEFAULT
        assert loaded is not None
        was = self._unedited[0]
        if was is None or was[0] is not loaded or was[1] != cost.name:
            g = loaded.graph
            executed = timing_graph(g, loaded.plan, cost)
            self._unedited = ((loaded, cost.name), new_session(
                g, loaded.plan, simulate(g, loaded.plan, cost, executed), cost,
                notes=[f"the plan before the edits, simulated with {cost.name}"], executed=executed))
        return self._unedited[1]

    def unedited_kept(self) -> tuple[str, Session] | None:
        """The unedited plan's simulation as `unedited` keeps it (by its cost model's name), if it is of the
        loaded plan: to hand to another store of the same session (`keep_unedited`)."""
        was, session = self._unedited
        return None if was is None or was[0] is not self.loaded or session is None else (was[1], session)

    def keep_unedited(self, cost_name: str, session: Session) -> None:
        """Take `unedited`'s simulation of the loaded plan from another store of it (`unedited_kept`)."""
        self._unedited = ((self.loaded, cost_name), session)

    def edits_text(self) -> str:
        """The edits of the shown plan against the loaded one, as a link holds them (empty: none)."""
        if not self.edited or self.loaded is None:
            return ""
        return format_edits(self.loaded.plan.moves, self.moves, self.loaded.plan.recomputes, self.recomputes)

    def apply_edits(self, text: str) -> bool:
        """Apply a link's edits (`edits_text`) to the loaded plan and simulate; False and `message` when
        the text is not edits of this plan."""
        if self.loaded is None:
            return self.fail("nothing is loaded to apply the link's edits to")
        try:
            plan = self.loaded.plan
            moves, steps = parse_edits(self.loaded.graph, plan.moves, text, plan.recomputes)
            if moves != list(plan.moves) or steps != list(plan.recomputes):
                # the shown plan's graph and capacity: the loaded one's
                self._replan(moves, "opened the link's edits", steps)
            elif self.edited:
                self.reset_edits()
        except PlanError as e:
            return self.fail(f"the link's edits cannot be applied: {_text(e)}")
        return True

    # --- comparing --------------------------------------------------------------------------------
    def compare_with(self, other: Session | str | os.PathLike[str] | bytes | None, name: str | None = None) -> bool:
        """Set the session compared against (None clears it); sample names, paths and uploads are opened first."""
        try:
            if other is None or isinstance(other, Session):
                session, label = other, name or ("" if other is None else "a session")
            elif isinstance(other, str) and is_sample(other):
                session, label = read_sample(other), name or other
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
        shown = self.source.name if self.source is not None and self.source.kind == "sample" else None
        return next((n for n in measured_samples(s.graph, s.plan.capacity, policy, gpu_of(s), through)
                     if n != shown), None)

    def compare_with_twin(self, policy: str = "uvm", mechanism: Mechanism | None = None) -> bool:
        """Compare the shown session with its measured twin of `policy` through `mechanism` (None: the
        shown session's): one click in the app."""
        name = self.twin(policy, mechanism)
        if name is None:
            through = "" if mechanism is None else f" through {mechanism.value}"
            return self.fail(f"no measured {policy} sample{through} of this model, batch and capacity to compare with")
        return self.compare_with(name)

    def other_mechanism(self) -> Mechanism | None:
        """The mechanism the shown schedule is not run through (swap for uvm and back); None with nothing shown."""
        s = self.session
        return None if s is None else Mechanism.SWAP if s.plan.mechanism is Mechanism.UVM else Mechanism.UVM

    def compare_mechanisms(self) -> bool:
        """Compare the shown schedule (its moves, edits included) with the same schedule through the other
        mechanism, simulated with the cost model edits are: what the UVM driver costs against pinned copies."""
        s, other = self.session, self.other_mechanism()
        if s is None or other is None:
            return self.fail("nothing shown to compare")
        cost = self.cost_model or H100_DEFAULT
        try:
            config = replace(s.plan.config, policy="manual", options={}, mechanism=other)
            session = plan_for(config, cost, list(self.moves), graph=s.graph,
                               recomputes=self.recomputes).simulated(
                notes=[f"the moves of {self.origin} through {other}, simulated with {cost.name}"])
        except (PlanError, SessionError, ValueError) as e:
            return self.fail(f"the same schedule cannot run through {other}: {e}")
        return self.compare_with(session, f"the same schedule through {other} (simulated)")

    # --- the lesson's moves -----------------------------------------------------------------------
    def show_step(self, step: int, tab: str, lit: int | None) -> None:
        """Show a lesson step's view: its tab, the time axis, the typical iteration, the tensor it lights."""
        self.param.update(step=step, tab=tab, axis="time", iteration="", picked=lit)

    # --- what the page shows, as one value --------------------------------------------------------
    def fail(self, text: str) -> bool:
        """Say what went wrong (False, for `return self.fail(...)`); the status of an earlier action goes,
        so it never reads as the outcome of this one."""
        self.param.update(message=text, status="")
        return False

    def shown(self) -> Shown:
        """What is shown now, to put back with `restore` if showing something else fails."""
        return Shown(self.session, self.loaded, self.cost_model, tuple(self.moves), tuple(self.recomputes),
                     self.origin, self.source,
                     self.comparison, self.comparison_origin)

    def restore(self, shown: Shown, why: str) -> None:
        """Show `shown` again and say `why`: the page could not draw what an action opened."""
        self.param.update(session=shown.session, loaded=shown.loaded, cost_model=shown.cost_model,
                          moves=list(shown.moves), recomputes=list(shown.recomputes), origin=shown.origin,
                          source=shown.source,
                          comparison=shown.comparison, comparison_origin=shown.comparison_origin,
                          message=why, status="")

    def shown_iteration(self) -> int | None:
        """The recorded iteration drawn, from 0 (the typical one unless one was picked); None: all of them."""
        s = self.session
        if s is None or s.timeline.iterations <= 1 or self.iteration == ALL_ITERATIONS:
            return None
        n = int(self.iteration) - 1 if self.iteration.isdigit() else -1
        return n if 0 <= n < s.timeline.iterations else int(s.timeline.typical_iteration())

    # --- internals --------------------------------------------------------------------------------
    def _graph(self) -> Graph:
        if self.session is None:
            raise PlanError("load or simulate a session first")
        graph: Graph = self.session.graph
        return graph

    def _edits_for(self, graph: Graph) -> tuple[list[Move], list[Recompute]]:
        if self.session is None or not _same_model(self.session.graph, graph):
            return [], []
        return list(self.moves), list(self.recomputes)

    def _show(self, session: Session, origin: str, loaded: Session, cost: CostModel | None,
              source: Source | None, status: str) -> None:
        """Show `session`, all at once: whoever draws it finds every parameter set, the status too."""
        new_graph = self.session is None or self.session.graph.key != session.graph.key
        view: dict[str, Any] = {} if loaded is self.loaded else {"iteration": ""}
        self.param.update(loaded=loaded, cost_model=cost, moves=list(session.plan.moves),
                          recomputes=list(session.plan.recomputes), origin=origin,
                          source=source, message="", status=status, session=session,
                          **view, **({"picked": None} if new_graph else {}))

    def _replan(self, moves: Sequence[Move], status: str, recomputes: Sequence[Recompute] | None = None) -> None:
        """Plan the moves, with the recomputes (None: the shown plan's, so that its op numbers stay put), as
        `manual` through the shown mechanism and simulate them; raises PlanError and changes nothing then.
        Under swap the copy streams take the order its simulation runs fastest in."""
        s = self.session
        assert s is not None
        steps = list(self.recomputes if recomputes is None else recomputes)
        cost = self.cost_model or H100_DEFAULT
        config = replace(s.plan.config, policy="manual", options={})
        session = plan_for(config, cost, list(moves), graph=s.graph, recomputes=steps).simulated(
            notes=[f"a manual plan edited in the app from {self.origin}, simulated with {cost.name}"])
        origin = self.origin if self.origin.endswith("(edited)") else f"{self.origin} (edited)"
        self.param.update(moves=list(moves), recomputes=list(session.plan.recomputes), origin=origin,
                          message="", status=status, session=session)


def store_param() -> Any:
    """The parameter a panel holds the page's store in (typed as the store, for the type checker)."""
    return param.ClassSelector(class_=AppState, doc="the page's store")


def _near_samples(graph: Graph, capacity_pct: float, policy: str, gpu: str | None) -> list[str]:
    """Measured samples of `policy` on this graph within half a percent of `capacity_pct` (a tap's point)."""
    from ..config import share_of_footprint
    from ..session.samples import sample_index

    return [x.name for x in sample_index().values()
            if (x.source, x.key, x.policy, x.defaults, x.mechanism) == ("measured", graph.key, policy, True,
                                                                        Mechanism.UVM)
            and gpu in (None, x.gpu) and abs(share_of_footprint(x.capacity, graph.footprint) - capacity_pct) < 0.5]


def _same_model(a: Graph, b: Graph) -> bool:
    """Whether two graphs train one model at one batch and image size: by key, and by definition for models
    from files (two of one file name are two models)."""
    return a.key == b.key and a.definition == b.definition


def _mechanism(text: str | Mechanism) -> Mechanism:
    try:
        return Mechanism(text)
    except ValueError:
        raise PlanError(f"unknown mechanism {text!r}; choose one of: "
                        f"{', '.join(m.value for m in Mechanism)}") from None


def _open(source: str | os.PathLike[str] | bytes, name: str | None) -> tuple[Session, str]:
    """A session file (a path) or an upload (bytes), and its label; SessionError if it is not one."""
    if isinstance(source, bytes | bytearray):
        label = name or "the uploaded file"
        return session_from_bytes(bytes(source), label), label  # which holds it to the loader's limits
    path = Path(source)
    return (read_sample(path.name) if path.parent == SAMPLES else load_session(path)), name or path.name


def _cost_for(session: Session) -> CostModel:
    """What edits of `session` are simulated with: the cost model stored in it (a sample session's was
    fitted to its GPU's runs, `vmexplorer calibrate`), else one fitted to it now."""
    if session.cost_model is not None:
        return session.cost_model
    if session.timeline.source == "measured":
        return calibrate(session.graph, session.plan, session.timeline)
    return H100_DEFAULT


def _text(e: BaseException) -> str:
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
