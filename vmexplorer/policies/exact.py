"""`exact`: which activations to keep, recompute or move, chosen by solving an integer program with HiGHS.

Checkmate (Jain et al., 2020) chooses what to rematerialise as a mixed-integer program over the schedule;
POET (Patil et al., 2022) adds paging to the same program. This is their program over vmexplorer's plan
space (`exact_model.py` builds it): each unit (an activation a backward op reads, with the chain its op
reads that no backward op reads, as `joint` has them) is kept, recomputed (dropped after its last forward
use, made again before its first backward use, or earlier where a re-run that reads it comes first) and,
with `choose` "recompute+move", moved (out after its last forward use, in before its first backward use).
The memory at every op of the schedule (the graph's liveness with each choice's stretches, workspaces as
the graph has them, and what each re-run holds while it runs) stays within the capacity; the time spent,
minimised, is the re-runs' compute plus, for moves, the copy time that cannot hide behind compute, window
by window (the bytes out after each forward op against the rest of the forward pass, the bytes in before
each backward op against the backward pass so far, re-runs included), at the mechanism's copy rates.
Given a simulator, the program's choice is simulated beside no recomputation and checkpoint_sequential in 2,
4 and 8 segments (belady's trips on each, as `joint` starts), and the fastest is the plan: the program prices
what its choices leave to belady (weights, gradients) by a model, the simulator by the schedule; the report
says where a start won. `scipy.optimize.milp` (HiGHS) solves it within `time_limit_seconds`; the report says
"optimal" or how far from it the best found may be (HiGHS's gap between the plan and its bound). Without
scipy it refuses: `pip install 'vmexplorer[exact]'`.

Costs come from the cost model the plan will be simulated with (given a Simulation, as the CLI and the app
do); without one, from each op's FLOPs or bytes at the uncalibrated default rates (`PROXY`, the simulator's
own formula for an op it has not measured) and those defaults' copy rates under uvm, the solver stopped
after at most `QUICK_SECONDS` (compile_plan also asks so, under swap, for the quick plans that find the room
its pool fits in, before it solves with the cost model there).

The chosen recomputes go to compile_plan; the moves that run are then planned by belady on the recomputed
graph (as checkpoint's `then=belady`): the program's moved set says how much room moves must make and what
that costs, the belady plan is what runs, and may move weights or gradients the program never moves.

What the program leaves out, so its objective is an estimate, not the simulated time:
- copies in flight take no room (a prefetch landing early holds its bytes in a real plan): optimistic;
- a moved head's copy in is timed to its first backward use even where a re-run needs it earlier;
- re-runs made at one slot are held at once with what their heads would hold after it, and a unit's
  re-runs are placed at its first slot (a unit spanning two slots, a dropout's output and mask, is made
  at the earlier): pessimistic, by bytes a few ops hold;
- copies out may spill into the backward pass and copies in start before it in a real plan (the windows
  stop at the phase boundary): pessimistic; the host's blocking and each copy's fixed cost: optimistic;
- only activations move here: what still does not fit (weights, gradients) is left to belady and the
  driver, priced as the bytes over the capacity, each rise of that excess from one op to the next copied
  out and in once with nothing to hide behind; belady may have to move such bytes more than once, so the
  price can be low and the program recompute less than it should (AlexNet in bench/results/exact_vs_joint.md).
Deterministic: one graph, capacity and options give one plan, unless the time limit stops the solver
(the plan then depends on the machine's speed; the report says so).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import Mechanism
from ..graph import Graph, Recompute
from ..plan import Move, PlanError
from ..plan.mechanisms import mechanism_of
from ..units import format_bytes, format_ns
from . import belady
from .checkpoint import checkpoint_sequential
from .exact_model import MiB, Program, program
from .joint import START_SEGMENTS, _Judge, _steps
from .spec import MAX_SEARCH_SECONDS, OptionSpec, PolicySpec, Simulation

CHOOSE = ("recompute", "recompute+move")
MIP_REL_GAP = 1e-4  # stop at 0.01% of the optimum: closer is below any cost model's accuracy
INSTALL = "pip install 'vmexplorer[exact]'"
# without a cost model (compile_plan's quick plans under swap, which find the room a pool fits in, and callers
# that pass no Simulation) the solver stops sooner: the program at the default rates is a guess at the costs
QUICK_SECONDS = 5.0
OPTIONS = {
    "choose": OptionSpec(str, "recompute", "what each activation may be beside kept: recompute (Checkmate's "
                                           "program) or recompute+move (POET's: harder, HiGHS may stop at its time "
                                           "limit with a gap)", choices=CHOOSE),
    "time_limit_seconds": OptionSpec(float, 20.0, "wall-clock limit on the solver; stopped by it, the plan is the "
                                                  "best found and the report gives its gap", minimum=1,
                                     maximum=MAX_SEARCH_SECONDS),
}


@dataclass(frozen=True)
class Proxy:
    """Costs without a cost model: the simulator's formula for an op it has not measured (launch, then the
    longer of its FLOPs and its bytes at sustained rates) at its uncalibrated defaults (`H100_DEFAULT`,
    which policies cannot import: tests/policies/test_exact.py holds the two the same), and their copy rates."""

    flops_per_ns: float = 100_000.0
    bytes_per_ns: float = 1_200.0
    launch_ns: float = 8_000.0
    uvm_in_out: tuple[float, float] = (45.0, 8.5)  # prefetch, eviction
    swap_in_out: tuple[float, float] = (54.0, 54.0)  # pinned copies each way

    def compute_ns(self, name: str, flops: int, bytes_touched: int, workspace_bytes: int | None = None) -> float:
        return self.launch_ns + max(flops / self.flops_per_ns, bytes_touched / self.bytes_per_ns)


PROXY = Proxy()


@dataclass(frozen=True)
class Solution:
    """What the solver chose and how sure it is."""

    steps: tuple[Recompute, ...]
    recomputed: int  # units
    moved: int
    moved_bytes: int
    rerun_ns: float
    over_bytes: int  # what the activations' choices leave over the capacity at the worst op
    objective_ns: float
    optimal: bool
    gap: float  # HiGHS's relative gap between the plan found and its bound (0: optimal)
    seconds: float
    choose: str

    def note(self) -> str:
        sure = "optimal" if self.optimal else f"best found in {self.seconds:.0f} s, within {self.gap:.1%} of optimal"
        moved = (f", {self.moved} moved ({format_bytes(self.moved_bytes)}; belady plans the moves that run)"
                 if self.choose != "recompute" else "")
        over = (f"; {format_bytes(self.over_bytes)} still over the capacity, for belady to move (weights, "
                "gradients)" if self.over_bytes > 0 else "")
        return (f"exact ({self.choose}): {sure}; {self.recomputed} activations recomputed "
                f"({format_ns(int(self.rerun_ns))} of re-runs){moved}{over}; objective "
                f"{format_ns(int(self.objective_ns))}, solved in {self.seconds:.1f} s")


def plan_recomputes(graph: Graph, capacity: int, options: Mapping[str, Any],
                    recomputes: Sequence[Recompute]) -> list[Recompute]:
    quick = {**options, "time_limit_seconds": min(options["time_limit_seconds"], QUICK_SECONDS)}
    return list(solve(graph, capacity, quick, PROXY, Mechanism.UVM).steps)


def search_recomputes(graph: Graph, capacity: int, options: Mapping[str, Any], simulation: Simulation,
                      mechanism: Mechanism) -> list[Recompute]:
    found = solve(graph, capacity, options, simulation.cost_model, mechanism)
    steps, note = found.steps, found.note()
    # the program prices what its choices leave to belady by a model: the plans simulated decide
    judge = _Judge(graph, capacity, simulation, mechanism)
    chosen_ns = judge.time_ns({s.tensor for s in steps})
    starts = [(judge.time_ns({s.tensor for s in checkpoint_sequential(graph, k)}), k) for k in START_SEGMENTS]
    start_ns, k = min(starts)
    if start_ns < chosen_ns:
        steps = tuple(checkpoint_sequential(graph, k))
        note += (f"; simulated, its plan ({format_ns(int(chosen_ns))}) lost to "
                 f"{'no recomputation' if k == 1 else f'checkpoint_sequential in {k} segments'} "
                 f"({format_ns(int(start_ns))}), which is the plan")
    if simulation.report is not None:
        simulation.report(note)
    return list(steps)


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    return belady.belady_moves(graph, capacity)


_SOLVED: OrderedDict[tuple[Any, ...], tuple[Graph, Any, Solution]] = OrderedDict()  # compile_plan asks again


def solve(graph: Graph, capacity: int, options: Mapping[str, Any], cost: Any, mechanism: Mechanism) -> Solution:
    """The program's solution for `graph` (without re-runs) at `capacity` under `cost` (a CostModel or PROXY);
    PlanError without scipy, or where no choice fits."""
    key = (id(graph), capacity, options["choose"], float(options["time_limit_seconds"]), id(cost), mechanism)
    seen = _SOLVED.get(key)
    if seen is not None and seen[0] is graph and seen[1] is cost:
        return seen[2]
    milp = _milp()
    began = time.perf_counter()
    ws = graph.workspace_bytes
    op_ns = lambda k: float(cost.compute_ns(graph.ops[k].name, graph.ops[k].flops,  # noqa: E731
                                            graph.ops[k].bytes_touched, ws[k]))
    into, out = _rates(cost, mechanism)
    prog = program(graph, capacity, op_ns, out, into, options["choose"] != "recompute")
    with _solver_output_to_stderr():
        result = _run(milp, prog, options["time_limit_seconds"])
    found = _solution(graph, prog, result, time.perf_counter() - began, options["choose"])
    _SOLVED[key] = (graph, cost, found)
    while len(_SOLVED) > 16:
        _SOLVED.popitem(last=False)
    return found


@contextmanager
def _solver_output_to_stderr() -> Iterator[None]:
    """HiGHS writes a line of its own to the process's standard output now and then whatever `disp` says
    (its MIP solver's `transformNewIntegerFeasibleSolution`), where `vmexplorer plan --json` writes its JSON:
    while it solves, what goes to standard output goes to standard error."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no standard output to guard
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        try:  # the C library's buffer, written through the redirected descriptor before it is put back
            ctypes.CDLL(None).fflush(None)
        except (OSError, AttributeError):
            pass
        os.dup2(saved, 1)
        os.close(saved)


def _milp() -> Any:
    try:
        from scipy.optimize import milp
    except ImportError:
        raise PlanError(f"the exact policy solves an integer program with scipy's HiGHS, which is not installed: "
                        f"{INSTALL}") from None
    return milp


def _rates(cost: Any, mechanism: Mechanism) -> tuple[float, float]:
    """(in, out) copy rates in bytes per ns under `mechanism`."""
    if isinstance(cost, Proxy):
        return cost.uvm_in_out if mechanism_of(mechanism).name is Mechanism.UVM else cost.swap_in_out
    rates = cost.for_mechanism(mechanism)
    return float(rates.prefetch_bytes_per_ns), float(rates.evict_bytes_per_ns)


def _run(milp: Any, prog: Program, seconds: float) -> Any:
    """HiGHS on the program, each row scaled to its largest coefficient and the costs in ms, so that bytes
    and nanoseconds come to the solver near 1, where its tolerances are meant."""
    from scipy.optimize import Bounds, LinearConstraint
    from scipy.sparse import csr_array

    scale = np.array([max(map(abs, row.values()), default=1.0) for row in prog.rows])
    rows = [r for r, row in enumerate(prog.rows) for _ in row]
    cols = [v for row in prog.rows for v in row]
    vals = [c / scale[r] for r, row in enumerate(prog.rows) for c in row.values()]
    a = csr_array((vals, (rows, cols)), shape=(len(prog.rows), len(prog.cost)))
    constraints = [LinearConstraint(a, np.array(prog.lower) / scale, np.array(prog.upper) / scale)] \
        if prog.rows else []
    return milp(np.array(prog.cost) / 1e6, integrality=np.array(prog.integral),
                bounds=Bounds(0, np.array(prog.upper_bounds)), constraints=constraints,
                options={"time_limit": float(seconds), "mip_rel_gap": MIP_REL_GAP, "presolve": True, "disp": False})


def _solution(graph: Graph, prog: Program, result: Any, seconds: float, choose: str) -> Solution:
    if result.x is None:  # keeping everything is a solution: only a solver stopped at once has none
        raise PlanError(f"exact: the solver found no plan in the time ({result.message}); try a longer "
                        "time_limit_seconds")
    n = len(prog.units)
    x = np.asarray(result.x)
    recompute = [i for i in range(n) if x[i] > 0.5]
    moved = [i for i in range(n) if prog.moves and x[n + i] > 0.5]
    chosen = frozenset(t for i in recompute for t in prog.units[i].tensors)
    gap = float(getattr(result, "mip_gap", 0.0) or 0.0)
    return Solution(_steps(graph, chosen), len(recompute), len(moved),
                    sum(prog.units[i].nbytes for i in moved), sum(prog.units[i].rerun_ns for i in recompute),
                    int(max((x[v] for v in prog.over.values()), default=0.0) * MiB), float(np.dot(prog.cost, x)),
                    result.status == 0, gap, seconds, choose)

SPEC = PolicySpec("exact", "an integer program solved with HiGHS: which activations to keep, recompute or move "
                           "(Checkmate's and POET's), belady's trips for what it moves", plan_moves, OPTIONS,
                  plan_recomputes=plan_recomputes, search_recomputes=search_recomputes)
