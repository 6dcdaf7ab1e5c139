"""What the joint bound's trade counts: at the most crowded ops after the forward pass, the bytes that must be
away from the device, and what making each recomputable activation again would cost instead of moving it.

`plan.bound.remade_free` lets every recomputable activation take room only where it is touched, made there
at no cost: valid, and loose exactly where recomputing does the work, since a re-run's compute is time on
the one compute stream. This module gives the simulator's bound (`simulator.bound`) what it needs to charge
it, one op at a time:

- **What must be away.** At op k, what k touches must be on the device, and so must whatever is alive across
  k (made before it, read after it: the graph as planned, without re-runs, at its least workspaces) unless it
  is away; so at least `over_bytes` = touched + alive - capacity of the alive bytes are away while k runs.
- **Away costs a copy or a re-run.** A byte alive across k and away at k is read after k: it comes back by a
  copy (a byte in) or is made again by a re-run of its maker after k. Only activations forward ops make can
  be made again (`bound.recomputable`).
- **What a re-run costs.** Making activation t again runs its maker, which reads its inputs then: those alive
  across k are accounted for on their own, and one dead at k (a chain's link, say the batch norm's output its
  ReLU reads) must be held across k, brought in, or made again too. Where every such link is at least t's
  size and read only by t's own chain, holding a link saves no room and bringing it in moves no fewer bytes
  than moving t, so making t again costs its whole chain (`remade_by`); otherwise only its maker is charged,
  which can only make the bound lower. An op a re-run shares with others is charged to each in shares that
  add up to its time once, so a plan making several again pays at least what they are charged together.

Every plan at the capacity is then one of the trade's choices at every crowded op, with at least its
charges; `simulator.bound` takes, at each, the cheapest split between re-runs (added to the compute) and
copies (at the fastest rate in), and the bound is the most any op asks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph import Graph, Phase
from .bound import recomputable

CROWDED_OPS = 16  # the ops after the forward pass with the most bytes over the capacity that are looked at


@dataclass(frozen=True)
class Crowded:
    """Op `op`, after the forward pass, at which `over_bytes` of what lives across it must be away: each
    recomputable activation alive across it may be away by being made again later, its bytes in
    `remade_bytes` and, beside them, the ops its re-run runs, each with the share of its time charged."""

    op: int
    over_bytes: int
    remade_bytes: tuple[int, ...]
    remade_by: tuple[tuple[tuple[int, float], ...], ...]


def crowded_ops(graph: Graph, capacity: int, count: int = CROWDED_OPS) -> list[Crowded]:
    """The `count` ops after the forward pass (the loss, the backward pass, the update) with the most bytes
    over `capacity`, on the graph without re-runs at its least workspaces; none where everything fits."""
    full = graph.full or graph
    g = (full.plain or full).least_workspaces()
    alive = _alive_across(g)
    n = len(g.ops)
    over = [g.working_sets[k] + sum(g.tensors[t].nbytes for t in alive[k]) - capacity for k in range(n)]
    after = [k for k in range(n) if g.ops[k].phase is not Phase.FORWARD and over[k] > 0]
    free = set(recomputable(g))
    out = []
    for k in sorted(after, key=lambda k: (-over[k], k))[:count]:
        items = sorted(t for t in alive[k] if t in free)
        by = _charged(g, k, items, alive[k], free)
        out.append(Crowded(k, over[k], tuple(g.tensors[t].nbytes for t in items), by))
    return out


def _alive_across(g: Graph) -> list[set[int]]:
    """For each op, the tensors made before it and read after it that it does not touch (a persistent
    tensor's next read may be in the next iteration)."""
    n = len(g.ops)
    out: list[set[int]] = [set() for _ in range(n)]
    for t, uses in enumerate(g.uses):
        if not uses:
            continue
        wraps = g.tensors[t].persistent
        spans = list(zip(uses, uses[1:])) + ([(uses[-1], uses[0] + n)] if wraps else [])
        for a, b in spans:
            if t in g.ops[b % n].reads:  # the next touch reads what is there: alive in between
                for k in range(a + 1, b):
                    out[k % n].add(t)
    return out


def _charged(g: Graph, k: int, items: list[int], alive: set[int], free: set[int]
             ) -> tuple[tuple[tuple[int, float], ...], ...]:
    """Each item's re-run ops with their shares: its whole chain where that is sound (the module's
    docstring), else its maker alone. `free`: the graph's recomputable activations."""
    touched = set(g.ops[k].touches)
    chains = {t: _chain(g, t, free, alive | touched) for t in items}
    count: dict[int, int] = {}
    for ops in chains.values():
        for o in ops:
            count[o] = count.get(o, 0) + 1
    # a link's maker in two chains: holding that link could serve both, so neither is charged its chain
    ops_of = {t: (ops if all(count[o] == 1 for o in ops - {g.tensors[t].producer}) else
                  {g.tensors[t].producer}) for t, ops in chains.items()}
    shares: dict[int, int] = {}
    for ops in ops_of.values():
        for o in ops:
            shares[o] = shares.get(o, 0) + 1
    return tuple(tuple((o, 1.0 / shares[o]) for o in sorted(ops_of[t])) for t in items)


def _chain(g: Graph, t: int, free: set[int], present: set[int]) -> set[int]:
    """The ops making `t` again takes where each link (an input dead at the op) is a recomputable
    activation at least t's size read only inside the chain; else t's maker alone."""
    maker, size = g.tensors[t].producer, g.tensors[t].nbytes
    ops, links, todo = {maker}, set(), [maker]
    while todo:
        o = todo.pop()
        for r in g.ops[o].reads:
            if r in present or r in links or g.tensors[r].producer == o:  # there, counted, or the op's scratch
                continue
            if r not in free or g.tensors[r].nbytes < size:
                return {maker}  # dead here and not remade, or a link smaller than t: holding it could gain room
            links.add(r)
            if g.tensors[r].producer not in ops:
                ops.add(g.tensors[r].producer)
                todo.append(g.tensors[r].producer)
    if any(u not in ops for r in links for u in g.uses[r]):  # a link read outside the chain could serve more
        return {maker}
    return ops
