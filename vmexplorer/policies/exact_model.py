"""The exact planner's integer program (`exact.py`): its choices, what each costs and what each does to the
memory at every op, as plain numbers a solver takes (`Program`), built from a graph without re-runs.

A unit (`joint.unit_sets`: an activation a backward op reads, its head, with the chain its op reads that no
backward op reads; units that share a chain are one) is kept, recomputed (x) or, with moves, moved (y). A
dropped head is away from the op after its last forward use to the unit's slot (the first backward op that
reads it, or one of its own chain's re-runs), and back from there: the memory at each op of that stretch is
the graph's liveness less its bytes. A re-run reads its chain (made with it), weights and heads: a head it
reads that was dropped must be back when the re-run runs, so a unit re-run early, because a re-run that
reads it came first, is re-run there (`_steps`' cascade: a run of recomputed units is re-run in one go
where the latest of them is first needed, as checkpoint_sequential's segments are). `m[V, c]` is 1 where
V's head is back by slot c before its own slot: at least `d_V + m[U, c] + x_U - 2` for each unit U whose
re-run reads it (U re-run by then, and V dropped), at most d_V. Each slot's re-runs hold, beside what is
alive across the slot, the chain, side outputs and workspaces of the unit re-run there (`transient`).

Time: a re-run costs its ops' compute; a moved head's bytes cost their copy time beyond the compute they
can hide behind, window by window: the copies out after forward op j must fit in the compute from j to the
end of the forward pass, the copies in before backward op m in the compute (re-runs included) from the
start of the backward pass to m; what does not is stall (`S_out`, `S_in`, each the worst window's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..graph import Graph, Phase
from .joint import _first_backward, _steps, unit_sets

OpNs = Callable[[int], float]  # an op's compute time (ns), by op number
# bytes over the capacity and transient bytes are counted in MiB, stalls in ms: near the other terms of
# their rows, where the solver's tolerances are meant
MiB, MS = float(2**20), 1e6
TIE_NS_PER_BYTE = 1e-5  # 10 µs a GB moved: below any cost model's accuracy, enough to prefer fewer bytes


@dataclass(frozen=True)
class Unit:
    tensors: frozenset[int]  # heads and chains, recomputed together
    heads: tuple[tuple[int, int, int], ...]  # (head, bytes, its last forward use)
    slot: int  # the op before which it is made again (and back, if moved)
    rerun_ns: float  # its re-runs' compute
    transient: int  # bytes its re-runs hold at their peak beyond its heads
    reads: tuple[int, ...]  # the units whose heads its re-runs read
    extends: tuple[tuple[int, int, int], ...]  # (after, before, bytes): originals its re-runs keep alive longer

    @property
    def nbytes(self) -> int:
        return sum(b for _, b, _ in self.heads)

    @property
    def last_forward(self) -> int:
        return max(f for _, _, f in self.heads)


def units_of(graph: Graph, op_ns: OpNs) -> list[Unit]:
    """The graph's units, those sharing a chain tensor merged, in ascending order of their first head."""
    groups: list[set[int]] = []
    for unit in unit_sets(graph).values():
        touching = [g for g in groups if g & unit]
        merged = set(unit).union(*touching)
        groups = [g for g in groups if not g & unit] + [merged]
    groups.sort(key=min)
    head_of = {}
    backward = {t for g in groups for t in g if _first_backward(graph, t) is not None}
    for i, g in enumerate(groups):
        head_of.update({t: i for t in g & backward})
    return [_unit(graph, frozenset(g), backward, head_of, i, op_ns) for i, g in enumerate(groups)]


def _unit(graph: Graph, tensors: frozenset[int], backward: set[int], head_of: dict[int, int], me: int,
          op_ns: OpNs) -> Unit:
    slot = min(s.before for s in _steps(graph, tensors))
    heads = tuple((h, graph.tensors[h].nbytes, max(k for k in graph.uses[h] if k < slot))
                  for h in sorted(tensors & backward))
    producers = sorted({graph.tensors[t].producer for t in tensors})
    reads = {r for p in producers for r in graph.ops[p].reads if r not in tensors}
    extends = tuple((graph.last_use[r], slot, graph.tensors[r].nbytes) for r in sorted(reads)
                    if not graph.tensors[r].persistent and graph.last_use[r] < slot)
    return Unit(tensors, heads, slot, sum(op_ns(p) for p in producers), _transient(graph, tensors, producers)
                + sum(b for _, _, b in extends), tuple(sorted({head_of[r] for r in reads if r in head_of} - {me})),
                extends)


