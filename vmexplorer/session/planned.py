"""The one door from a configuration to a plan: `plan_for(config, cost_model, edits)`.

The command line, the app, the GPU worker's callers and the bench scripts all plan here, so a policy
that searches in the simulator (`tuned`) and a swap plan's copy order are always worked out with the
cost model the plan is then simulated with, and the same configuration gives the same plan wherever it
is asked for. The result carries what the planning said (a search's report) and the bound the plan is
held against, under the same cost model.

A search and a bound each take up to seconds (the window bound of ResNet-152) and are deterministic for
what they are given, so their results are kept for the life of the process (`_searched`, `_bound`): a
class's pages asking for the same `tuned` plan search once, and an edit, which keeps the graph, the
capacity and the cost model, reuses its bound. So is where a configuration's time goes (`simulated_split`),
which the app sets beside every session it shows (the baselines, the paging cliff). Plans of the other
policies are not kept: they take milliseconds.

The app works these out in worker processes (`vmexplorer.pool`), whose results the server keeps as if it
had worked them out itself: `recording()` collects what a piece of work looked up or worked out, and
`keep()` adds it to another process's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

import numpy as np

from ..config import Config, Mechanism
from ..graph import Definition, Graph, Recompute, build_graph
from ..plan import Move, Plan, PlanError
from ..policies import POLICIES, Simulation, check_mechanism, compile_plan
from ..records.breakdown import TimeSplit, time_split
from ..simulator import CostModel, simulate
from ..simulator.bound import Bound, lower_bound
from .session import Session, new_session, timing_graph

R = TypeVar("R")
Entries = dict[str, dict[tuple[Any, ...], Any]]  # by memo, its results by arguments


class Memo(Generic[R]):
    """`functools.lru_cache` for one function of hashable arguments, whose entries can be read out and
    put into another process's memo of the same function (`recording`, `keep`). Thread-safe; a result
    is worked out outside the lock, so two threads asking for the same new one may both work it out."""

    def __init__(self, fn: Callable[..., R], maxsize: int) -> None:
        self.fn, self.maxsize, self.name = fn, maxsize, fn.__name__
        self._kept: OrderedDict[tuple[Any, ...], R] = OrderedDict()
        self._lock = threading.Lock()
        _MEMOS[self.name] = self

    def __call__(self, *key: Any) -> R:
        with self._lock:
            found = key in self._kept
            if found:
                self._kept.move_to_end(key)
                value = self._kept[key]
        if not found:
            value = self.fn(*key)
            self.put(key, value)
        if _RECORD is not None:
            _RECORD.setdefault(self.name, {})[key] = value
        return value

    def put(self, key: tuple[Any, ...], value: R) -> None:
        with self._lock:
            self._kept[key] = value
            self._kept.move_to_end(key)
            while len(self._kept) > self.maxsize:
                self._kept.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


_MEMOS: dict[str, Memo[Any]] = {}
_RECORD: Entries | None = None  # what this process looks up while `recording`: a worker runs one job at a time


@contextlib.contextmanager
def recording() -> Iterator[Entries]:
    """Collect every result the memos give (looked up or worked out) until the block ends, by memo;
    one recording at a time per process (a worker process's job)."""
    global _RECORD
    entries: Entries = {}
    _RECORD = entries
    try:
        yield entries
    finally:
        _RECORD = None


def keep(entries: Mapping[str, Mapping[tuple[Any, ...], Any]]) -> None:
    """Put results another process worked out (`recording`) into this process's memos."""
    for name, rows in entries.items():
        kept = _MEMOS.get(name)
        if kept is not None:
            for key, value in rows.items():
                kept.put(key, value)


def memo(maxsize: int) -> Callable[[Callable[..., R]], Memo[R]]:
    """A function's `Memo` of at most `maxsize` results, as a decorator."""
    return lambda fn: Memo(fn, maxsize)


@dataclass(frozen=True)
class Planned:
    """A configuration's plan under a cost model, with what its planning reported."""

    graph: Graph
    plan: Plan
    cost_model: CostModel
    reports: tuple[str, ...]  # what a search (`tuned`) or the copy order said of itself, for people

    @cached_property
    def bound(self) -> Bound | None:
        """The least time any schedule takes at this graph, capacity and mechanism under the same cost
        model; None below the least capacity the graph runs in."""
        return bound_at(self.graph, self.plan.capacity, self.cost_model, self.plan.mechanism,
                        recompute=bool(self.plan.recomputes))

    def simulated(self, notes: Sequence[str] = ()) -> Session:
        """The plan simulated with its cost model, as a session holding its bound and reports."""
        executed = timing_graph(self.graph, self.plan, self.cost_model)
        timeline = simulate(self.graph, self.plan, self.cost_model, executed)
        return new_session(self.graph, self.plan, timeline, self.cost_model, notes=[*self.reports, *notes],
                           bound=self.bound, executed=executed)


def plan_for(config: Config, cost_model: CostModel, edits: Sequence[Move] = (),
             graph: Graph | None = None, recomputes: Sequence[Recompute] = ()) -> Planned:
    """`config`'s plan, searched (`tuned`) and copy-ordered (`swap`) in the simulator under `cost_model`.
    `edits` are a person's moves and `recomputes` the activations they make again, for a policy that plans
    a person's plan (`manual`): the recomputes numbered in the graph without re-runs, the moves in the
    graph with them (`Plan.graph_of`), as a plan's own are. `graph` is `config`'s graph
    where the caller has it (built from the config otherwise). PlanError (or GraphError) says what
    cannot be planned and why."""
    graph = graph if graph is not None else _graph(config)
    if config.definition is None:  # a model from a file, configured by name beside its graph
        config = dataclasses.replace(config, definition=graph.definition)
    if graph.key != config.key:
        raise PlanError(f"the graph is {graph.key} but the configuration is for {config.key}")
    if graph.definition != config.definition:
        raise PlanError(f"the graph and the configuration are of two different models named {config.model}")
    graph = graph.full or graph  # planned from full workspaces, each plan's fitted to the room it is made with
    spec = POLICIES.get(config.policy)
    if spec is not None and spec.searches:
        config = dataclasses.replace(config, mechanism=check_mechanism(spec, config.mechanism))
        plan, reports = _searched(_json(config), _json(cost_model), config.definition)
        return Planned(graph.fitted(plan.planned_with), plan, cost_model, reports)
    said: list[str] = []
    plan = compile_plan(graph, config.capacity, config.policy, config.options, edits,
                        simulation=Simulation(simulate, lower_bound, cost_model, said.append),
                        mechanism=config.mechanism, recomputes=recomputes)
    return Planned(graph.fitted(plan.planned_with), plan, cost_model, tuple(said))


def graph_of(config: Config, room: int = 0) -> Graph:
    """The graph a config trains: its model, with the kernels' workspaces fitted to the room its plan was
    made with (`Plan.planned_with`; 0: the capacity)."""
    return _graph(config).fitted(room or config.capacity)


def _graph(config: Config) -> Graph:
    """`config`'s model, built in or from the definition it carries (a model from a file)."""
    return build_graph(*config.key, workspaces=config.workspaces, definition=config.definition)


def bound_at(graph: Graph, capacity: int, cost_model: CostModel, mechanism: str, recompute: bool = False
             ) -> Bound | None:
    """The bound at a capacity through a mechanism under a cost model (`simulator.bound.lower_bound`;
    `recompute`: the joint bound, for a plan that recomputes), or None below the least capacity the graph
    runs in."""
    return _bound(graph.key, graph.definition, graph.workspaces, capacity, _json(cost_model), str(mechanism),
                  recompute)


def simulated_split(config: Config, cost_model: CostModel) -> TimeSplit | None:
    """Where the typical iteration of `config`'s plan, simulated with `cost_model`, spends its time; None
    where the configuration cannot be planned (a capacity below what the policy needs)."""
    return _split(_json(config), _json(cost_model), config.definition)


# The memos below keep results by the configuration as JSON and, for a model that is not built in, its
# definition too (equal and hashed by its digest): two models of one name are two entries.
@memo(maxsize=1024)  # a paging cliff holds dozens; each is five numbers
def _split(config_json: str, cost_json: str, definition: Definition | None) -> TimeSplit | None:
    c = json.loads(config_json)
    config = Config(c["model"], c["batch"], c["image_size"], c["capacity_bytes"], c["policy"], c["options"],
                    Mechanism(c["mechanism"]), c["workspaces"], definition)
    cost = CostModel(**json.loads(cost_json))
    try:
        planned = plan_for(config, cost)
    except PlanError:
        return None
    # where the time goes, without the bound: a paging cliff asks this at dozens of capacities
    executed = timing_graph(planned.graph, planned.plan, cost)
    timeline = simulate(planned.graph, planned.plan, cost, executed)
    return time_split(planned.graph, planned.plan, timeline, np.array(cost.op_times_ns(executed)))


def _json(value: Config | CostModel) -> str:
    # a cost model's fields are numbers, names and dicts of numbers: its own dict serialises as is (asdict's
    # deep copy of hundreds of op times was a third of an edit's time, asked for at every baseline)
    return json.dumps(value.as_json() if isinstance(value, Config) else vars(value), sort_keys=True)


@memo(maxsize=64)
def _bound(key: tuple[str, int, int], definition: Definition | None, workspaces: bool, capacity: int,
           cost_json: str, mechanism: str, recompute: bool) -> Bound | None:
    try:
        return lower_bound(build_graph(*key, workspaces=workspaces, definition=definition), capacity,
                           CostModel(**json.loads(cost_json)), mechanism, recompute=recompute)
    except PlanError:
        return None


@memo(maxsize=32)  # one per configuration a server's pages searched; each plan is small
def _searched(config_json: str, cost_json: str, definition: Definition | None) -> tuple[Plan, tuple[str, ...]]:
    c, cost = json.loads(config_json), CostModel(**json.loads(cost_json))
    graph = build_graph(c["model"], c["batch"], c["image_size"], workspaces=c["workspaces"], definition=definition)
    said: list[str] = []
    plan = compile_plan(graph, c["capacity_bytes"], c["policy"], c["options"],
                        simulation=Simulation(simulate, lower_bound, cost, said.append), mechanism=c["mechanism"])
    return plan, tuple(said)
