"""What a session is: a graph, its plan, what ran (or would run) and where, with the error every
session check raises. The format (format.py) and the files (files.py) both import this module."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property

import numpy as np

from .. import __version__
from ..graph import Graph
from ..plan import Plan, PlanError
from ..plan.pool import executed_graph
from ..records import Timeline, summarize
from ..records.breakdown import TimeSplit, time_split
from ..records.collected import Collected, CollectedError, check_against, collected_summary, migration_shares
from ..records.device_memory import DeviceMemory
from ..simulator import H100_DEFAULT, CostModel
from ..simulator.bound import Bound, lower_bound

FORMAT = "vmexplorer-session"
# 2 added "collected" (the GPU collectors' records), 3 the cost model's "op_gap_ns" and "call_ns", 4
# "collected.memcpy", 7 the "bound" and the cost model's "serialises_directions", 8 "config.mechanism" and
# the cost model's swap rates, 9 "plan.copy_order", 10 "plan.room_bytes" and "device_memory", 11
# "config.workspaces" (the kernels' workspaces as graph tensors inside the capacity; older files load
# with none), 12 the cost model's "workspace_ns" (convolutions timed by their workspace), 13 its
# "evict_fastest_bytes_per_ns" (the bound's eviction rate), 14 "plan.recomputes" (the activations the plan
# makes again, its graph holding their re-runs as ops; older files load with none), 15 "graph.definition"
# (the forward layers of a model that is not built in; null for a built-in); older files still load
SCHEMA_VERSION = 15

class SessionError(ValueError):
    """A session that cannot be saved or loaded; the message names the file and the problem."""


@dataclass(frozen=True, eq=False)  # eq=False: the timeline holds numpy arrays
class Session:
    graph: Graph
    plan: Plan
    timeline: Timeline
    cost_model: CostModel | None
    environment: dict[str, str]  # versions, platform, and (from the engine) the GPU and its driver
    notes: tuple[str, ...]
    created: str  # ISO-8601 UTC, when the run or simulation was made (not when it was saved)
    collected: Collected | None = None  # what CUPTI / NVML recorded in a measured run, if they ran
    # the least traffic and time any schedule needs here, under `cost_model` (the default without one),
    # as worked out when made or last calibrated
    bound: Bound | None = None
    device_memory: DeviceMemory | None = None  # what a measured run took of the GPU's memory (schema 10 on)

    def time_split(self, iteration: int | None = None) -> TimeSplit:
        """Where the typical iteration's time went (`records.breakdown`), each op's own time from the
        session's cost model (a measured session's was fitted to the same model's `device` run)."""
        if iteration is None:
            return self._typical_split
        return self._split(iteration)

    @cached_property
    def _typical_split(self) -> TimeSplit:
        # a session never changes, and the page asks for this at every drawing: worked out once (and,
        # made in the app's work pool, there: it travels with the session)
        return self._split(None)

    def _split(self, iteration: int | None) -> TimeSplit:
        cost = self.cost_model or H100_DEFAULT
        return time_split(self.graph, self.plan, self.timeline, np.array(cost.op_times_ns(self._executed)), iteration)

    @cached_property
    def _executed(self) -> Graph:
        return timing_graph(self.graph, self.plan, self.cost_model)

    @cached_property
    def summary(self) -> dict[str, float | int | str]:
        """The timeline's figures; with collector records, theirs too, prefixed `measured_`. Worked out
        once: callers must not change the dict."""
        figures = summarize(self.graph, self.plan, self.timeline)
        if self.collected is not None:
            measured = collected_summary(self.timeline, self.collected)
            measured.update(migration_shares(self.plan, self.timeline, self.collected, measured))
            figures.update({f"measured_{k}": v for k, v in measured.items()})
        return figures


def timing_graph(graph: Graph, plan: Plan, cost_model: CostModel | None) -> Graph:
    """The graph whose workspaces time `plan`'s convolutions under `cost_model`: the one a run executes
    (`plan.pool.executed_graph`: its pool may give a workspace less) where the model times them by their
    workspace, else the graph the plan runs (placing the pool is then no use)."""
    return executed_graph(graph, plan) if cost_model is not None and cost_model.workspace_ns else plan.graph_of(graph)


