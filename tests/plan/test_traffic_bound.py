"""The traffic bound: no schedule moves fewer bytes, checked against an exhaustive search on small graphs
and against every policy's plan on the real models; and the joint bound, over plans that also
recompute, against every recomputation of small graphs."""

from __future__ import annotations

import dataclasses
import itertools
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmexplorer.graph import Graph, Kind, Op, Phase, Recompute, Tensor, build_graph
from vmexplorer.graph.recompute import recomputed
from vmexplorer.plan import Direction, PlanError
from vmexplorer.plan.bound import min_traffic, recomputable, window_traffic
from vmexplorer.policies import POLICIES, compile_plan

HYP = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- small graphs, built by hand ------------------------------------------------------------------
OpSpec = tuple[tuple[int, ...], int, tuple[int, ...]]  # (tensors read, bytes of its new output or 0, overwritten)


def tiny(persistent: list[int], ops: list[OpSpec]) -> Graph:
    """A graph of `persistent` tensors (their bytes) and ops; op k's new output is tensor
    len(persistent) + (number of outputs before it). Read tensors that an op also writes are updated
    in place; `overwritten` tensors are written without being read."""
    specs: list[tuple[str, Kind, int, int]] = [(f"w{i}", Kind.WEIGHT, b, -1) for i, b in enumerate(persistent)]
    built = []
    for k, (reads, out, over) in enumerate(ops):
        writes = list(over)
        if out:
            writes.append(len(specs))
            specs.append((f"t{len(specs)}", Kind.ACTIVATION, out, k))
        built.append((tuple(reads), tuple(writes)))
    consumers = [tuple(k for k, (reads, _) in enumerate(built) if t in reads) for t in range(len(specs))]
    tensors = tuple(Tensor(name, kind, (b,), "uint8", b, producer, consumers[t])
                    for t, (name, kind, b, producer) in enumerate(specs))
    graph_ops = tuple(Op(f"op{k}", "x", Phase.FORWARD, f"op{k}", reads, writes, 0,
                         sum(tensors[t].nbytes for t in dict.fromkeys(reads + writes)))
                      for k, (reads, writes) in enumerate(built))
    return Graph("tiny", 1, 1, tensors, graph_ops)


@st.composite
def tiny_graphs(draw: st.DrawFn) -> Graph:
    persistent = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    n_temp, ops = 0, []
    for _ in range(draw(st.integers(2, 6))):
        existing = list(range(len(persistent) + n_temp))
        reads = tuple(sorted(draw(st.sets(st.sampled_from(existing), max_size=3))))
        others = [t for t in range(len(persistent)) if t not in reads]
        over = tuple(draw(st.sets(st.sampled_from(others), max_size=1))) if others else ()
        out = draw(st.integers(0 if reads or over else 1, 3))
        n_temp += out > 0
        ops.append((reads, out, over))
    return tiny(persistent, ops)


@st.composite
def tiny_setups(draw: st.DrawFn) -> tuple[Graph, int]:
    g = draw(tiny_graphs())
    low = g.min_capacity[0]
    return g, draw(st.integers(low, max(low, g.footprint - 1)))  # where something must move, if anything can


# --- the oracle: every schedule of one repeating iteration, byte by byte ---------------------------
def _live_after(g: Graph) -> dict[tuple[int, int], bool]:
    """(op, tensor) -> whether what the op leaves in the tensor is read again: its next touch (in the
    next iteration for a persistent tensor) reads it. Written apart from plan/bound.py's walk."""
    n, out = len(g.ops), {}
    for k, op in enumerate(g.ops):
        for t in set(op.reads) | set(op.writes):
            later = [j for j in range(k + 1, n) if t in g.ops[j].reads or t in g.ops[j].writes]
            if not later and g.tensors[t].producer == -1:
                later = [j for j in range(n) if t in g.ops[j].reads or t in g.ops[j].writes]
            out[k, t] = bool(later) and t in g.ops[later[0]].reads
    return out


