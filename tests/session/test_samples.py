"""The sample sessions the repo ships: what they store agrees with what the code works out from them now."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmexplorer.session import bound_for, load_session
from vmexplorer.simulator import simulate

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "sample_sessions").glob("*.vms"))


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_a_sample_that_stores_a_bound_stores_the_one_its_cost_model_gives_now(path: Path) -> None:
    # `vmexplorer info` prints the stored bound and the app works it out afresh: a stale one (made before
    # the bound gained its windows, say) would show a class two different figures for one run;
    # bench/calibrate_samples.py stamps them again
    session = load_session(path)
    if session.bound is None:
        pytest.skip("stores no bound: `info` and the app both work it out")
    assert session.bound == bound_for(session.graph, session.plan, session.cost_model)


def test_a_swap_summary_counts_no_bytes_for_the_copies_that_move_nothing() -> None:
    # vdnn through swap at 50% copies some tensors in and straight back out before any op (plan.stays):
    # the engine and the simulator skip both copies, and the traffic people read must leave them out too
    from vmexplorer.plan import Direction
    from vmexplorer.plan.stays import elided
    from vmexplorer.records.spans import summarize

    session = load_session(next(p for p in SAMPLES if p.name == "h200-vgg19-b64-vdnn-swap-50pct.measured.vms"))
    plan = session.plan
    nothing = elided(session.graph, plan)
    assert nothing, "the sample no longer has copies that move nothing: pick another"
    summary = summarize(session.graph, plan, simulate(session.graph, plan, session.cost_model))
    for direction, key in ((Direction.TO_HOST, "bytes_to_host"), (Direction.TO_DEVICE, "bytes_to_device")):
        moving = sum(m.nbytes for i, m in enumerate(plan.memops) if m.direction is direction and i not in nothing)
        assert summary[key] == moving


def test_the_samples_of_one_gpu_and_model_carry_one_cost_model_so_a_configuration_reads_one_bound() -> None:
    # the lesson, the bars, `info`, the paging cliff and docs/results.md all say a configuration's bound
    # under its sample's model: one model per GPU and model (bench/calibrate_samples.py) makes them agree
    by_gpu_and_model: dict[tuple[str, str, int], set[str]] = {}
    for path in SAMPLES:
        s = load_session(path)
        if s.timeline.source != "measured":
            continue
        assert s.cost_model is not None and s.bound is not None, path.name
        key = (s.environment.get("gpu", ""), s.graph.model, s.graph.batch)
        by_gpu_and_model.setdefault(key, set()).add(repr(s.cost_model))
    assert by_gpu_and_model and all(len(models) == 1 for models in by_gpu_and_model.values())


MEASURED = [p for p in SAMPLES if ".measured." in p.name]


# The bound evicts at the fastest rate any of the GPU's recordings reached (`CostModel.evict_fastest_bytes_per_ns`):
# at the rate fitted to `autovm`, ResNet-50's `tuned` uvm sample on the H200 ran 18% faster than its bound.
@pytest.mark.parametrize("path", MEASURED, ids=[p.name for p in MEASURED])
def test_a_measured_sample_is_judged_by_its_own_gpus_model_and_is_no_faster_than_its_bound(path: Path) -> None:
    import numpy as np

    from vmexplorer.session.samples import short_gpu

    session = load_session(path)
    assert session.cost_model is not None, "a measured sample without its GPU's cost model"
    assert short_gpu(session.environment["gpu"]) in session.cost_model.name
    bound = session.bound or bound_for(session.graph, session.plan, session.cost_model)
    assert bound is not None
    assert float(np.median(session.timeline.timed_ns())) >= bound.lower_bound_ns


def _rerun(path: Path, gpu: str) -> tuple[object, object, object]:
    """A sample's run as the engine hands it back, as if measured on `gpu`."""
    from vmexplorer.engine.executor import RunResult

    s = load_session(path)
    result = RunResult(s.timeline, (2.3,), {**s.environment, "gpu": gpu}, collected=s.collected)
    return s.graph, s.plan, result


