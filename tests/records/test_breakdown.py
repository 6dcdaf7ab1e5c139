"""Where an iteration's time goes: compute, recomputing, waiting on demand faults, waiting on evictions
and prefetches, idle. The same split for every policy, measured or simulated."""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from vmexplorer.graph import Phase, build_graph
from vmexplorer.plan import Mode
from vmexplorer.policies import compile_plan
from vmexplorer.records import Timeline, TimeSplit, time_split
from vmexplorer.session import Session, load_session, new_session
from vmexplorer.simulator import H100_DEFAULT, simulate

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "sample_sessions").glob("*.vms"))


@cache
def sample(name: str) -> Session:
    return load_session(Path(__file__).resolve().parents[2] / "sample_sessions" / name)


def _typical_length(s: Session) -> int:
    its = np.unique(s.timeline.op_iteration).tolist()
    return int(s.timeline.iteration_ns()[its.index(s.timeline.typical_iteration())])


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_the_parts_of_every_sample_add_up_to_its_typical_iteration_and_none_recomputes(path: Path) -> None:
    s = sample(path.name)
    split = s.time_split()
    assert min(split.compute_ns, split.fault_wait_ns, split.transfer_wait_ns, split.idle_ns) >= 0
    assert split.iteration_ns == _typical_length(s)
    assert split.recompute_ns == 0 and not s.plan.recomputes


@pytest.mark.parametrize("name", ["alexnet-b256-{}-50pct", "resnet50-b64-{}-50pct", "vgg19-b64-{}-50pct",
                                  "vgg19-b64-{}-60pct", "vgg19-b64-{}-75pct", "vgg19-b64-{}-90pct"])
def test_uvm_waits_on_demand_faults_longer_than_autovm_at_the_same_capacity(name: str) -> None:
    uvm = sample(name.format("uvm") + ".measured.vms").time_split()
    autovm = sample(name.format("autovm") + ".measured.vms").time_split()
    assert uvm.fault_wait_ns > autovm.fault_wait_ns


@pytest.mark.parametrize("model", ["alexnet-b256", "resnet50-b64", "vgg19-b64"])
def test_a_device_run_is_compute_with_no_wait_on_memory(model: str) -> None:
    split = sample(f"{model}-device.measured.vms").time_split()
    assert split.fault_wait_ns == split.transfer_wait_ns == 0
    assert split.compute_ns > 0.95 * split.iteration_ns


def test_a_simulated_run_waits_on_faults_for_exactly_the_fault_time_the_cost_model_gives() -> None:
    graph = build_graph("vgg11", 8, 64)
    plan = compile_plan(graph, (graph.min_capacity[0] + graph.footprint) // 2, "uvm")
    session = new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)
    faults = sum(H100_DEFAULT.fault_ns(int(b), graph.ops[int(k)].kind)
                 for k, b in zip(session.timeline.op_index, session.timeline.op_fault_bytes) if b)
    split = session.time_split()
    assert faults > 0 and abs(split.fault_wait_ns - faults) <= len(graph.ops)  # each op rounds to a ns


def _back_to_back(n_ops: int, n_memops: int, gap_before: int, gap_ns: int) -> Timeline:
    """Ops of 1000 ns one after another, a gap of `gap_ns` before op `gap_before`; memops that take no time."""
    start = np.arange(n_ops, dtype=np.int64) * 1000 + np.where(np.arange(n_ops) >= gap_before, gap_ns, 0)
    zeros = np.zeros(n_ops, dtype=np.int64)
    mz = np.zeros(n_memops, dtype=np.int64)
    return Timeline("simulated", zeros, np.arange(n_ops, dtype=np.int64), start, start + 1000, zeros, zeros,
                    mz, np.arange(n_memops, dtype=np.int64), mz, mz.copy(), np.zeros(1, dtype=np.int64),
                    np.zeros(1, dtype=np.int64))


def test_a_gap_with_no_transfer_to_wait_for_is_idle() -> None:
    graph = build_graph("vgg11", 8, 64)
    plan = compile_plan(graph, graph.footprint, "uvm")
    n = len(graph.ops)
    split = time_split(graph, plan, _back_to_back(n, len(plan.memops), 3, 500), np.full(n, 1000))
    assert split == TimeSplit(compute_ns=1000 * n, recompute_ns=0, fault_wait_ns=0, transfer_wait_ns=0, idle_ns=500)


