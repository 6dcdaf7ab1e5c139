"""`tuned`: a local search for a faster schedule in the simulator, from the best of the other policies.

It simulates the plans of `uvm` (no trips), `autovm`, `belady` and `vdnn` with their default options
under the cost model the plan will be simulated with, keeps the fastest, then tries one change at a
time: a trip's offload or prefetch issued a few ops earlier or later, a trip dropped, or a trip added
over a gap between two uses of a tensor; a change is kept when the simulated iteration gets shorter
(or, for a dropped trip, no longer: the same time with less traffic). Schedule search in a simulator is
SwapAdvisor's idea (Huang et al., ASPLOS'20, with a genetic algorithm over the same choices); a
hill climb from Belady's MIN is the least that shows how much of the gap to the bound the issue times
alone close. The changes are drawn from a generator seeded by `search_seed`, and the search stops after
`search_steps` of them, so a seed gives one plan whatever the machine and however loaded it is: the
default, 600 steps, takes 0.9 s of CPU on VGG-19 b64 and 3.4 s on ResNet-50 b64 on the 2-core CI machine
(within the old 4.5 s budget), and about 27 s on ResNet-152 b32. `search_seconds` is only a safety cap
on all of the search's work (its bound and start plans included), by default the most allowed; where it
stops the search first the plan depends on the machine's speed and load, and the report says so. The
report gives the time the search took either way. The options are named for the search, since `run`
has a `--seed` of its own.

The simulator comes from the caller (`Simulation`): policies come before it in the import contract.
Without one (a caller that passes none) there is nothing to search in and `tuned` plans as `belady`,
its usual best start. The report (`Simulation.report`) says where the search started, how many changes
it kept, and how far it ends from the lower bound under the same cost model.

Every candidate is planned, simulated and held to the bound under the mechanism the plan will run under
(`compile_plan(..., mechanism=)`): under `swap` the `uvm` start means no trips, every missing tensor
copied in on demand, and the bound is the explicit-copy one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import Config, Mechanism
from ..graph import Graph
from ..plan import Move, Plan, PlanError
from ..plan.moves import check_moves
from ..plan.residency import repair, transfers_for_moves
from ..units import format_ns
from . import autovm, belady, uvm, vdnn
from .autovm import MIN_MOVE_BYTES
from .common import reuse_gaps
from .spec import MAX_SEARCH_SECONDS, MAX_SEARCH_STEPS, OptionSpec, PolicySpec, Simulation

STARTS = (uvm.SPEC, autovm.SPEC, belady.SPEC, vdnn.SPEC)
SHIFTS = (1, 1, 2, 3, 5, 8)  # how far one change moves an issue time, in ops: mostly near, sometimes far

OPTIONS = {
    "search_seed": OptionSpec(int, 0, "seed of the search's random changes: one seed, one plan", minimum=0,
                               maximum=2**32 - 1),
    "search_steps": OptionSpec(int, 600, "changes the search simulates: what stops it, so one seed gives one plan "
                                "anywhere", minimum=0, maximum=MAX_SEARCH_STEPS),
    "search_seconds": OptionSpec(float, MAX_SEARCH_SECONDS, "safety cap on the search's wall-clock time, its bound and "
                                 "start plans included (where it stops the search before its steps, the plan depends "
                                 "on the machine's speed and load)", minimum=0, maximum=MAX_SEARCH_SECONDS,
                                 safety=True),
}


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    return belady.belady_moves(graph, capacity)


def search_moves(graph: Graph, capacity: int, options: Mapping[str, Any], simulation: Simulation,
                 mechanism: Mechanism = Mechanism.UVM) -> list[Move]:
    result = tune(graph, capacity, simulation, options["search_seed"], options["search_steps"],
                  options["search_seconds"], mechanism)
    if simulation.report is not None:
        simulation.report(result.note())
    return list(result.moves)


@dataclass(frozen=True)
class Tuning:
    """Where a search started and ended, for the report."""

    moves: tuple[Move, ...]
    start: str  # the policy whose plan it started from
    start_ns: float
    end_ns: float
    bound_ns: int
    steps: int  # changes simulated
    kept: int  # changes kept
    stopped_by_time: bool
    seconds: float
    mechanism: Mechanism = Mechanism.UVM

    def note(self) -> str:
        ratio = f"{self.end_ns / self.bound_ns:.2f}x" if self.bound_ns > 0 else "n/a:"
        cap = ", stopped by its time cap before its steps (the plan depends on the machine's speed and load)" \
            if self.stopped_by_time else ""
        under = "" if self.mechanism is Mechanism.UVM else f" under {self.mechanism.value}"
        return (f"tuned{under}: from {self.start} at {format_ns(int(self.start_ns))} to {format_ns(int(self.end_ns))}, "
                f"{ratio} the lower bound ({format_ns(self.bound_ns)}); {self.kept} of {self.steps} changes kept "
                f"in {self.seconds:.1f} s{cap}")


def tune(graph: Graph, capacity: int, simulation: Simulation, seed: int = 0, steps: int = 600,
         seconds: float = MAX_SEARCH_SECONDS, mechanism: Mechanism = Mechanism.UVM) -> Tuning:
    """The hill climb under `mechanism`: the fastest start, then `steps` single changes, unless all of its
    work (the bound first, the starts, the changes) takes more than `seconds`."""
    began = time.perf_counter()
    bound = int(simulation.lower_bound(graph, capacity, simulation.cost_model, mechanism).lower_bound_ns)
    judge = _Judge(graph, capacity, simulation, mechanism)
    start, best, best_ns = min(_starts(graph, capacity, judge), key=lambda s: s[2])
    start_ns, rng, gaps = best_ns, random.Random(seed), _gaps(graph)
    done = kept = 0
    stopped = False
    while done < steps:
        if time.perf_counter() - began > seconds:
            stopped = True
            break
        change, candidate = _neighbour(rng, graph, best, gaps)
        done += 1
        ns = judge.time_ns(candidate)
        if ns < best_ns or (change == "drop" and ns == best_ns):
            best, best_ns, kept = candidate, ns, kept + 1
    return Tuning(tuple(best), start, start_ns, best_ns, bound, done, kept, stopped,
                  time.perf_counter() - began, mechanism)


class _Judge:
    """A candidate's simulated iteration time, as compile_plan would plan and the caller simulate it;
    infinite for moves that break a rule of `check_moves` (the search simply does not take them).
    Remembered by move set: a change undone by a later draw costs nothing the second time."""

    def __init__(self, graph: Graph, capacity: int, simulation: Simulation, mechanism: Mechanism) -> None:
        self.graph, self.capacity, self.simulation, self.mechanism = graph, capacity, simulation, mechanism
        self.config = Config(graph.model, graph.batch, graph.image_size, capacity, "tuned", {}, mechanism,
                             graph.workspaces, graph.definition)
        self.seen: dict[tuple[Move, ...], float] = {}

    def time_ns(self, moves: list[Move]) -> float:
        key = tuple(sorted(moves, key=lambda mv: (mv.tensor, mv.offload_after, mv.prefetch_after or 0)))
        if key not in self.seen:
            self.seen[key] = self._simulated_ns(moves)
        return self.seen[key]

    def _simulated_ns(self, moves: list[Move]) -> float:
        try:
            check_moves(self.graph, moves)
            replay = repair(self.graph, self.capacity, transfers_for_moves(self.graph, moves), self.mechanism)
            plan = Plan(self.config, replay.memops, replay.resident_at_start, replay.peak)
            timeline = self.simulation.simulate(self.graph, plan, self.simulation.cost_model)
        except PlanError:
            return float("inf")
        return float(np.median(timeline.iteration_ns()))


def _starts(graph: Graph, capacity: int, judge: _Judge) -> list[tuple[str, list[Move], float]]:
    """Each other policy's moves with its default options, and their simulated time; one that refuses
    the capacity is left out (uvm never does)."""
    out = []
    for spec in STARTS:
        try:
            moves = spec.plan_moves(graph, capacity, {k: o.default for k, o in spec.options.items()}, ())
        except PlanError:
            continue
        out.append((spec.name, list(moves), judge.time_ns(list(moves))))
    return out


def _gaps(graph: Graph) -> list[tuple[int, int, int]]:
    """(tensor, last use, next use) of every gap a trip could fill, in a fixed order (the seed's draws
    index it): tensors worth moving, gaps with at least one op between the uses."""
    return [(t, last, use) for t, x in enumerate(graph.tensors) if x.nbytes >= MIN_MOVE_BYTES
            for last, use in reuse_gaps(graph, t) if use - last >= 2]


def _neighbour(rng: random.Random, graph: Graph, moves: list[Move],
               gaps: list[tuple[int, int, int]]) -> tuple[str, list[Move]]:
    """One change to the moves, drawn from `rng`: which kind, which trip, how far. It may break a rule
    (a prefetch after the next use, say); the judge rejects those."""
    n, roll = len(graph.ops), rng.random()
    if not moves or roll < 0.2:
        t, last, use = gaps[rng.randrange(len(gaps))] if gaps else (0, 0, 0)
        if not gaps:
            return "add", moves
        p = use - 1 - rng.randrange(min(8, use - last - 1))  # a little ahead of the use, to hide its transfer
        return "add", [*moves, Move(t, last, p - n if p >= n else p)]
    i = rng.randrange(len(moves))
    mv, d = moves[i], rng.choice(SHIFTS) * rng.choice((-1, 1))
    rest = moves[:i] + moves[i + 1:]
    if roll < 0.3:
        return "drop", rest
    if roll < 0.55 or mv.prefetch_after is None:
        return "offload", [*rest[:i], Move(mv.tensor, mv.offload_after + d, mv.prefetch_after), *rest[i:]]
    return "prefetch", [*rest[:i], Move(mv.tensor, mv.offload_after, mv.prefetch_after + d), *rest[i:]]


SPEC = PolicySpec("tuned", "searched in the simulator: the best of uvm/autovm/belady/vdnn, then issue times shifted "
                           "and trips dropped or added while the simulated iteration gets shorter", plan_moves,
                  OPTIONS, search=search_moves)