def test_a_fresh_run_is_judged_by_its_own_gpu_the_samples_model_else_its_own_calibration() -> None:
    import numpy as np

    from vmexplorer.engine.executor import measured_session

    device = next(p for p in MEASURED if p.name == "h200-vgg19-b64-device.measured.vms")
    paging = next(p for p in MEASURED if p.name == "h200-vgg19-b64-belady-50pct.measured.vms")
    h200 = load_session(device).cost_model
    # on the H200: the model its samples of this graph were calibrated with, whatever the policy
    for path in (device, paging):
        session = measured_session(*_rerun(path, "NVIDIA H200"))
        assert session.cost_model == h200 and session.bound is not None
    # on a GPU with no samples: calibrated on itself, never the H100's default; a paging run says what that
    # costs its bound
    for path in (device, paging):
        session = measured_session(*_rerun(path, "NVIDIA B200"))
        assert session.cost_model is not None and "calibrated on this run (NVIDIA B200)" in session.cost_model.name
        assert session.bound is not None
        assert float(np.median(session.timeline.timed_ns())) >= session.bound.lower_bound_ns
        stalls = [note for note in session.notes if "include the waits its moves caused" in note]
        assert bool(stalls) == (path is paging)


def test_a_fresh_run_of_a_samples_graph_on_its_gpu_is_judged_by_its_model_without_reading_every_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vmexplorer.session import samples as module
    from vmexplorer.session.samples import gpu_cost_model, gpu_of

    def whole_index() -> object:
        raise AssertionError("read every sample")

    judged = {(s.graph.key, gpu_of(s), s.graph.workspaces): s for s in map(load_session, MEASURED)}
    with monkeypatch.context() as m:
        m.setattr(module, "sample_index", whole_index)
        for (_, gpu, _), s in judged.items():
            assert gpu is not None and gpu_cost_model(s.graph, gpu) == s.cost_model
    # a GPU without samples still looks through them all, and finds none
    assert gpu_cost_model(next(iter(judged.values())).graph, "NVIDIA B200") is None


def test_a_fresh_run_whose_evictions_beat_every_recording_raises_its_bounds_eviction_rate_to_its_own() -> None:
    import dataclasses

    from vmexplorer.engine.executor import RunResult, measured_session
    from vmexplorer.simulator.calibrate import eviction_rate

    s = load_session(next(p for p in MEASURED if p.name == "h200-vgg19-b64-belady-50pct.measured.vms"))
    assert s.cost_model is not None
    tl = s.timeline  # every memory call twice as fast as recorded: a machine faster than any the samples saw
    faster = dataclasses.replace(tl, memop_end_ns=tl.memop_start_ns + (tl.memop_end_ns - tl.memop_start_ns) // 2)
    rate = eviction_rate(s.graph, s.plan, faster)
    assert rate > s.cost_model.fastest_evict_bytes_per_ns
    session = measured_session(s.graph, s.plan, RunResult(faster, (2.3,), dict(s.environment)))
    assert session.cost_model is not None and session.bound is not None and s.bound is not None
    assert session.cost_model.fastest_evict_bytes_per_ns == rate
    assert session.cost_model.evict_bytes_per_ns == s.cost_model.evict_bytes_per_ns  # the simulator's stays
    assert session.bound.lower_bound_ns < s.bound.lower_bound_ns


@pytest.mark.parametrize("path", MEASURED, ids=[p.name for p in MEASURED])
def test_a_measured_run_calibrated_on_itself_is_no_faster_than_the_bound_that_gives(path: Path) -> None:
    # what a fresh run on a GPU without samples is judged by (engine.executor.measured_session), and what
    # the app simulates an uploaded run's edits with
    import numpy as np

    from vmexplorer.simulator import calibrate

    s = load_session(path)
    bound = bound_for(s.graph, s.plan, calibrate(s.graph, s.plan, s.timeline))
    assert bound is not None and float(np.median(s.timeline.timed_ns())) >= bound.lower_bound_ns