def new_session(graph: Graph, plan: Plan, timeline: Timeline, cost_model: CostModel | None = None,
                notes: tuple[str, ...] | list[str] = (),
                environment: dict[str, str] | None = None, *, collected: Collected | None = None,
                bound: Bound | None = None, device_memory: DeviceMemory | None = None,
                executed: Graph | None = None) -> Session:
    """A session stamped now, with this machine's software versions; `environment` adds to them
    (the engine passes the GPU, its driver and CUDA). `collected`: the collectors' records of a
    measured run (see `vmexplorer.records.collected`), checked against the timeline. `bound`: the
    plan's graph and capacity against `simulator.bound.lower_bound` (under the cost model it used); a
    measured session given none gets `bound_for` its plan under its `cost_model`, as every run is held
    against the bound (its simulated kin are made where the bound is at hand, and some many times a
    second), and no bound without a cost model: a measured run is judged by its own GPU's. `executed`: the
    caller's `timing_graph` of the plan under `cost_model`, where it has worked it out (its pool placed
    once, not again for the session's time split)."""
    graph = plan.graph_of(graph)
    check_matches(graph, plan)
    check_collected(collected, timeline)
    if bound is not None and not isinstance(bound, Bound):
        raise SessionError(f"bound should be a simulator.bound.Bound, not {type(bound).__name__}")
    if bound is None and timeline.source == "measured" and cost_model is not None:
        # under its own GPU's model only: another GPU's (the uncalibrated H100 default) would put the bound
        # above a faster GPU's measurement; a measured session with none has no bound
        bound = bound_for(graph, plan, cost_model)
    env = {"vmexplorer": __version__, "python": platform.python_version(),
           "platform": platform.platform(), "numpy": np.__version__}
    env.update(environment or {})
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    session = Session(graph, plan, timeline, cost_model, env, tuple(notes), created, collected, bound, device_memory)
    if executed is not None:
        vars(session)["_executed"] = executed  # `cached_property` keeps its value there
    return session


def bound_for(graph: Graph, plan: Plan, cost_model: CostModel | None = None) -> Bound | None:
    """The bound at the plan's capacity through its mechanism under `cost_model`, or the uncalibrated
    default (whose rates a session without a cost model is simulated and split with too); None below
    the least capacity any plan needs, where there is no bound to hold a plan against. A plan that
    recomputes is held against the joint bound (any mix of keeping, moving and recomputing), since the
    least traffic of moves alone is not a bound on it."""
    try:
        return lower_bound(plan.graph_of(graph), plan.capacity, cost_model or H100_DEFAULT, plan.mechanism,
                           recompute=bool(plan.recomputes))
    except PlanError:
        return None


def check_matches(graph: Graph, plan: Plan) -> None:
    if plan.key != graph.key:
        raise SessionError(f"the plan is for {plan.key} but the graph is {graph.key} "
                           "(model, batch, image size); compile the plan for this graph")
    if graph.workspaces != plan.config.workspaces or graph.capacity not in (None, plan.planned_with):
        raise SessionError(f"the plan is made with {plan.planned_with} bytes of room with workspaces "
                           f"{'inside' if plan.config.workspaces else 'outside'} the capacity, but the graph's "
                           f"are {'fitted to ' + str(graph.capacity) + ' bytes' if graph.capacity else 'absent'}; "
                           "use the plan's graph (session.planned.graph_of)")
    held = (graph.full or graph).recomputes
    if held != plan.recomputes:
        raise SessionError(f"the graph's recomputations are not the plan's ({len(held)} in the graph, "
                           f"{len(plan.recomputes)} in the plan); use the graph the plan runs (Plan.graph_of)")


def check_collected(collected: Collected | None, timeline: Timeline) -> None:
    if collected is None:
        return
    if not isinstance(collected, Collected):
        raise SessionError(f"collected should be a records.Collected, not {type(collected).__name__}")
    try:
        check_against(collected, timeline)
    except CollectedError as e:
        raise SessionError(f"the collected records do not fit the timeline: {e}") from None
