"""Stage 2's compilers: a policy turns a graph, a capacity and its options into a plan.

Each policy is one module here (`device.py`, `uvm.py`, `autovm.py`, `belady.py`, `vdnn.py`,
`tuned.py`, `checkpoint.py`, `joint.py`, `exact.py`, `manual.py`) declaring its `SPEC`: its name, a
summary, its options, and `plan_moves`, a pure function that says which tensors make planned round
trips (`Move`s); a policy
that recomputes also says which activations it makes again (`plan_recomputes`), and its moves are
planned on the graph that holds the re-runs as ops. `compile_plan` checks the options against the
declaration and the capacity against the graph, asks the policy for its moves, and has
`residency.repair` add what the UVM driver would do on top (demand faults, LRU evictions), so every
plan is complete and its forced parts are visible as `Origin.DRIVER` memory operations.

The mechanism (`uvm`, the default, or `swap`) is orthogonal to the policy: the same moves run through
the driver's managed memory or as pinned copies in a device pool, and repair adds under `swap` the
synchronous copies in and out the executor is forced into where `uvm` has faults and evictions. Every
policy that plans moves takes either; `device` and `uvm` declare themselves `uvm_only`.

`POLICIES` below is the registry, one line per policy: the CLI's `--policy` choices and option flags,
the app's policy picker and knobs, `sweep`, and the session loader's check of a file's policy and options
are all read from it. Policies of other packages join it through the entry point group
`vmexplorer.policies` (`vmexplorer.plugins`), on first use. docs/policies.md says how to add a policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from ..config import Config, Mechanism
from ..graph import Graph, Recompute
from ..graph.recompute import recomputed
from ..plan import Move, Plan, PlanError
from ..plan.mechanisms import mechanism_of
from ..plan.pool import SwapPool, executed_graph, kept_tensors, plan_pool, pool_limit
from ..plan.residency import repair, transfers_for_moves
from ..plugins import POLICY_GROUP, Registry, warn
from ..units import format_bytes
from . import autovm, belady, checkpoint, device, exact, joint, manual, tuned, uvm, vdnn
from .common import check_capacity, order_copies
from .spec import OptionSpec, PlanMoves, PolicySpec, SearchMoves, SearchRecomputes, Simulation


def _plugin(name: str, where: str, value: Any) -> tuple[str, PolicySpec] | None:
    """A policy from another package (entry point group `vmexplorer.policies`): a PolicySpec, or an object
    holding one as `SPEC`; None, with a warning naming it, for anything else."""
    spec = value if isinstance(value, PolicySpec) else getattr(value, "SPEC", value)
    problem = _spec_problem(spec)
    if problem:
        warn(f"the vmexplorer.policies plugin {name!r} ({where}) is skipped: {problem}")
        return None
    assert isinstance(spec, PolicySpec)
    return spec.name, spec


def _spec_problem(spec: Any) -> str:
    """What is wrong with a plugin's declaration, or "" (the shipped ones: tests/policies/test_registry.py)."""
    if not isinstance(spec, PolicySpec):
        return f"it gives a {type(spec).__name__}, not a PolicySpec (or an object with one as .SPEC)"
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", spec.name):
        return f"its name {spec.name!r} should be 1 to 40 lowercase letters, digits or _, a letter first"
    if not spec.summary or "\n" in spec.summary or not callable(spec.plan_moves):
        return "it needs a one-line summary and a callable plan_moves"
    for option, opt in spec.options.items():
        if not (isinstance(opt, OptionSpec) and re.fullmatch(r"[a-z][a-z0-9_]*", option) and opt.help
                and isinstance(opt.default, opt.type)):
            return f"its option {option!r} should be an OptionSpec named in lowercase, with a help line and a " \
                   "default of its type"
    return ""


POLICIES: Registry[PolicySpec] = Registry({spec.name: spec for spec in (
    device.SPEC,
    uvm.SPEC,
    autovm.SPEC,
    belady.SPEC,
    vdnn.SPEC,
    tuned.SPEC,
    checkpoint.SPEC,
    joint.SPEC,
    exact.SPEC,
    manual.SPEC,
)}, POLICY_GROUP, _plugin)


