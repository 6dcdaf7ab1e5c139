"""`belady`: MIN's evictions over the repeating iteration, each prefetch as early as the room allows.

The oracle is a ledger of its own: the bytes on the device at each op when a plan's trips are away
(a move's tensor is away over ops offload_after+1..prefetch_after, wrapping at the iteration's end),
from the graph's live bytes and the moves alone, sharing no code with the policy.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmexplorer.cli import main
from vmexplorer.graph import MODELS, PERSISTENT, Graph, Kind, Op, Phase, Tensor, build_graph
from vmexplorer.plan import Direction, Move, Origin, Plan
from vmexplorer.plan.moves import check_moves
from vmexplorer.plan.validate import validate_plan
from vmexplorer.policies import compile_plan
from vmexplorer.policies.belady import belady_moves

SIZES = {"alexnet": 96, "vgg11": 32, "vgg16": 32, "vgg19": 32, "resnet18": 32, "resnet50": 32, "resnet152": 32}
MiB = 1 << 20


@cache
def graph(model: str, batch: int, size: int) -> Graph:
    return build_graph(model, batch, size)


@st.composite
def setups(draw: st.DrawFn) -> tuple[str, int, int]:
    """Any model of the registry at a small batch, at any capacity from its minimum to its footprint;
    as (model, batch, capacity), since a graph's repr in a failure report would run to pages."""
    model, batch = draw(st.sampled_from(sorted(MODELS))), draw(st.integers(1, 4))
    g = graph(model, batch, SIZES[model])
    return model, batch, draw(st.integers(g.min_capacity[0], g.footprint))


def setup_graph(setup: tuple[str, int, int]) -> tuple[Graph, int]:
    model, batch, capacity = setup
    return graph(model, batch, SIZES[model]), capacity


HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def away(n: int, mv: Move) -> list[int]:
    assert mv.prefetch_after is not None
    if mv.prefetch_after >= mv.offload_after:
        return list(range(mv.offload_after + 1, mv.prefetch_after + 1))
    return [*range(mv.offload_after + 1, n), *range(0, mv.prefetch_after + 1)]


def held(g: Graph, moves: list[Move] | tuple[Move, ...]) -> list[int]:
    """Bytes on the device at each op with the moves' tensors away."""
    out = list(g.live_bytes)
    for mv in moves:
        for k in away(len(g.ops), mv):
            out[k] -= g.tensors[mv.tensor].nbytes
    return out


def needed(g: Graph, ledger: list[int], mv: Move, capacity: int) -> bool:
    """Whether some op would overflow with the move's tensor back on the device."""
    return any(ledger[k] + g.tensors[mv.tensor].nbytes > capacity for k in away(len(g.ops), mv))


def moved_bytes(plan: Plan) -> int:
    return sum(m.nbytes for m in plan.memops)


def test_every_model_in_the_registry_is_covered() -> None:
    assert set(SIZES) == set(MODELS)


def test_no_shipped_graph_overwrites_a_tensor_without_reading_it() -> None:
    """Why no trip of belady's carries dead data: an op writes only tensors it creates or also reads."""
    for model in MODELS:
        g = graph(model, 2, SIZES[model])
        for k, op in enumerate(g.ops):
            assert all(g.tensors[t].producer == k or t in op.reads for t in op.writes), op.name


@HYP
@given(setups(), st.sampled_from([0, MiB, 2 * MiB]))
def test_belady_plans_validate_and_stay_within_capacity(setup: tuple[str, int, int], min_bytes: int) -> None:
    g, capacity = setup_graph(setup)
    plan = compile_plan(g, capacity, "belady", {"min_bytes": min_bytes})
    validate_plan(g, plan)
    check_moves(g, plan.moves)
    assert plan.peak_resident <= capacity


@HYP
@given(setups())
def test_with_every_tensor_movable_its_trips_alone_fit_and_the_driver_never_steps_in(
        setup: tuple[str, int, int]) -> None:
    g, capacity = setup_graph(setup)
    g = g.sized_for(capacity)  # the graph the plan runs: workspaces fitted to the capacity
    moves = belady_moves(g, capacity, min_bytes=0)
    assert max(held(g, moves)) <= capacity
    plan = compile_plan(g, capacity, "belady", {"min_bytes": 0})
    assert not [m for m in plan.memops if m.origin is Origin.DRIVER]
    assert set(plan.moves) == set(moves)


@HYP
@given(setups())
def test_every_trip_makes_room_that_some_op_needs(setup: tuple[str, int, int]) -> None:
    g, capacity = setup_graph(setup)
    moves = belady_moves(g, capacity, min_bytes=0)
    ledger = held(g, moves)
    assert all(needed(g, ledger, mv, capacity) for mv in moves)


@HYP
@given(setups())
def test_each_prefetch_is_issued_as_early_as_the_room_allows(setup: tuple[str, int, int]) -> None:
    """One op earlier, the tensor would be back at the op after which it is now prefetched, and that
    op would overflow; unless the prefetch is already the earliest its trip allows (right after the
    offload, or a wrapped trip's at the iteration's start)."""
    g, capacity = setup_graph(setup)
    moves = belady_moves(g, capacity, min_bytes=0)
    ledger = held(g, moves)
    for mv in moves:
        p = mv.prefetch_after
        assert p is not None
        earliest = -1 if p < mv.offload_after else mv.offload_after + 1
        assert p == earliest or ledger[p] + g.tensors[mv.tensor].nbytes > capacity, mv