def _transient(graph: Graph, tensors: frozenset[int], producers: list[int]) -> int:
    """The most bytes the unit's re-runs hold at once, run alone in forward order, less its heads (which
    the ops after the slot hold anyway): each copy from its re-run to its last reader among them (a head
    to the end), each re-run's other outputs and workspace while it runs."""
    last = {t: max([i for i, p in enumerate(producers) if t in graph.ops[p].reads], default=len(producers))
            for t in tensors}
    heads = {t for t in tensors if _first_backward(graph, t) is not None}
    peak = 0
    for i, p in enumerate(producers):
        alive = sum(graph.tensors[t].nbytes for t in tensors
                    if producers.index(graph.tensors[t].producer) <= i and (t in heads or last[t] >= i))
        others = sum(graph.tensors[t].nbytes for t in graph.ops[p].writes if t not in tensors)
        peak = max(peak, alive + others)
    return max(peak - sum(graph.tensors[h].nbytes for h in heads), 0)


@dataclass
class Program:
    """min c.v subject to lower <= A v <= upper, v's integral ones 0 or 1 (`scipy.optimize.milp`'s form).
    The variables: x per unit, y per unit (with moves), m per (unit, slot), T per slot, S_out, S_in."""

    units: list[Unit]
    moves: bool
    over: dict[int, int] = field(default_factory=dict)  # per op, the variable of its bytes over the capacity
    cost: list[float] = field(default_factory=list)
    integral: list[int] = field(default_factory=list)
    upper_bounds: list[float] = field(default_factory=list)
    rows: list[dict[int, float]] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)

    def var(self, cost: float = 0.0, integral: bool = False, upper: float = 1.0) -> int:
        self.cost.append(cost)
        self.integral.append(int(integral))
        self.upper_bounds.append(upper)
        return len(self.cost) - 1

    def row(self, coefs: dict[int, float], lower: float = -np.inf, upper: float = np.inf) -> None:
        self.rows.append({v: c for v, c in coefs.items() if c})
        self.lower.append(lower)
        self.upper.append(upper)

    def x(self, u: int) -> int:
        return u

    def y(self, u: int) -> int | None:
        return len(self.units) + u if self.moves else None


def program(graph: Graph, capacity: int, op_ns: OpNs, out_rate: float, in_rate: float, moves: bool) -> Program:
    """The integer program of keeping, recomputing and (`moves`) moving `graph`'s units at `capacity` bytes."""
    units = units_of(graph, op_ns)
    p = Program(units, moves)
    for u in units:
        p.var(u.rerun_ns, integral=True)
    if moves:
        for u in units:  # a move that hides behind compute costs nothing but its bytes: ties broken by them
            p.var(u.nbytes * TIE_NS_PER_BYTE, integral=True)
        for i in range(len(units)):  # kept, recomputed or moved: one of the three
            p.row({v: 1.0 for v in _dropped(p, i)}, upper=1.0)
    early = _Early(p)
    binding = _binding(graph, capacity, units)
    alive = np.array(graph.live_bytes, dtype=float)
    _overs(p, binding, 1 / out_rate + 1 / in_rate)
    for k in binding:
        p.row({**_memory(p, early, k), p.over[k]: -MiB}, upper=capacity - alive[k])
    _slots(p, graph, capacity, early, alive)
    if moves:
        _stalls(p, graph, op_ns, out_rate, in_rate)
    return p


class _Early:
    """The m variables, made as the rows ask for them: per unit V and slot c of a unit that reads it
    (directly or through others) before V's own slot, whether V's head is back by c. Each is at most
    whether V is dropped and at least what each reader re-run by c asks of it."""

    def __init__(self, p: Program) -> None:
        self.p, units = p, p.units
        self.readers: dict[int, list[int]] = {i: [] for i in range(len(units))}
        for u, unit in enumerate(units):
            for v in unit.reads:
                self.readers[v].append(u)
        self.slots: dict[int, list[int]] = {}
        for v in sorted(range(len(units)), key=lambda i: units[i].slot):  # readers' slots come first
            self.slots[v] = sorted({c for u in self.readers[v] for c in [units[u].slot, *self.slots.get(u, ())]
                                    if c < units[v].slot})
        self.made: dict[tuple[int, int], int] = {}

    def at(self, v: int, k: int) -> int | None:
        """V's m variable in force at op k: the one of its latest slot at or before k (None: none yet)."""
        slots = [c for c in self.slots[v] if c <= k]
        return self.var(v, slots[-1]) if slots else None

    def before(self, v: int, c: int) -> int | None:
        """V's m variable of its slot before c (None: none)."""
        return self.at(v, c - 1)

    def var(self, v: int, c: int) -> int:
        if (v, c) in self.made:
            return self.made[v, c]
        p, units = self.p, self.p.units
        m = self.made[v, c] = p.var()
        dropped = _dropped(p, v)
        p.row({m: 1.0, **{d: -1.0 for d in dropped}}, upper=0.0)  # not back early if kept
        for u in self.readers[v]:
            ran = self.at(u, c) if c < units[u].slot else None
            if c >= units[u].slot or ran is not None:  # m >= dropped + x_u (+ m_u, u's re-run by c) - 1 (- 1)
                coefs = {m: 1.0, p.x(u): -1.0, **{d: -1.0 for d in dropped}}
                if ran is not None:
                    coefs[ran] = coefs.get(ran, 0.0) - 1.0
                p.row(coefs, lower=-1.0 if ran is None else -2.0)
        return m