def test_a_gap_is_waiting_until_the_transfer_the_op_needs_ends_and_idle_after() -> None:
    graph = build_graph("vgg11", 8, 64)
    plan = compile_plan(graph, (graph.min_capacity[0] + graph.footprint) // 2, "autovm")
    m, due = next((i, mo.complete_before) for i, mo in enumerate(plan.memops)
                  if mo.mode is Mode.ASYNC and 0 < mo.complete_before < len(graph.ops))
    n = len(graph.ops)
    tl = _back_to_back(n, len(plan.memops), due, 3000)
    tl.memop_end_ns[m] = due * 1000 + 2000  # ends 2 µs into the 3 µs gap before the op that needs it
    split = time_split(graph, plan, tl, np.full(n, 1000))
    assert (split.transfer_wait_ns, split.idle_ns) == (2000, 1000)


def _checkpointed(share: float) -> Session:
    graph = build_graph("resnet18", 16, 112)
    plan = compile_plan(graph, int(graph.footprint * share), "checkpoint", {"segments": 4})
    return new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT)


def _spans(s: Session, recompute: bool) -> int:
    """The time the typical iteration's ops of phase recompute (or of any other phase) ran, faults included."""
    tl = s.timeline
    picked = np.array([(s.graph.ops[k].phase is Phase.RECOMPUTE) == recompute for k in tl.op_index.tolist()])
    picked &= tl.op_iteration == tl.typical_iteration()
    return int((tl.op_end_ns - tl.op_start_ns)[picked].sum())


def test_a_plan_that_recomputes_spends_time_recomputing_and_its_parts_still_add_up() -> None:
    s = _checkpointed(0.6)
    split = s.time_split()
    assert split.recompute_ns > 0 and split.iteration_ns == _typical_length(s)
    assert split.fault_wait_ns > 0, "at 60% the driver still pages: a re-run's faults are waiting, not recomputing"
    # the ops' spans are compute, recomputing and faults; the gaps between them waiting and idle
    assert split.compute_ns + split.recompute_ns + split.fault_wait_ns == _spans(s, True) + _spans(s, False)
    assert split.recompute_ns <= _spans(s, True)


def test_with_nothing_paged_recomputing_is_the_time_the_re_runs_ran_and_compute_the_rest() -> None:
    s = _checkpointed(1.0)
    assert s.plan.recomputes and not s.plan.memops, "the whole footprint fits: nothing faults"
    split = s.time_split()
    assert (split.recompute_ns, split.compute_ns, split.fault_wait_ns) == (_spans(s, True), _spans(s, False), 0)


def test_a_re_run_takes_its_own_time_recomputing_and_what_it_runs_over_waiting_on_faults() -> None:
    s = _checkpointed(1.0)
    graph, plan = s.graph, s.plan
    n = len(graph.ops)
    reruns = [k for k, op in enumerate(graph.ops) if op.phase is Phase.RECOMPUTE]
    faulted = np.zeros(n, dtype=np.int64)
    faulted[reruns[0]] = 1 << 20  # the first re-run faulted and ran 1000 ns, 400 of them its own
    tl = dataclasses.replace(_back_to_back(n, len(plan.memops), n, 0), op_fault_bytes=faulted)  # ops of 1000 ns
    split = time_split(graph, plan, tl, np.full(n, 400))
    assert split == TimeSplit(compute_ns=1000 * (n - len(reruns)), recompute_ns=1000 * (len(reruns) - 1) + 400,
                              fault_wait_ns=600, transfer_wait_ns=0, idle_ns=0)


def test_a_plan_that_recomputes_nothing_splits_as_the_same_plan_without_recomputation() -> None:
    graph = build_graph("resnet18", 16, 112)
    capacity = int(graph.footprint * 0.6)
    splits = []
    for policy, options in (("checkpoint", {"segments": 1}), ("uvm", {})):
        plan = compile_plan(graph, capacity, policy, options)
        splits.append(new_session(graph, plan, simulate(graph, plan, H100_DEFAULT), H100_DEFAULT).time_split())
    assert splits[0] == splits[1] and splits[0].recompute_ns == 0 and splits[0].fault_wait_ns > 0