def least_fetched(g: Graph, capacity: int, whole: bool) -> int:
    """The fewest bytes any schedule fetches in an iteration that starts and ends with the same bytes
    on the device: every start, and before every op every way of keeping or evicting each byte of what
    the op does not touch (whole tensors only, with `whole`); fetching is on demand (fetching earlier
    never fetches less); dead bytes are dropped, and what an op only writes costs nothing."""
    live, size = _live_after(g), [t.nbytes for t in g.tensors]
    carried = [t for t, x in enumerate(g.tensors) if x.producer == -1 and g.uses[t] and live[max(g.uses[t]), t]]
    starts = [s for s in itertools.product(*[(0, size[t]) if whole else range(size[t] + 1) for t in carried])
              if sum(s) <= capacity]
    best = None
    for s in starts:
        states = {tuple(dict(zip(carried, s)).get(t, 0) for t in range(len(size))): 0}
        for k in range(len(g.ops)):
            states = _step(g, k, states, capacity, whole, live, size)
        end = tuple(dict(zip(carried, s)).get(t, 0) for t in range(len(size)))
        if end in states and (best is None or states[end] < best):
            best = states[end]
    assert best is not None, "keeping nothing but what each op touches is always a schedule"
    return best


def _step(g: Graph, k: int, states: dict[tuple[int, ...], int], capacity: int, whole: bool,
          live: dict[tuple[int, int], bool], size: list[int]) -> dict[tuple[int, ...], int]:
    op = g.ops[k]
    touched = set(op.reads) | set(op.writes)
    out: dict[tuple[int, ...], int] = {}
    for r, cost in states.items():
        fetched = sum(size[t] - r[t] for t in set(op.reads))
        choices = [(size[t],) if t in touched else (0, r[t]) if whole else range(r[t] + 1)
                   for t in range(len(size))]
        for kept in itertools.product(*choices):
            if sum(kept) > capacity:
                continue
            after = tuple(0 if t in touched and not live[k, t] else b for t, b in enumerate(kept))
            if cost + fetched < out.get(after, 1 << 60):
                out[after] = cost + fetched
    return out


def least_in_window(g: Graph, capacity: int, j: int, k: int) -> tuple[int, int]:
    """The fewest bytes any byte schedule of the repeating iteration copies out, and (apart) the fewest
    it copies in, while ops j..k-1 run: evictions before ops j+1..k (before op k = n: the next
    iteration's op 0), copies in before ops j+1..k-1. Before every op each live byte it does not touch
    may stay, go out or come in (fetching ahead of need too), within the capacity."""
    live, size, n = _live_after(g), [t.nbytes for t in g.tensors], len(g.ops)
    carried = [t for t, x in enumerate(g.tensors) if x.producer == -1 and g.uses[t] and live[max(g.uses[t]), t]]

    def live_before(m: int, t: int) -> bool:
        earlier = [u for u in g.uses[t] if u < m] or ([max(g.uses[t])] if g.tensors[t].persistent and g.uses[t] else [])
        return bool(earlier) and live[earlier[-1], t]

    def least(counted: int) -> int:  # 0: bytes out, 1: bytes in
        best = None
        for start in itertools.product(*[range(size[t] + 1) for t in carried]):
            first = tuple(dict(zip(carried, start)).get(t, 0) for t in range(len(size)))
            if sum(first) > capacity:
                continue
            states = {first: 0}
            for m in range(n):
                out_here = j < m <= k or (k == n and m == 0)
                states = _window_step(g, m, states, capacity, live, size, live_before,
                                      (out_here, False) if counted == 0 else (False, j < m < k))
            if first in states and (best is None or states[first] < best):
                best = states[first]
        assert best is not None
        return best

    return least(0), least(1)


