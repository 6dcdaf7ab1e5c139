"""bench/validate_simulator.py and bench/results_table.py on swap sessions: the samples are each
configuration's median recording whether or not they were picked yet, what a swap run held is read from
its session, copies are timed each way and both at once, and the swap bound differs from the uvm bound
by the mechanism alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import results_table, validate_simulator
from bench.passes import folder
from vmexplorer.config import Mechanism
from vmexplorer.session import load_session

ROOT = Path(__file__).resolve().parents[1]

PASS1 = folder(ROOT / "bench" / "results" / "h200" / "passes_swap") / "pass1"  # its archive unpacked
needs_pass1 = pytest.mark.skipif(not PASS1.is_dir(), reason="no H200 swap pass in the repo")


def _pass(folder: Path, times: dict[str, float]) -> Path:
    folder.mkdir(parents=True)
    for name in times:
        (folder / name).write_text("")
    (folder / "record_samples.json").write_text(json.dumps(
        [{"session": name, "exit": 0, "iteration_ms": ms} for name, ms in times.items()]))
    return folder


def test_the_median_recording_of_an_even_number_of_passes_is_the_lower_of_the_middle_two(tmp_path: Path) -> None:
    name = "vgg19-b64-belady-swap-50pct.measured.vms"
    passes = [_pass(tmp_path / f"pass{k}", {name: ms}) for k, ms in enumerate((130.0, 110.0, 150.0, 120.0), 1)]
    assert validate_simulator.median_recordings(passes) == [tmp_path / "pass4" / name]
    assert validate_simulator.pass_recordings(passes)[name] == [130.0, 110.0, 150.0, 120.0]


def test_a_session_a_pass_failed_to_record_is_not_a_recording(tmp_path: Path) -> None:
    folder = _pass(tmp_path / "pass1", {"a-b1-belady-swap-50pct.measured.vms": 10.0})
    rows = json.loads((folder / "record_samples.json").read_text())
    rows.append({"session": "a-b1-tuned-swap-50pct.measured.vms", "exit": 1, "message": "refused"})
    (folder / "record_samples.json").write_text(json.dumps(rows))
    assert list(validate_simulator.pass_recordings([folder])) == ["a-b1-belady-swap-50pct.measured.vms"]


@needs_pass1
def test_swap_samples_come_from_the_passes_until_picked_and_the_device_run_always_does(tmp_path: Path) -> None:
    swap = validate_simulator.H200_SWAP
    unpicked = swap.samples(tmp_path)
    assert unpicked and all(p.parent.parent == folder(swap.passes_dir) for p in unpicked)
    assert any(p.name == "vgg19-b64-device.measured.vms" for p in unpicked)
    picked = tmp_path / "h200-vgg19-b64-tuned-swap-50pct.measured.vms"
    picked.write_text("")
    (tmp_path / "h200-vgg19-b64-device.measured.vms").write_text("")  # the uvm passes' device sample
    samples = swap.samples(tmp_path)
    assert picked in samples
    passes = folder(swap.passes_dir)
    assert [p.parent.parent for p in samples if p.name.endswith("-device.measured.vms")] == [passes] * 3



@needs_pass1
def test_the_swap_samples_are_in_one_order_wherever_the_passes_are_unpacked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the unpacked passes sit in a cache outside the checkout, whose path may sort either side of the
    # samples' folder (a CI machine's did): the order of the samples, and of the tables made from them,
    # must not follow it
    samples = tmp_path / "m" / "samples"
    samples.mkdir(parents=True)
    for name in ("h200-vgg19-b64-tuned-swap-50pct.measured.vms", "h200-alexnet-b256-tuned-swap-50pct.measured.vms"):
        (samples / name).write_text("")
    orders = []
    for cache in (tmp_path / "a" / "cache", tmp_path / "z" / "cache"):
        monkeypatch.setenv("VMEXPLORER_BENCH_CACHE", str(cache))
        orders.append([p.name for p in validate_simulator.H200_SWAP.samples(samples)])
    assert orders[0] == orders[1]
    assert [n.endswith("-device.measured.vms") for n in orders[0]] == [True] * 3 + [False] * 2


@needs_pass1
def test_what_a_swap_run_held_is_read_from_its_environment_and_a_uvm_run_holds_no_pool() -> None:
    swap = load_session(PASS1 / "vgg19-b64-tuned-swap-50pct.measured.vms")
    held = results_table.swap_memory(swap)
    # recorded with the pool held to what the capacity leaves it: within it, and what the run took beside
    assert held is not None and 0 < held["pool"] <= swap.plan.capacity
    assert set(held) >= {"pool"}
    assert results_table.swap_memory(load_session(PASS1 / "vgg19-b64-device.measured.vms")) is None


def test_copies_both_at_once_are_the_time_both_directions_were_busy_together() -> None:
    out = results_table._union([(0, 10), (5, 20), (30, 40)])
    into = results_table._union([(15, 35)])
    assert out == [(0, 20), (30, 40)]
    assert results_table._overlap(out, into) == 5 + 5


@needs_pass1
def test_the_swap_bound_differs_from_the_uvm_bound_by_the_mechanism_alone() -> None:
    uvm = results_table.configs(validate_simulator.H200, ROOT / "sample_sessions")
    swap = results_table.configs(validate_simulator.H200_SWAP, ROOT / "sample_sessions", uvm)
    c, u = results_table.at(swap, "vgg19", 50), results_table.at(uvm, "vgg19", 50)
    assert c is not None and u is not None and c.cost is not None and u.cost is not None
    assert c.cost.op_ns == u.cost.op_ns and c.cost.evict_bytes_per_ns == u.cost.evict_bytes_per_ns
    assert c.mechanism == Mechanism.SWAP and c.bound is not None and u.bound is not None
    assert c.bound.min_bytes_to_host == u.bound.min_bytes_to_host
    assert c.bound.lower_bound_ns < u.bound.lower_bound_ns
    assert c.bound.set_by != "migration bandwidth"  # the pinned copies run both ways at once


def test_a_gpus_uvm_samples_leave_out_its_swap_samples_which_share_their_prefix(tmp_path: Path) -> None:
    for name in ("h200-vgg19-b64-uvm-50pct.measured.vms", "h200-vgg19-b64-tuned-swap-50pct.measured.vms"):
        (tmp_path / name).write_text("")
    assert validate_simulator.H200.samples(tmp_path) == [tmp_path / "h200-vgg19-b64-uvm-50pct.measured.vms"]