def compile_plan(graph: Graph, capacity: int, policy: str, options: Mapping[str, Any] | None = None,
                 moves: Sequence[Move] = (), simulation: Simulation | None = None,
                 mechanism: Mechanism | str = Mechanism.UVM, recomputes: Sequence[Recompute] = ()) -> Plan:
    """The policy's plan under `mechanism`, complete with what the driver (or, under swap, the executor)
    is forced to add; PlanError naming the problem and the fix for an unknown policy, option or
    mechanism, a capacity no plan fits, moves the policy cannot take, or swap for a uvm-only policy.
    `moves` and `recomputes` are a person's plan, for a policy that takes one (`manual`): the recomputes
    numbered in the graph without re-runs, the moves in the graph with them. `simulation` (the simulator
    and the plan's cost model) is what `tuned` and `joint` search in, PlanError without one; under swap it
    picks the order the copy streams take their copies in (`order_copies`), without one the executor's."""
    spec = POLICIES.get(policy)
    if spec is None:
        raise PlanError(f"unknown policy {policy!r}; choose one of: {', '.join(POLICIES)}")
    mech = check_mechanism(spec, mechanism)
    opts = _check_options(spec, options or {})
    _check_simulation(spec, simulation)
    # the kernels' workspaces are fitted to the room a plan is made with (`Graph.fitted`), from the full graph
    full = graph.full or graph
    check_capacity(full.fitted(capacity), capacity)
    config = Config(*graph.key, capacity, policy, opts, mech, graph.workspaces, graph.definition)

    def plan_at(at: int, search: bool = True) -> Plan:  # the policy's plan with `at` bytes of room
        graph = _planned_on(spec, full, at, opts, recomputes, simulation if search else None, mech)
        if spec.search is not None and simulation is not None and search:
            planned = spec.search(graph, at, opts, simulation, mech)
        else:
            planned = spec.plan_moves(graph, at, opts, moves if spec.takes_moves else ())
        # after the policy, so that its own refusal of the capacity (device's footprint) is the one reported
        if (moves or recomputes) and not spec.takes_moves:
            raise PlanError(f"{'moves' if moves else 'recomputes'} are a manual plan; the {policy} policy makes its "
                            "own")
        replay = repair(graph, at, transfers_for_moves(graph, list(planned)), mech)
        return Plan(config, replay.memops, replay.resident_at_start, replay.peak,
                    room_bytes=at if at < capacity else 0, recomputes=(graph.full or graph).recomputes)

    if not mechanism_of(mech).whole_tensors:  # paged by the driver: no pool to place the tensors in
        return plan_at(capacity)
    searches = spec.searches and simulation is not None
    timed = _Timed(full, simulation) if simulation is not None else None
    # choosing between less room and cut workspaces by time needs a model that times workspaces
    by_workspace = timed if timed is not None and timed.by_workspace else None
    # a search is slow: the room its plan fits in is found with the policy's quick plan first
    plan, cut = fit_pool(full, plan_at(capacity, search=not searches), partial(plan_at, search=not searches),
                         by_workspace)
    if searches:  # searched at the room found, and the workspaces cut or not as chosen there
        quick = plan
        plan, _ = fit_pool(full, plan_at(plan.planned_with), plan_at, cuts=(True,) if cut else (False, True))
        # the search simulates its candidates at the room found: where its plan's pool then needed less
        # room, or cut workspaces the search did not see, the plan it started from can be the faster
        if timed is not None and timed(quick) < timed(plan):
            plan = quick
            if simulation is not None and simulation.report is not None:
                simulation.report(f"under swap the {policy} plan is the one its search started from: the "
                                  "searched one's pool needed less room, or cut workspaces, and it ran slower")
    if simulation is not None and simulation.report is not None and plan.planned_with < capacity:
        simulation.report(
            "under swap each tensor needs one free stretch of the pool: planned with "
            f"{format_bytes(plan.planned_with)} of room ({plan.planned_with / capacity:.1%} of the capacity) so "
            f"that the pool fits within {format_bytes(capacity)}")
    return order_copies(full, plan, simulation) if simulation is not None else plan