def _window_step(g: Graph, m: int, states: dict[tuple[int, ...], int], capacity: int,
                 live: dict[tuple[int, int], bool], size: list[int], live_before, count: tuple[bool, bool]
                 ) -> dict[tuple[int, ...], int]:
    op = g.ops[m]
    touched = set(op.reads) | set(op.writes)
    out: dict[tuple[int, ...], int] = {}
    for r, cost in states.items():
        choices = [(size[t],) if t in touched else range(size[t] + 1) if live_before(m, t) else (0,)
                   for t in range(len(size))]
        for kept in itertools.product(*choices):
            if sum(kept) > capacity:
                continue
            evicted = sum(max(0, r[t] - kept[t]) for t in range(len(size)))
            fetched = sum(max(0, kept[t] - r[t]) for t in range(len(size)) if t not in touched or t in op.reads)
            moved = cost + (evicted if count[0] else 0) + (fetched if count[1] else 0)
            after = tuple(0 if t in touched and not live[m, t] else b for t, b in enumerate(kept))
            if moved < out.get(after, 1 << 60):
                out[after] = moved
    return out


# --- against the oracle ----------------------------------------------------------------------------
def test_bytes_beat_whole_tensors_where_two_weights_take_turns_in_three_bytes_of_room() -> None:
    g = tiny([2, 2], [((0,), 0, ()), ((1,), 0, ())])
    bound = min_traffic(g, 3)
    assert (bound.min_bytes_to_device, bound.min_bytes_to_host) == (2, 2)  # one byte of each comes and goes
    assert least_fetched(g, 3, whole=False) == 2
    assert least_fetched(g, 3, whole=True) == 4  # whole tensors: each weight evicted and fetched in full


def test_data_overwritten_before_it_is_read_again_is_never_fetched_nor_written_back() -> None:
    # op1 needs w1 and w2 in 4 bytes of room, so w0 must go; op2 then writes all of w0 (overwrite) or
    # updates it (reads it too): overwritten, w0's old bytes are dead and need not come back
    ops: list[OpSpec] = [((0, 1), 0, ()), ((1, 2), 0, ()), ((), 0, (0,)), ((0, 1), 0, ())]
    overwritten = tiny([2, 2, 2], ops)
    updated = tiny([2, 2, 2], [*ops[:2], ((0,), 0, (0,)), ops[3]])
    assert (min_traffic(overwritten, 4).min_bytes_to_device, min_traffic(updated, 4).min_bytes_to_device) == (2, 4)
    assert least_fetched(overwritten, 4, whole=False) == 2 and least_fetched(updated, 4, whole=False) == 4


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_setups())
def test_the_bound_is_the_least_any_byte_schedule_fetches_and_at_most_any_whole_tensor_ones(setup) -> None:
    g, capacity = setup
    bound = min_traffic(g, capacity)
    assert bound.min_bytes_to_device == least_fetched(g, capacity, whole=False)
    assert bound.min_bytes_to_device <= least_fetched(g, capacity, whole=True)
    assert bound.min_bytes_to_host == bound.min_bytes_to_device  # each byte fetched was evicted once


@HYP
@given(tiny_setups(), st.integers(0, 4))
def test_more_capacity_never_needs_more_traffic(setup, more) -> None:
    g, capacity = setup
    assert min_traffic(g, capacity + more).min_bytes_to_device <= min_traffic(g, capacity).min_bytes_to_device


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_setups(), st.data())
def test_no_byte_schedule_moves_less_in_a_window_of_ops_than_the_window_bound(setup, data) -> None:
    g, capacity = setup
    n = len(g.ops)
    j = data.draw(st.integers(0, n - 1))
    k = data.draw(st.integers(j + 1, n))
    windows = window_traffic(g, capacity)
    out, into = least_in_window(g, capacity, j, k)
    assert windows.to_host[j, k] <= out and windows.to_device[j, k] <= into