def _dropped(p: Program, u: int) -> list[int]:
    y = p.y(u)
    return [p.x(u)] if y is None else [p.x(u), y]


def _overs(p: Program, binding: list[int], ns_per_byte: float) -> None:
    """The bytes over the capacity at each op where the activations' choices leave some: room other tensors
    (weights, gradients), which this program does not move, must make, each byte priced at a copy each way
    that hides behind nothing, once each time the excess rises from one op to the next (a tensor sent away
    for a stretch of ops makes room at all of them)."""
    for k in binding:  # ascending: the op before, where it binds, has its variable already (both in MiB)
        p.over[k] = p.var(upper=np.inf)
        rise = p.var(ns_per_byte * MiB, upper=np.inf)
        before = p.over.get(k - 1)
        p.row({rise: 1.0, p.over[k]: -1.0, **({before: 1.0} if before is not None else {})}, lower=0.0)


def _binding(graph: Graph, capacity: int, units: list[Unit]) -> list[int]:
    """The ops where the memory could exceed the capacity: over it with everything kept, or with what
    re-runs keep alive longer."""
    most = np.array(graph.live_bytes, dtype=float)
    for u in units:
        for after, before, nbytes in u.extends:
            most[after + 1:before + 1] += nbytes
        most[u.slot] += u.transient  # a slot's re-runs, counted at the op after them
    return [int(k) for k in np.flatnonzero(most > capacity)]


def _memory(p: Program, early: _Early, k: int) -> dict[int, float]:
    """What the choices change in the bytes held at op k (beside the graph's liveness)."""
    coefs: dict[int, float] = {}
    for i, u in enumerate(p.units):
        away = sum(b for _, b, f in u.heads if f < k < u.slot)
        if away:
            for d in _dropped(p, i):
                coefs[d] = coefs.get(d, 0.0) - away
            m = early.at(i, k)
            if m is not None:
                coefs[m] = coefs.get(m, 0.0) + away
        for after, before, nbytes in u.extends:
            if after < k < before:
                coefs[p.x(i)] = coefs.get(p.x(i), 0.0) + nbytes
    return coefs


def _slots(p: Program, graph: Graph, capacity: int, early: _Early, alive: np.ndarray) -> None:
    """Each slot where memory binds: what is alive across it (op c's bytes less what op c makes) and the
    transient bytes of the unit re-run there (T_c, at least each unit's transient times whether it runs at c:
    its m there less its m before, x at its own slot, and never where it is moved)."""
    new = [sum(graph.tensors[t].nbytes for t in op.writes if t not in op.reads) for op in graph.ops]
    at: dict[int, list[int]] = {}  # slot -> the units that may run there
    for i, u in enumerate(p.units):
        if u.transient:
            for c in [*early.slots[i], u.slot]:
                if c in p.over:
                    at.setdefault(c, []).append(i)
    most = max((u.transient for u in p.units), default=0)
    for c, runs in sorted(at.items()):
        t = p.var(upper=most / MiB)
        for i in runs:
            size = float(p.units[i].transient)
            coefs = {t: MiB, (p.x(i) if c == p.units[i].slot else early.var(i, c)): -size}
            before = early.before(i, c)
            if before is not None:
                coefs[before] = size
            y = p.y(i)
            if y is not None:
                coefs[y] = size
            p.row(coefs, lower=0.0)
        p.row({**_memory(p, early, c), t: MiB, p.over[c]: -MiB}, upper=capacity - (alive[c] - new[c]))


def _stalls(p: Program, graph: Graph, op_ns: OpNs, out_rate: float, in_rate: float) -> None:
    """S_out and S_in: the worst window's copy time beyond the compute it can hide behind."""
    ns = np.array([op_ns(k) for k in range(len(graph.ops))])
    backward = [k for k, op in enumerate(graph.ops) if op.phase is Phase.BACKWARD]
    start = backward[0] if backward else len(graph.ops)
    s_out, s_in = p.var(MS, upper=np.inf), p.var(MS, upper=np.inf)  # in ms
    for j in sorted({u.last_forward for u in p.units}):  # copies out from after op j to the backward's start
        coefs: dict[int, float] = {s_out: -MS}
        for i, u in enumerate(p.units):
            if u.last_forward >= j:
                coefs[_dropped(p, i)[-1]] = u.nbytes / out_rate
        p.row(coefs, upper=float(ns[j + 1:start].sum()))
    for c in sorted({u.slot for u in p.units}):  # copies in before op c, from the backward's start
        coefs = {s_in: -MS}
        for i, u in enumerate(p.units):
            if u.slot <= c:
                coefs[_dropped(p, i)[-1]] = u.nbytes / in_rate
            if start <= u.slot <= c:
                coefs[p.x(i)] = -u.rerun_ns
        p.row(coefs, upper=float(ns[start:c].sum()))

