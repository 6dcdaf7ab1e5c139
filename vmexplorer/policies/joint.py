"""`joint`: which activations to recompute, searched in the simulator, with belady's trips for the rest.

Moving and recomputing are two prices for the same room: a feature map sent away costs its bytes at the
copy rate twice (and the time it blocks the op that waits for it), one made again costs its op's compute.
Capuchin chooses per tensor between the two from measured costs; Checkmate and POET solve the choice
exactly as integer programs. This is the search a simulator affords: start from the fastest of no
recomputation and PyTorch's checkpoint_sequential in 2, 4 and 8 segments, then try each activation in
turn, the most bytes per nanosecond of its op first, recomputed or not, keeping a change when the
simulated iteration gets shorter; every candidate's moves are belady's on its recomputed graph, as
compile_plan plans them, under the mechanism the plan runs under. Deterministic: the order is fixed,
nothing is drawn, and the search stops after `search_steps` activations (250 by default: all of VGG-19's
and ResNet-50's, 6.4 s of CPU on ResNet-50 b64 on the 2-core CI machine), so one configuration gives one plan
however loaded the machine is. `search_seconds` is only a safety cap, by default the most allowed; where
it stops the search first the plan depends on the machine's speed and load, and the report says so.

A unit of choice is an activation with the chain of activations its op reads that no backward op reads
(a convolution's output that only its ReLU reads, say): making the ReLU's output again needs them made
again too, or they live on to the re-run. Each unit is made again before the first backward op that
reads it, or earlier where a re-run chosen with it reads it (`_steps`).

Without a simulator (a caller that passes none) it recomputes as checkpoint_sequential in 4 segments.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import Config, Mechanism
from ..graph import Graph, Phase, Recompute
from ..graph.recompute import recomputed
from ..plan import Move, Plan, PlanError
from ..plan.bound import recomputable
from ..plan.residency import repair, transfers_for_moves
from ..units import format_ns
from . import belady
from .checkpoint import checkpoint_sequential
from .spec import MAX_SEARCH_SECONDS, MAX_SEARCH_STEPS, OptionSpec, PolicySpec, Simulation

START_SEGMENTS = (1, 2, 4, 8)  # checkpoint_sequential's segments tried as starts (1: nothing recomputed)
OPTIONS = {
    "search_seconds": OptionSpec(float, MAX_SEARCH_SECONDS, "safety cap on the search's wall-clock time (where it "
                                 "stops the search before its steps, the plan depends on the machine's speed and load)",
                                 minimum=0, maximum=MAX_SEARCH_SECONDS, safety=True),
    "search_steps": OptionSpec(int, 250, "activations the search tries, in its fixed order: what stops it, so one "
                               "configuration gives one plan anywhere", minimum=0, maximum=MAX_SEARCH_STEPS),
}


def plan_recomputes(graph: Graph, capacity: int, options: Mapping[str, Any],
                    recomputes: Sequence[Recompute]) -> list[Recompute]:
    return checkpoint_sequential(graph, 4)


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    return belady.belady_moves(graph, capacity)


def search_recomputes(graph: Graph, capacity: int, options: Mapping[str, Any], simulation: Simulation,
                      mechanism: Mechanism) -> list[Recompute]:
    result = search(graph, capacity, simulation, mechanism, options["search_seconds"], options["search_steps"])
    if simulation.report is not None:
        simulation.report(result.note())
    return list(result.steps)


@dataclass(frozen=True)
class Search:
    """Where the search started and ended, for the report."""

    steps: tuple[Recompute, ...]
    start: str
    start_ns: float
    end_ns: float
    tried: int
    kept: int
    stopped_by_time: bool
    seconds: float

    def note(self) -> str:
        cap = ", stopped by its time cap before its steps (the plan depends on the machine's speed and load)" \
            if self.stopped_by_time else ""
        return (f"joint: from {self.start} at {format_ns(int(self.start_ns))} to {format_ns(int(self.end_ns))}, "
                f"{len(self.steps)} activations recomputed; {self.kept} of {self.tried} changes kept in "
                f"{self.seconds:.1f} s{cap}")


def search(graph: Graph, capacity: int, simulation: Simulation, mechanism: Mechanism,
           seconds: float = MAX_SEARCH_SECONDS, steps: int = 250) -> Search:
    """The fastest start, then the first `steps` units toggled in turn, unless it all takes over `seconds`."""
    began = time.perf_counter()
    judge = _Judge(graph, capacity, simulation, mechanism)
    starts = []
    for k in START_SEGMENTS:
        chosen = {s.tensor for s in checkpoint_sequential(graph, k)}
        starts.append((f"checkpoint_sequential in {k} segments" if k > 1 else "no recomputation", chosen,
                       judge.time_ns(chosen)))
    start, chosen, best_ns = min(starts, key=lambda s: s[2])
    start_ns, units = best_ns, _units(graph, simulation)
    tried = kept = 0
    stopped = False
    for unit in units[:steps]:
        if time.perf_counter() - began > seconds:
            stopped = True
            break
        candidate = chosen - unit if unit <= chosen else chosen | unit
        tried += 1
        ns = judge.time_ns(candidate)
        if ns < best_ns:
            chosen, best_ns, kept = candidate, ns, kept + 1
    return Search(_steps(graph, chosen), start, start_ns, best_ns, tried, kept, stopped,
                  time.perf_counter() - began)


def _units(graph: Graph, simulation: Simulation) -> list[frozenset[int]]:
    """Each activation a backward op reads, with the chain its op reads that no backward op reads, the most
    bytes per nanosecond of re-running first."""
    cost = simulation.cost_model
    units = []
    for t, unit in unit_sets(graph).items():
        ns = sum(cost.compute_ns(graph.ops[graph.tensors[u].producer].name, graph.ops[graph.tensors[u].producer].flops,
                                 graph.ops[graph.tensors[u].producer].bytes_touched) for u in unit)
        units.append((sum(graph.tensors[u].nbytes for u in unit) / max(ns, 1.0), t, frozenset(unit)))
    return [unit for _, _, unit in sorted(units, key=lambda x: (-x[0], x[1]))]


def unit_sets(graph: Graph) -> dict[int, frozenset[int]]:
    """Each activation a backward op reads (the unit's head), with the chain its op reads that no backward
    op reads, by head, ascending."""
    free = set(recomputable(graph))
    backward = {t for t in free if _first_backward(graph, t) is not None}
    out = {}
    for t in sorted(backward):
        unit, todo = {t}, [t]
        while todo:
            for r in graph.ops[graph.tensors[todo.pop()].producer].reads:
                if r in free and r not in backward and r not in unit:
                    unit.add(r)
                    todo.append(r)
        out[t] = frozenset(unit)
    return out


def _first_backward(graph: Graph, t: int) -> int | None:
    return next((k for k in graph.uses[t] if graph.ops[k].phase is Phase.BACKWARD), None)


def _steps(graph: Graph, chosen: set[int] | frozenset[int]) -> tuple[Recompute, ...]:
    """The chosen activations made again: each before its first backward use, or before the re-run of one
    chosen with it that reads it, whichever is first (so that re-run reads the copy); the latest makers first."""
    before: dict[int, int] = {}
    for t in sorted(chosen, key=lambda t: graph.tensors[t].producer, reverse=True):
        readers = [before[s] for s in before if t in graph.ops[graph.tensors[s].producer].reads]
        first = _first_backward(graph, t)
        before[t] = min([*readers, *([first] if first is not None else [])])
    return tuple(Recompute(t, before[t]) for t in sorted(chosen))


class _Judge:
    """A choice's simulated iteration, planned as compile_plan plans it (belady's trips on its recomputed
    graph) and simulated as the caller will; infinite for one that cannot run. Remembered by choice."""

    def __init__(self, graph: Graph, capacity: int, simulation: Simulation, mechanism: Mechanism) -> None:
        self.graph, self.capacity, self.simulation, self.mechanism = graph, capacity, simulation, mechanism
        self.config = Config(graph.model, graph.batch, graph.image_size, capacity, "joint", {}, mechanism,
                             graph.workspaces, graph.definition)
        self.seen: dict[frozenset[int], float] = {}

    def time_ns(self, chosen: set[int] | frozenset[int]) -> float:
        key = frozenset(chosen)
        if key not in self.seen:
            self.seen[key] = self._simulated_ns(key)
        return self.seen[key]

    def _simulated_ns(self, chosen: frozenset[int]) -> float:
        try:
            steps = _steps(self.graph, chosen)
            graph = recomputed(self.graph, steps)
            moves = belady.belady_moves(graph, self.capacity)
            replay = repair(graph, self.capacity, transfers_for_moves(graph, moves), self.mechanism)
            plan = Plan(self.config, replay.memops, replay.resident_at_start, replay.peak, recomputes=steps)
            timeline = self.simulation.simulate(self.graph, plan, self.simulation.cost_model)
        except (PlanError, ValueError):  # GraphError is a ValueError: a choice that cannot run
            return float("inf")
        return float(np.median(timeline.iteration_ns()))


SPEC = PolicySpec("joint", "searched in the simulator: which activations to recompute, from the best of none and "
                           "checkpoint_sequential, with belady's trips for what still does not fit", plan_moves,
                  OPTIONS, plan_recomputes=plan_recomputes, search_recomputes=search_recomputes)