def test_what_one_window_makes_beyond_the_room_goes_out_and_what_the_next_reads_comes_back() -> None:
    # op0 and op1 make 3 bytes each that op2 and op3 read: with 4 bytes of room, 2 of the 6 must leave
    # while ops 0-1 run and come back while ops 2-3 run, and nothing need move the other way
    g = tiny([], [((), 3, ()), ((), 3, ()), ((1,), 0, ()), ((0,), 0, ())])
    windows = window_traffic(g, 4)
    assert (windows.to_host[0, 2], windows.to_device[2, 4]) == (2, 2)
    assert least_in_window(g, 4, 0, 2)[0] == 2 and least_in_window(g, 4, 2, 4)[1] == 2
    assert windows.to_device[0, 2] == windows.to_host[2, 4] == 0


def test_without_a_repeating_iteration_in_sight_the_bound_stays_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from vmexplorer.plan import bound as module

    g = build_graph("vgg19", 8, 64)
    capacity = g.footprint * 95 // 100  # MIN repeats from its third iteration here
    steady = min_traffic(g, capacity)
    monkeypatch.setattr(module, "_MAX_ROUNDS", 3)
    early = min_traffic(g, capacity)
    assert 0 < early.min_bytes_to_device < steady.min_bytes_to_device
    assert early.min_bytes_to_host == early.min_bytes_to_device


def test_below_the_largest_working_set_there_is_no_bound() -> None:
    g = build_graph("vgg11", 2, 32)
    need, op = g.min_capacity
    with pytest.raises(PlanError, match=g.ops[op].name):
        min_traffic(g, need - 1)
    assert min_traffic(g, need).min_bytes_to_device > 0


# --- recomputation: the joint bound ---------------------------------------------------------------
@st.composite
def tiny_trained(draw: st.DrawFn) -> tuple[Graph, int, list[Recompute]]:
    """A small graph whose first ops are its forward pass and the rest its backward, a capacity, and
    every recomputation it has: each activation a forward op made and a backward op reads, made again
    before that read."""
    g = draw(tiny_graphs())
    forward = draw(st.integers(1, len(g.ops) - 1))
    ops = tuple(dataclasses.replace(op, phase=Phase.FORWARD if k < forward else Phase.BACKWARD)
                for k, op in enumerate(g.ops))
    g = Graph("tiny", 1, 1, g.tensors, ops)
    steps = [Recompute(t, min(k for k in g.uses[t] if k >= forward)) for t in recomputable(g)
             if any(k >= forward for k in g.uses[t])]
    low = g.min_capacity[0]
    return g, draw(st.integers(low, max(low, g.footprint - 1))), steps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_trained())
def test_no_mix_of_recomputing_and_moving_moves_less_than_the_joint_bound(setup) -> None:
    g, capacity, steps = setup
    joint = min_traffic(g, capacity, recompute=True)
    assert joint.min_bytes_to_device <= min_traffic(g, capacity).min_bytes_to_device
    for chosen in itertools.chain.from_iterable(itertools.combinations(steps, r) for r in range(len(steps) + 1)):
        assert joint.min_bytes_to_device <= least_fetched(recomputed(g, chosen), capacity, whole=False), chosen


def test_recomputing_every_activation_frees_what_moving_alone_must_send_away() -> None:
    # op0 makes 3 bytes, op1 makes 3, the backward ops read them: with 4 bytes of room moving alone sends
    # 2 out and back, while each could be made again just before its read
    g = tiny([], [((), 3, ()), ((), 3, ()), ((1,), 0, ()), ((0,), 0, ())])
    g = Graph("tiny", 1, 1, g.tensors, tuple(dataclasses.replace(op, phase=Phase.FORWARD if k < 2 else Phase.BACKWARD)
                                             for k, op in enumerate(g.ops)))
    assert min_traffic(g, 4).min_bytes_to_device == 2 and min_traffic(g, 4, recompute=True).min_bytes_to_device == 0
    assert least_fetched(recomputed(g, [Recompute(0, 3), Recompute(1, 2)]), 4, whole=False) == 0


