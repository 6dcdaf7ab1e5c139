"""The swap pool with no GPU: stays placed so no two in the pool at one op share a byte, bytes changing
hands only once their last holder is done with them, copies in on demand on the compute stream.

The oracles share no code with the planner: what the pool holds at each op is the plan replay's
(`residency.check`), and the order steps run in is worked out here from their waits and streams."""

from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import graph, swap_cases, swap_plan

from vmexplorer.engine.schedule import Ledger, StepKind, Stream, schedule
from vmexplorer.graph import Graph, Kind, Op, Phase, Tensor
from vmexplorer.plan import Direction, Mechanism, Mode
from vmexplorer.plan.pool import GRANULE, KERNEL_TEMPORARIES, kept_tensors, plan_pool, pool_limit, stays
from vmexplorer.plan.residency import check
from vmexplorer.policies import compile_plan

SMALL = [("alexnet", 96), ("vgg11", 32), ("resnet18", 32), ("resnet50", 32)]  # batch 1 to 3
HYP = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def swap_plans(draw: st.DrawFn):
    g, capacity, policy, options, moves = draw(swap_cases(SMALL, 3))
    return g, swap_plan(g, capacity, policy, options, moves)


@cache
def sample(model: str, batch: int, policy: str, pct: int = 50, options: tuple = ()):
    g = graph(model, batch)
    return g, compile_plan(g, g.footprint * pct // 100, policy, dict(options), mechanism="swap")


SAMPLES = [("vgg19", 64, "vdnn"), ("vgg19", 64, "belady"), ("alexnet", 256, "autovm"), ("resnet18", 64, "manual")]


def in_pool(pool, n):
    """Per op, (start, end) of each stay in the pool while it runs."""
    out = [[] for _ in range(n)]
    for s, offset, size in zip(pool.stays, pool.offsets, pool.sizes):
        for k in range(s.first, s.last + 1):
            out[k % n].append((offset, offset + size, s.tensor))
    return out


def overlapping(ranges):
    ranges = sorted(ranges)
    return [(a, b) for a, b in zip(ranges, ranges[1:]) if b[0] < a[1]]


@HYP
@given(swap_plans())
def test_stays_in_the_pool_at_the_same_op_never_share_a_byte_and_hold_what_the_replay_holds(case):
    g, plan = case
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    kept = kept_tensors(g, False)
    pool = plan_pool(g, plan, kept, improve=2000)
    n = len(g.ops)
    at_op = in_pool(pool, n)
    assert all(not overlapping(ranges) for ranges in at_op)
    # the replay frees the loss after its last op; the pool keeps it for the host to read
    held = [sum(g.tensors[t].nbytes for _, _, t in ranges if t not in kept or g.last_use[t] >= k)
            for k, ranges in enumerate(at_op)]
    assert held == list(check(g, plan.capacity, plan.memops, plan.resident_at_start, Mechanism.SWAP).occupied_bytes)
    for k, op in enumerate(g.ops):  # every tensor an op touches is in the pool, once
        tensors = [t for _, _, t in at_op[k]]
        assert all(tensors.count(t) == 1 for t in op.touches)
    assert pool.total >= pool.peak >= max(pool.sizes, default=0)


@HYP
@given(swap_plans())
def test_bytes_change_hands_only_after_their_last_holder_is_done_with_them(case):
    g, plan = case
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    pool = plan_pool(g, plan, kept_tensors(g, False), improve=0)
    steps = schedule(g, plan, None, pool.waits)
    after = happens_after(steps)
    position = {s.done: i for i, s in enumerate(steps)}
    for a, (sa, oa, za) in enumerate(zip(pool.stays, pool.offsets, pool.sizes)):
        for sb, ob, zb in zip(pool.stays[a + 1:], pool.offsets[a + 1:], pool.sizes[a + 1:]):
            if not (oa < ob + zb and ob < oa + za):
                continue
            for first, then in ((sa, sb), (sb, sa)):
                if first.end is not None and then.begin is not None and first.end_at < then.begin_at:
                    assert after[position[then.begin]] >> position[first.end] & 1, (first, then)


def happens_after(steps):
    """For each step, the steps that have finished before it starts: those it waits for, those before it on
    its stream, and so on."""
    position = {s.done: i for i, s in enumerate(steps)}
    last_on: dict = {}
    before: list[int] = []  # bit j: step j
    for i, s in enumerate(steps):
        direct = [position[e] for e in s.waits] + ([last_on[s.stream]] if s.stream in last_on else [])
        bits = 0
        for j in direct:
            bits |= before[j] | (1 << j)
        before.append(bits)
        last_on[s.stream] = i
    return before


@HYP
@given(swap_plans())
def test_a_swap_step_only_waits_for_steps_before_it_and_the_ledger_stays_within_the_capacity(case):
    g, plan = case
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    kept = kept_tensors(g, False)
    pool = plan_pool(g, plan, kept, improve=0)
    recorded = set()
    steps = schedule(g, plan, None, pool.waits)
    for s in steps:
        assert set(s.waits) <= recorded
        recorded.add(s.done)
    start = dict(plan.resident_at_start)
    ledger = Ledger(g, [start.get(t, 0) for t in range(len(g.tensors))], release_dead=True, kept=kept)
    for _ in range(2):
        for s in steps:
            ledger.apply(s, plan)
    assert ledger.peak <= plan.capacity + pool.kept_bytes
    assert ledger.bytes == [start.get(t, 0) if t not in kept else g.tensors[t].nbytes for t in range(len(g.tensors))]


@pytest.mark.parametrize("case", SAMPLES)
def test_a_copy_in_on_demand_is_a_step_on_the_compute_stream_that_brings_the_whole_tensor(case):
    g, plan = sample(*case)
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    pool = plan_pool(g, plan, kept_tensors(g, False))
    steps = schedule(g, plan, None, pool.waits)
    on_demand = [s for s in steps if s.kind is StepKind.COPY_IN]
    assert on_demand or case[2] == "belady"
    ledger = Ledger(g, [0] * len(g.tensors))
    for s in on_demand:
        m = plan.memops[s.index]
        assert (m.mode, m.direction, s.stream) == (Mode.SYNC, Direction.TO_DEVICE, Stream.COMPUTE)
        assert ledger.apply(s, plan) == (0, g.tensors[m.tensor].nbytes)
        assert ledger.bytes[m.tensor] == g.tensors[m.tensor].nbytes
    assert all(plan.memops[s.index].direction is Direction.TO_HOST for s in steps if s.kind is StepKind.EVICT)


@pytest.mark.parametrize("case", SAMPLES)
def test_before_an_op_copies_out_come_first_then_copies_in_then_the_op(case):
    g, plan = sample(*case)
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    pool = plan_pool(g, plan, kept_tensors(g, False))
    steps = schedule(g, plan, None, pool.waits)
    run: list = []
    for s in steps:
        if s.kind is StepKind.OP:
            kinds = [plan.memops[i] for i in run]
            sync = [m.direction for m in kinds if m.mode is Mode.SYNC]
            assert sync == sorted(sync, key=lambda d: d is Direction.TO_DEVICE)
            run = []
        else:
            run.append(s.index)


@pytest.mark.parametrize("case", SAMPLES[:3])  # the last copies out on demand only: on the compute stream
def test_where_a_stay_takes_over_copied_out_bytes_its_first_step_waits_for_that_copy(case):
    g, plan = sample(*case)
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    pool = plan_pool(g, plan, kept_tensors(g, False))
    steps = {s.done: s for s in schedule(g, plan, None, pool.waits)}
    copied_out = [(begin, end) for begin, ends in pool.waits.items() for end in ends
                  if end[0] == "memop" and plan.memops[end[1]].mode is Mode.ASYNC]
    assert copied_out, "the case must reuse the bytes of a copy out"
    for begin, end in copied_out:
        step = steps[begin]
        assert end in step.waits or step.stream is Stream.TO_HOST


def test_a_copy_in_taken_straight_back_out_moves_nothing_and_holds_no_bytes():
    g, plan = sample("vgg19", 64, "vdnn")
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    all_stays, elided = stays(g, plan, kept_tensors(g, False))
    assert elided, "the repair of this plan copies arriving tensors back out"
    events = {s.begin for s in all_stays} | {s.end for s in all_stays}
    for tensor in {plan.memops[i].tensor for i in elided}:  # each a copy in and the copy out right after it
        into, out = sorted((i for i in elided if plan.memops[i].tensor == tensor),
                           key=lambda i: plan.memops[i].direction is Direction.TO_HOST)
        a, b = plan.memops[into], plan.memops[out]
        assert (a.mode, b.mode) == (Mode.ASYNC, Mode.SYNC) and a.issue_after + 1 == b.complete_before
        assert ("memop", into) not in events and ("memop", out) not in events


def test_a_weight_brought_back_late_holds_its_bytes_across_the_iteration_end():
    g, plan = sample("vgg19", 64, "belady")
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    pool = plan_pool(g, plan, kept_tensors(g, False))
    n = len(g.ops)
    wraps = [s for s in pool.stays if s.last >= n]
    assert wraps and all(g.tensors[s.tensor].persistent and s.carried for s in wraps)
    at_op = in_pool(pool, n)
    for s in wraps:  # in the pool at the iteration's last op and its first
        assert any(t == s.tensor for _, _, t in at_op[n - 1]) and any(t == s.tensor for _, _, t in at_op[0])


# --- a hand-made graph: the pool is exactly the peak -----------------------------------------------------
MiB = 1 << 20


def mirror(n: int = 4) -> Graph:
    """A weight; n forward ops, each making an activation from the one before; n backward ops, each making a
    gradient from the one before and the activations in reverse order. Every tensor is 1 MiB."""
    reads, writes = [], []
    for k in range(n):
        reads.append((0,) + ((k,) if k else ()))
        writes.append((1 + k,))
    for j in range(n):
        reads.append((0, n - j) + ((n + j,) if j else ()))
        writes.append((1 + n + j,))
    names = ["w"] + [f"a{k}" for k in range(n)] + [f"g{j}" for j in range(n)]
    tensors = tuple(Tensor(name, Kind.WEIGHT if t == 0 else Kind.ACTIVATION, (MiB // 4,), "float32", MiB,
                           -1 if t == 0 else t - 1, tuple(k for k in range(2 * n) if t in reads[k]))
                    for t, name in enumerate(names))
    ops = tuple(Op(f"op{k}", "relu", Phase.FORWARD if k < n else Phase.BACKWARD, f"l{k}", reads[k], writes[k], 0, 0)
                for k in range(2 * n))
    return Graph("mirror", 1, 1, tensors, ops)


@pytest.mark.parametrize("policy", ["belady", "autovm", "manual"])
def test_a_plan_of_equal_tensors_gets_a_pool_of_exactly_its_peak(policy):
    g = mirror()
    # a capacity that leaves the pool 4 MiB beside what the engine takes of it itself
    capacity = 4 * MiB + KERNEL_TEMPORARIES + GRANULE - 1
    assert pool_limit(capacity, g.footprint) == 4 * MiB
    plan = compile_plan(g, capacity, policy, mechanism="swap")
    g = g.sized_for(plan.planned_with)  # the graph the plan runs
    assert plan.memops, "the case must move something"
    pool = plan_pool(g, plan, ())
    assert pool.total == pool.peak == plan.peak_resident <= 4 * MiB
    assert pool.fragmentation == 0 and pool.over_capacity == 0


def test_the_sample_plans_pools_are_within_a_quarter_of_the_capacity_over_it():
    for case in SAMPLES:
        g, plan = sample(*case)
        g = g.sized_for(plan.planned_with)  # the graph the plan runs
        pool = plan_pool(g, plan, kept_tensors(g, False))
        assert pool.peak <= plan.capacity + pool.kept_bytes + 512 * len(pool.stays)
        assert pool.total <= 1.25 * plan.capacity, case
        assert pool.over_capacity == max(pool.total - plan.capacity, 0)
