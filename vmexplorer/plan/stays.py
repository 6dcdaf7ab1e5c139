"""A swap plan's stays: each tensor's time in the device pool, from its copy in (or the op creating it) to
its copy out (or its last op), in one steady-state iteration; and the copies that move nothing.

A tensor copied in and straight back out before any op touches it (the repair making room while a copy
in is still arriving) holds no bytes at any op: its host copy is already what it would bring and take
back, so neither copy moves anything (`elided`). The engine places the stays in its pool
(`engine/swap.py`) and skips the elided copies; the simulator skips them too. Pure: no CUDA.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ..graph import Graph
from .mechanisms import mechanism_of
from .plan import Direction, Mode, Plan

Event = tuple[str, int]  # as in `schedule`: ("op", k) or ("memop", i)


@dataclass(frozen=True)
class Stay:
    """One tensor's time in the pool: the ops first..last (inclusive; past the last op it goes on from the
    iteration's first, so 0 <= first < n and last < first + n)."""

    tensor: int
    first: int
    last: int
    begin: Event | None  # the step that puts it there (copy in, or the op creating it); None: always there
    end: Event | None  # the step after which its bytes are free (copy out, or its last op); None: never within
    begin_at: int  # where in the iteration its begin runs: before op begin_at (n: after the last op)
    end_at: int  # the last op before its end, in this iteration
    carried: bool  # in the pool as an iteration begins


def stays(graph: Graph, plan: Plan, kept: Collection[int] = ()) -> tuple[tuple[Stay, ...], frozenset[int]]:
    """Every stay of every tensor in one steady-state iteration of a swap plan, and the memory operations
    that move nothing (a copy in taken straight back out before any op). Tensors in `kept` (read by the
    host after the iteration) stay to its end."""
    graph = plan.graph_of(graph)
    n = len(graph.ops)
    moves: list[list[tuple[int, int, str, Event]]] = [[] for _ in graph.tensors]
    for i, m in enumerate(plan.memops):
        into = m.direction is Direction.TO_DEVICE
        at = m.issue_after + 1 if into and m.mode is Mode.ASYNC else m.complete_before
        # at one boundary: copies out due complete, copies in issued start, copies in on demand and new
        # tensors, then copies out to make room (the replay's order)
        phase = (1 if m.mode is Mode.ASYNC else 2) if into else (0 if m.mode is Mode.ASYNC else 3)
        moves[m.tensor].append((at, phase, "in" if into else "out", ("memop", i)))
    for t, tensor in enumerate(graph.tensors):
        if not tensor.persistent:
            moves[t].append((tensor.producer, 2, "in", ("op", tensor.producer)))
            if t not in kept:
                moves[t].append((graph.last_use[t] + 1, -1, "out", ("op", graph.last_use[t])))
    resident = {t for t, _ in plan.resident_at_start}
    # a planned copy out of a tensor already on the host (the repair gives it no bytes to move)
    empty = frozenset(i for i, m in enumerate(plan.memops) if m.direction is Direction.TO_HOST and m.nbytes == 0)
    out: list[Stay] = []
    elided: set[int] = set()
    for t, tensor_moves in enumerate(moves):
        out += _tensor_stays(graph, t, sorted(tensor_moves), t in resident, n, elided, empty)
    return tuple(out), frozenset(elided)


def _tensor_stays(graph: Graph, t: int, moves: list[tuple[int, int, str, Event]], resident: bool, n: int,
                  elided: set[int], empty: frozenset[int] = frozenset()) -> list[Stay]:
    """One tensor's stays from its moves in time order; a pair that holds no op goes to `elided`, and so
    does a copy out of nothing (in `empty`) where the tensor is not in the pool."""
    out: list[Stay] = []
    open_: tuple[int, Event | None] | None = (0, None) if resident else None  # (begin_at, begin)
    for at, _, way, event in moves:
        if way == "out" and open_ is None and event[0] == "memop" and event[1] in empty:
            elided.add(event[1])
            continue
        if (way == "in") == (open_ is not None):
            raise ValueError(f"the plan moves {graph.tensors[t].name} {way} before op {at} where it already is")
        if way == "in":
            open_ = (at, event)
            continue
        assert open_ is not None
        begin_at, begin = open_
        open_ = None
        if begin is not None and at - 1 < begin_at:  # in and straight back out: neither copy has anything to do
            elided.update(e[1] for e in (begin, event) if e is not None and e[0] == "memop")
            continue
        out.append(Stay(t, begin_at, at - 1, begin, event, begin_at, at - 1, begin is None))
    if open_ is None:
        if resident:
            raise ValueError(f"{graph.tensors[t].name} starts the iteration in the pool but ends it on the host")
        return out
    begin_at, begin = open_
    if begin is None:  # never leaves
        return out + [Stay(t, 0, n - 1, None, None, 0, n - 1, True)]
    if not graph.tensors[t].persistent:  # kept to the iteration's end
        return out + [Stay(t, begin_at, n - 1, begin, None, begin_at, n - 1, False)]
    leading = next((s for s in out if s.carried), None)
    if leading is None:
        raise ValueError(f"{graph.tensors[t].name} ends the iteration in the pool but starts it on the host")
    out.remove(leading)
    first = begin_at % n
    last = leading.last + (n if begin_at < n else 0)
    return out + [Stay(t, first, last, begin, leading.end, begin_at, leading.end_at, True)]


def elided(graph: Graph, plan: Plan) -> frozenset[int]:
    """The memory operations of a swap plan that move nothing (none under uvm). The simulator and
    calibration take any plan, checked or not (the engine checks first): one whose moves do not pair
    into stays elides nothing."""
    graph = plan.graph_of(graph)
    if not mechanism_of(plan).whole_tensors:  # paged by the driver: a call moves what it names
        return frozenset()
    try:
        return stays(graph, plan)[1]
    except ValueError:
        return frozenset()
