"""What a policy declares to the registry: its name, a one-line summary, the function that plans its
moves (and, for one that recomputes, the one that says what it makes again), and its options (each
with a type, a default, a help line, and choices or bounds); and what a policy that searches
schedules in the simulator is given to search with (`Simulation`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import Mechanism
from ..graph import Graph, Recompute
from ..plan import Move, Plan

# the options' upper bounds: past any model's ops or a GPU's bytes, or longer than a person waits for a plan
MAX_DISTANCE = 10_000  # ops
MAX_BYTES = 2**50
MAX_SEARCH_STEPS = 100_000
MAX_SEARCH_SECONDS = 60.0


@dataclass(frozen=True)
class OptionSpec:
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] = ()
    minimum: int | None = None
    maximum: float | None = None  # every number has one: what a class or an engineer needs, not what a type holds
    # a safety cap (a search's wall-clock seconds): it stops runaway work and is not meant to decide the plan,
    # so a plan made with another value still ran the policy as shipped (`non_default_options`)
    safety: bool = False


class PlanMoves(Protocol):
    def __call__(self, graph: Graph, capacity: int, options: Mapping[str, Any],
                 moves: Sequence[Move]) -> list[Move]:
        """The round trips the policy plans on `graph` at `capacity` bytes. `options` holds every
        declared option, checked and defaulted; `moves` are a person's moves, given only to a policy
        that takes them (empty otherwise). PlanError when the policy refuses, saying why and the fix."""
        ...


class PlanRecomputes(Protocol):
    def __call__(self, graph: Graph, capacity: int, options: Mapping[str, Any],
                 recomputes: Sequence[Recompute]) -> list[Recompute]:
        """The activations the policy drops after their forward uses and makes again before their backward
        ones (`graph.recompute`), numbered in `graph` (the graph without re-runs); its moves are then planned
        on the graph holding the re-runs. `recomputes` are a person's steps, given only to a policy that
        takes a person's plan (empty otherwise). PlanError when the policy refuses."""
        ...


class SearchRecomputes(Protocol):
    def __call__(self, graph: Graph, capacity: int, options: Mapping[str, Any], simulation: Simulation,
                 mechanism: Mechanism) -> list[Recompute]:
        """The activations a searching policy makes again, found by simulating candidates with `simulation`
        under `mechanism`; its moves are then planned on the graph holding them."""
        ...


class _Timed(Protocol):  # records.spans.Timeline
    @property
    def op_end_ns(self) -> Any: ...  # per op

    @property
    def memop_start_ns(self) -> Any: ...  # per memory operation

    @property
    def memop_end_ns(self) -> Any: ...

    def iteration_ns(self) -> Any: ...  # the simulated iterations' times


class _Simulates(Protocol):  # simulator.simulate
    def __call__(self, graph: Graph, plan: Plan, cost: Any, executed: Graph | None = None) -> _Timed: ...


class _Bounded(Protocol):
    @property
    def lower_bound_ns(self) -> int: ...  # simulator.bound.Bound


@dataclass(frozen=True)
class Simulation:
    """The simulator, with the cost model the plan will be simulated with, for a policy that searches
    schedules in it. Policies come before the simulator in the import contract (tests/test_imports.py
    counts lazy imports too), so the caller, which holds the cost model, passes the functions in:
    `Simulation(simulator.simulate, simulator.bound.lower_bound, cost)`."""

    # `executed`: the graph a run executes (its workspaces time the convolutions); the plan says its mechanism
    simulate: _Simulates
    lower_bound: Callable[[Graph, int, Any, Mechanism], _Bounded]
    cost_model: Any  # a simulator.CostModel: the policy only hands it back to the two functions
    report: Callable[[str], None] | None = None  # told, for people, how the search went


class SearchMoves(Protocol):
    def __call__(self, graph: Graph, capacity: int, options: Mapping[str, Any],
                 simulation: Simulation, mechanism: Mechanism) -> list[Move]:
        """The round trips a searching policy finds by simulating candidates with `simulation`, each
        planned and simulated under `mechanism` (the one the plan will run under)."""
        ...


@dataclass(frozen=True)
class PolicySpec:
    name: str
    summary: str  # one line: the CLI's --policy help and the app's policy picker show it
    plan_moves: PlanMoves
    options: dict[str, OptionSpec] = field(default_factory=dict)
    # whether it plans a person's plan (`--moves`, the app's edits): their moves, and their recomputes where
    # it declares plan_recomputes
    takes_moves: bool = False
    # a policy that searches in the simulator: compile_plan calls this instead of plan_moves when its
    # caller passes a Simulation; plan_moves is what the policy plans without one
    search: SearchMoves | None = None
    # why the policy runs under uvm only (compile_plan refuses swap with it); empty: it plans its moves,
    # and any schedule of moves runs under either mechanism
    uvm_only: str = ""
    # a policy that recomputes: compile_plan asks it first, then plans the moves (plan_moves, search) on
    # the graph with its re-runs as ops
    plan_recomputes: PlanRecomputes | None = None
    # a policy that searches its recomputations in the simulator: compile_plan calls this instead of
    # plan_recomputes (which it must also declare: what it recomputes without one) when given a Simulation
    search_recomputes: SearchRecomputes | None = None

    @property
    def searches(self) -> bool:
        """Whether it searches in the simulator (its moves or its recomputations): seconds a plan."""
        return self.search is not None or self.search_recomputes is not None