def _check_simulation(spec: PolicySpec, simulation: Simulation | None) -> None:
    """PlanError for a policy that searches and is given no simulation to search in: planned another way, its
    figures would be another policy's under its name."""
    if spec.searches and simulation is None:
        raise PlanError(f"the {spec.name} policy searches its plan in the simulator: pass the simulation it searches "
                        "in, simulation=Simulation(simulator.simulate, simulator.bound.lower_bound, cost_model) "
                        "(`vmexplorer.api.simulation()` makes one with the default or a named cost model), or plan "
                        "with `vmexplorer.api.plan(...)`, which passes one")


def _planned_on(spec: PolicySpec, full: Graph, at: int, options: dict[str, Any], recomputes: Sequence[Recompute],
                simulation: Simulation | None, mechanism: Mechanism) -> Graph:
    """The graph a policy plans its moves on with `at` bytes of room: the graph given, or, for a policy that
    recomputes, the one running the re-runs it asks for (a person's steps, for one that takes them; searched
    in `simulation`, for one that searches them and is given one)."""
    if spec.plan_recomputes is None:
        return full.fitted(at)
    plain = (full.plain or full).fitted(at)
    if spec.search_recomputes is not None and simulation is not None:
        steps = spec.search_recomputes(plain, at, options, simulation, mechanism)
    else:
        steps = spec.plan_recomputes(plain, at, options, recomputes if spec.takes_moves else ())
    return recomputed(plain, tuple(steps))


class _Timed:
    """A swap plan's simulated iteration, its convolutions in the workspaces its pool gives them where the
    cost model times them by workspace (`by_workspace`). Each plan is simulated once: `fit_pool` and the
    search's guard ask again for plans already timed."""

    def __init__(self, full: Graph, simulation: Simulation) -> None:
        self.full, self.simulation = full, simulation
        self.by_workspace = bool(getattr(simulation.cost_model, "workspace_ns", None))
        self._seen: dict[int, tuple[Plan, float]] = {}

    def __call__(self, plan: Plan, pool: SwapPool | None = None) -> float:
        """`pool`: the plan's pool as the engine places it, where the caller has placed it already."""
        seen = self._seen.get(id(plan))
        if seen is not None and seen[0] is plan:
            return seen[1]
        graph = self.full.fitted(plan.planned_with)
        executed = None
        if self.by_workspace:
            placed = plan.graph_of(graph)
            executed = executed_graph(placed, plan) if pool is None else pool.executed(placed)
        ns = float(self.simulation.simulate(graph, plan, self.simulation.cost_model, executed).iteration_ns().max())
        self._seen[id(plan)] = (plan, ns)
        return ns


FIT_ROUNDS = 8  # plans made with less room at most, one after another, until the pool fits