# --- the real models ------------------------------------------------------------------------------
SMALL = [("alexnet", 2, 96), ("vgg11", 2, 32), ("vgg16", 1, 32), ("resnet18", 2, 32), ("resnet50", 1, 32)]


@cache
def graph(model: str, batch: int, size: int) -> Graph:
    return build_graph(model, batch, size)


@pytest.mark.parametrize("model,batch,size", [*SMALL, ("vgg19", 64, 224), ("resnet152", 8, 224)])
def test_nothing_moves_at_the_footprint_and_something_just_below_it(model: str, batch: int, size: int) -> None:
    g = graph(model, batch, size)
    assert min_traffic(g, g.footprint) == min_traffic(g, g.footprint * 2)
    assert min_traffic(g, g.footprint).min_bytes_to_device == 0
    old = g.without_workspaces()  # with them, just below the footprint the workspaces shrink before bytes move
    below = min_traffic(old, old.footprint - 4096)
    assert 0 < below.min_bytes_to_device == below.min_bytes_to_host


@st.composite
def real_setups(draw: st.DrawFn) -> tuple[Graph, int, int]:
    g = graph(*draw(st.sampled_from(SMALL)))
    low, high = g.min_capacity[0], g.footprint + 1
    a, b = draw(st.integers(low, high)), draw(st.integers(low, high))
    return g, min(a, b), max(a, b)


@settings(max_examples=60, deadline=None)
@given(real_setups())
def test_on_the_models_more_capacity_never_needs_more_traffic(setup) -> None:
    g, small, large = setup
    a, b = min_traffic(g, small), min_traffic(g, large)
    assert b.min_bytes_to_device <= a.min_bytes_to_device and b.min_bytes_to_host <= a.min_bytes_to_host


def _moved(plan) -> tuple[int, int]:
    out = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
    return out, sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE)


@pytest.mark.parametrize("policy", [p for p, spec in POLICIES.items() if p != "device" and not spec.searches])
@pytest.mark.parametrize("model,batch,size", [*SMALL, ("vgg19", 64, 224)])
@pytest.mark.parametrize("share", [0.5, 0.6, 0.75, 0.9])
def test_every_policys_plan_moves_at_least_the_bound_each_way(policy: str, model: str, batch: int, size: int,
                                                              share: float) -> None:
    g = graph(model, batch, size)
    capacity = max(int(g.footprint * share), g.min_capacity[0])
    plan = compile_plan(g, capacity, policy)
    bound = min_traffic(g, capacity, recompute=bool(plan.recomputes))  # the joint bound where it recomputes
    out, into = _moved(plan)
    assert out >= bound.min_bytes_to_host and into >= bound.min_bytes_to_device


def test_vgg19_b64_at_half_its_footprint_needs_traffic_and_says_what_it_assumes() -> None:
    g = graph("vgg19", 64, 224)
    bound = min_traffic(g, g.footprint // 2)
    assert g.footprint // 4 < bound.min_bytes_to_device < g.footprint
    assert "byte granularity" in bound.assumptions and "dead data" in bound.assumptions


def test_the_least_traffic_counts_each_workspace_at_its_least_as_a_plan_with_less_room_has_it() -> None:
    g = graph("alexnet", 256, 224)
    capacity = g.footprint // 2
    least = min_traffic(g, capacity)
    assert least == min_traffic(g.fitted(capacity), capacity) == min_traffic(g.fitted(0), capacity)
    swap = compile_plan(g, capacity, "belady", mechanism="swap")  # made with less room: smaller workspaces
    assert swap.planned_with < capacity
    moved = sum(m.nbytes for m in swap.memops if m.direction is Direction.TO_DEVICE)
    assert least.min_bytes_to_device <= moved