def _three_tensors() -> Graph:
    """Two persistent tensors of 1 MiB, p used by ops 0 and 3, q by ops 0 and 5; a temporary t of
    1 MiB made by op 2 and read by op 3. At 2 MiB, ops 2 and 3 hold one tensor too many."""
    def tensor(name: str, producer: int, consumers: tuple[int, ...]) -> Tensor:
        kind = Kind.WEIGHT if producer == PERSISTENT else Kind.ACTIVATION
        return Tensor(name, kind, (MiB // 4,), "float32", MiB, producer, consumers)

    def op(name: str, reads: tuple[int, ...], writes: tuple[int, ...] = ()) -> Op:
        return Op(name, "synthetic", Phase.FORWARD, name, reads, writes, 0, MiB * len(reads + writes))

    tensors = (tensor("p", PERSISTENT, (0, 3)), tensor("q", PERSISTENT, (0, 5)), tensor("t", 2, (3,)))
    ops = (op("a", (0, 1)), op("b", ()), op("c", (), (2,)), op("d", (0, 2)), op("e", ()), op("f", (1,)))
    return Graph("synthetic", 1, 1, tensors, ops)


def test_at_an_overflow_the_tensor_used_farthest_ahead_leaves_and_returns_as_soon_as_there_is_room() -> None:
    g = _three_tensors()
    assert list(g.live_bytes) == [2 * MiB, 2 * MiB, 3 * MiB, 3 * MiB, 2 * MiB, 2 * MiB]
    # q (next used by op 5) leaves rather than p (op 3); it can be back from op 4 on, so it is
    # prefetched after op 3
    assert belady_moves(g, 2 * MiB, min_bytes=0) == [Move(1, 0, 3)]
    assert belady_moves(g, 3 * MiB, min_bytes=0) == []
    assert belady_moves(g, 2 * MiB, min_bytes=2 * MiB) == []  # too small to move: the driver's


@pytest.mark.parametrize("model", sorted(MODELS))
def test_belady_plans_nothing_when_the_capacity_holds_the_footprint(model: str) -> None:
    g = graph(model, 2, SIZES[model])
    for min_bytes in (0, 2 * MiB):
        plan = compile_plan(g, g.footprint, "belady", {"min_bytes": min_bytes})
        assert plan.memops == () and plan.peak_resident == g.footprint


@pytest.mark.parametrize("model,batch", [("alexnet", 256), ("vgg16", 64), ("vgg19", 64), ("resnet18", 64),
                                         ("resnet50", 64), ("resnet152", 64)])
def test_at_half_the_footprint_belady_moves_no_more_bytes_than_uvm_or_autovm(model: str, batch: int) -> None:
    g = graph(model, batch, 224)
    belady = compile_plan(g, g.footprint // 2, "belady")
    assert moved_bytes(belady) <= moved_bytes(compile_plan(g, g.footprint // 2, "uvm"))
    assert moved_bytes(belady) <= moved_bytes(compile_plan(g, g.footprint // 2, "autovm"))
    assert not [m for m in belady.memops if m.origin is Origin.DRIVER]


def test_a_wrapped_trip_whose_room_is_needed_only_in_the_next_iteration_leaves_at_its_start() -> None:
    """Momentum is used once, by its layer's update near the iteration's end: offloaded there it would
    be evicted with only the last updates to hide behind, before the executor's end-of-iteration sync."""
    g = graph("vgg19", 32, 224).without_workspaces()
    capacity = int(g.footprint * 0.9)
    moves = belady_moves(g, capacity)
    momentum = g.tensor_id("classifier.0.weight.momentum")
    assert [(mv.offload_after, mv.prefetch_after is not None) for mv in moves if mv.tensor == momentum] == [(-1, True)]
    validate_plan(g, compile_plan(g, capacity, "belady"))


def test_belady_is_deterministic_and_leaves_the_graph_as_it_was() -> None:
    a, b = build_graph("resnet18", 8, 64), build_graph("resnet18", 8, 64)
    before = a.live_bytes
    first = compile_plan(a, a.footprint * 6 // 10, "belady", {"min_bytes": 0})
    assert first.memops == compile_plan(b, b.footprint * 6 // 10, "belady", {"min_bytes": 0}).memops
    assert first.memops == compile_plan(a, a.footprint * 6 // 10, "belady", {"min_bytes": 0}).memops
    assert a.live_bytes == before and first.memops


def test_the_command_line_plans_and_simulates_belady(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["--model", "resnet18", "--batch", "8", "--image-size", "64", "--capacity", "50%",
            "--policy", "belady", "--min-bytes", "0", "--format", "json"]
    assert main(["plan", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["config"]["policy"], doc["config"]["options"]) == ("belady", {"min_bytes": 0})
    assert doc["plan"]["moves"]
    assert main(["simulate", *args, "--out", str(tmp_path / "b.vms")]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["bytes_to_host"] > 0 and summary["fault_bytes"] == 0


def test_planned_offloads_and_prefetches_move_the_same_bytes_each_way() -> None:
    g = graph("vgg16", 32, 224)
    plan = compile_plan(g, g.footprint // 2, "belady")
    out = sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_HOST)
    assert out == sum(m.nbytes for m in plan.memops if m.direction is Direction.TO_DEVICE) > 0