def fit_pool(graph: Graph, plan: Plan, plan_at: Callable[[int], Plan], timed: _Timed | None = None,
             cuts: tuple[bool, ...] = (False, True)) -> tuple[Plan, bool]:
    """A swap plan whose device pool holds its stays within the capacity. Stays cannot always be placed in
    as many bytes as the most they hold at once (a tensor needs one free stretch of the pool), so where the
    placement outgrows the capacity the plan is made again (`plan_at`) with less room, by what the pool
    outgrew or 1%, 2%, 4%... of the capacity, until it fits; PlanError where it cannot (the room would fall
    below what the graph's largest op needs, or the rounds run out). Less room is also smaller workspaces.
    The convolutions' workspaces are cut to the stretches the others leave them only where less room alone
    finds no fit; with `timed` (a plan's simulated time, its convolutions timed by the workspaces the pool
    gives them) both ways are tried and the faster kept: more room with cut workspaces can win or lose.
    (plan, whether its workspaces were cut to stretches); `cuts`: the ways tried, in turn."""
    kept = kept_tensors(graph, keep_weights=False)
    # the least room: the graph's largest op beside the smallest workspaces (they shrink with the room)
    capacity, least = plan.capacity, (graph.full or graph).min_capacity[0]
    limit = pool_limit(capacity, graph.footprint)  # what the capacity leaves the pool beside the engine's own
    first, found = plan, []
    for cut in cuts:
        plan, at = first, first.planned_with
        placed = plan_pool(graph, plan, kept, cut=cut)
        for k in range(FIT_ROUNDS):
            if placed.total <= limit or at <= least:
                break
            at = max(at - max(placed.total - limit, capacity * 2**k // 100), least)
            try:
                plan = plan_at(at)
            except PlanError:  # the policy cannot plan with so little room
                break
            placed = plan_pool(graph, plan, kept, cut=cut)
        pool = placed.total
        if pool <= limit:
            # a pool that fits uncut is the one the engine places (`plan_pool`'s `cut` None tries it first)
            found.append((plan, cut, None if cut else placed))
            # fitting with the room it was first made with, nothing was given up for it; untimed, the
            # workspaces are not cut where less room fits
            if plan is first or timed is None:
                break
    if not found:
        raise PlanError(f"under swap the pool holding this plan needs {pool - limit} bytes more than the "
                        f"{format_bytes(limit)} the capacity {format_bytes(capacity)} ({capacity} bytes) leaves "
                        "it beside the kernels' temporaries and the pinned copies' page tables: each tensor needs "
                        f"one free stretch of the pool, and planned with as little as "
                        f"{format_bytes(plan.planned_with)} of room no placement found fits; try a larger "
                        "capacity, or uvm")
    if len(found) == 1 or timed is None:
        return found[0][:2]
    return min(found, key=lambda pcp: timed(pcp[0], pcp[2]))[:2]


def check_mechanism(spec: PolicySpec, mechanism: Mechanism | str) -> Mechanism:
    """The mechanism, if the policy takes it; PlanError saying why not and what to pick otherwise."""
    try:
        mech = Mechanism(mechanism)
    except ValueError:
        raise PlanError(f"unknown mechanism {mechanism!r}; choose one of: "
                        f"{', '.join(m.value for m in Mechanism)}") from None
    if mech is not Mechanism.UVM and spec.uvm_only:
        movers = ", ".join(name for name, s in POLICIES.items() if not s.uvm_only)
        raise PlanError(f"the {spec.name} policy runs under uvm only: {spec.uvm_only}; under {mech.value} "
                        f"choose a policy that plans its moves ({movers})")
    return mech


def non_default_options(policy: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that differ from the policy's defaults (an option the policy does not know counts, a
    safety cap such as a search's seconds does not): empty when a plan ran the policy as shipped."""
    spec = POLICIES[policy].options if policy in POLICIES else {}
    return {k: v for k, v in options.items() if k not in spec or spec[k].default != v and not spec[k].safety}


def _check_options(spec: PolicySpec, options: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(options) - set(spec.options)
    if unknown:
        known = ", ".join(spec.options) or "none"
        raise PlanError(f"the {spec.name} policy has no option {sorted(unknown)[0]!r} (its options: {known})")
    out = {}
    for name, opt in spec.options.items():
        value = options.get(name, opt.default)
        try:
            value = opt.type(value)
        except (TypeError, ValueError):
            raise PlanError(f"{name} must be {opt.type.__name__}, not {value!r}") from None
        if opt.choices and value not in opt.choices:
            raise PlanError(f"{name} has to be one of {', '.join(map(repr, opt.choices))}, not {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise PlanError(f"{name} must be a finite number, not {value!r}")
        if opt.minimum is not None and value < opt.minimum:
            raise PlanError(f"{name} must be at least {opt.minimum}, not {value!r}")
        if opt.maximum is not None and value > opt.maximum:
            raise PlanError(f"{name} must be at most {opt.maximum:g}, not {value!r}")
        out[name] = value
    return out


__all__ = ["POLICIES", "Mechanism", "OptionSpec", "PlanMoves", "PolicySpec", "SearchMoves", "SearchRecomputes",
           "Simulation",
           "check_capacity", "check_mechanism", "compile_plan", "non_default_options", "order_copies",
           "fit_pool"]
