"""Under swap, the order each copy stream takes its planned copies in (`Plan.copy_order`).

A stream runs its copies one after another in the order the host calls them, so where the host makes
each call decides which copy a stream runs next. With no stored order (the executor's own,
docs/design.md, "The simulator") the host calls each copy just before the op that waits for it: a stream
then runs its copies in the order of the ops needing them, and a copy whose issue op has already run
waits behind one whose issue op has not.
A stored order names every asynchronous copy once; the host calls each stream's copies in that order,
each as early as the order lets it: once the op it is issued after is enqueued and the copy before it on
its stream is called. `earliest_deadline` picks an order from a simulated timeline: whenever a stream
frees, of the copies ready then (their issue op has ended), the one due first.

Under uvm a prefetch call blocks the host for about its transfer, so the executor makes it as late as it
can and a plan has no order.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..graph import Graph
from .mechanisms import mechanism_of
from .plan import Direction, Mode, Plan, PlanError


def asynchronous(plan: Plan, direction: Direction) -> list[int]:
    """The asynchronous copies of one direction (memop indices), in the plan's order where it has one,
    else in the executor's: by the op that waits for each, then by issue."""
    memops = plan.memops
    if plan.copy_order:
        return [i for i in plan.copy_order if memops[i].direction is direction]
    return sorted((i for i, m in enumerate(memops) if m.mode is Mode.ASYNC and m.direction is direction),
                  key=lambda i: (memops[i].complete_before, memops[i].issue_after, i))


def call_before(plan: Plan) -> dict[int, int]:
    """Each asynchronous copy -> the op its call is made before (len(graph.ops): the iteration's end): in
    the executor's order the op that waits for it; in a stored order right after its issue op, or after
    the call before it on its stream if that comes later."""
    memops = plan.memops
    if not plan.copy_order:
        return {i: m.complete_before for i, m in enumerate(memops) if m.mode is Mode.ASYNC}
    out: dict[int, int] = {}
    for d in Direction:
        at = 0
        for i in asynchronous(plan, d):
            at = out[i] = max(at, memops[i].issue_after + 1)
    return out


def check_copy_order(graph: Graph, plan: Plan) -> None:
    """PlanError unless the plan's copy order (if any) is one the executor can run: under swap only,
    naming every asynchronous copy once, and calling each copy before the op that waits for it."""
    graph = plan.graph_of(graph)
    order, memops = plan.copy_order, plan.memops
    if not order:
        return
    if not mechanism_of(plan).ordered_copies:
        raise PlanError(f"the plan is {plan.mechanism.value} but has a copy order: there each prefetch is called "
                        "just before the op that waits for it, as the call blocks the host; a copy order is for "
                        "pinned copies (swap)")
    wanted = {i for i, m in enumerate(memops) if m.mode is Mode.ASYNC}
    seen: set[int] = set()
    for i in order:
        if i not in wanted:
            what = f"memory operation {i}, which is not an asynchronous copy" if 0 <= i < len(memops) else \
                f"memory operation {i}; the plan has {len(memops)}"
            raise PlanError(f"the copy order names {what}")
        if i in seen:
            raise PlanError(f"the copy order names memory operation {i} twice")
        seen.add(i)
    if seen != wanted:
        raise PlanError(f"the copy order leaves out memory operation {min(wanted - seen)}: it must name every "
                        "asynchronous copy once")
    for d in Direction:
        latest: int | None = None  # of the copies called before, the one issued after the latest op
        for i in asynchronous(plan, d):
            m = memops[i]
            if latest is not None and memops[latest].issue_after >= m.complete_before:
                raise PlanError(
                    f"the copy order calls memory operation {i} ({graph.tensors[m.tensor].name}, due before op "
                    f"{m.complete_before}) after memory operation {latest}, issued after op "
                    f"{memops[latest].issue_after}: op {m.complete_before} would wait for a copy not yet called")
            if latest is None or memops[latest].issue_after < m.issue_after:
                latest = i


def earliest_deadline(plan: Plan, op_end_ns: Sequence[float], copy_ns: Sequence[float]) -> tuple[int, ...]:
    """The order in which each copy stream, whenever it frees, takes of the copies ready then (their issue
    op has ended, by `op_end_ns`) the one due first; `copy_ns` is each memory operation's duration. One
    stream's copies, then the other's (only each stream's own order matters)."""
    memops = plan.memops
    order: list[int] = []
    for d in Direction:
        left = {i for i, m in enumerate(memops) if m.mode is Mode.ASYNC and m.direction is d}
        ready = {i: float(op_end_ns[memops[i].issue_after]) if memops[i].issue_after >= 0 else 0.0 for i in left}
        due = lambda i: (memops[i].complete_before, memops[i].issue_after, i)  # noqa: E731
        free = 0.0
        while left:
            can = [i for i in left if ready[i] <= free] or [min(left, key=lambda i: (ready[i], due(i)))]
            i = min(can, key=due)
            order.append(i)
            left.remove(i)
            free = max(free, ready[i]) + float(copy_ns[i])
    return tuple(order)


def room_for(plan: Plan) -> list[list[int]]:
    """Per memory operation, for a copy in (prefetch) the asynchronous copies out due before the op after
    the one it is issued after: the room it lands in is theirs, so it starts once they have ended, and the
    device never holds both (the replay counts them before that op and it from that op on)."""
    due_out: dict[int, list[int]] = {}
    for i, m in enumerate(plan.memops):
        if m.direction is Direction.TO_HOST and m.mode is Mode.ASYNC:
            due_out.setdefault(m.complete_before, []).append(i)
    return [due_out.get(m.issue_after + 1, []) if m.direction is Direction.TO_DEVICE and m.mode is Mode.ASYNC else []
            for m in plan.memops]
