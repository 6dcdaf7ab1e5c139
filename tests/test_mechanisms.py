"""vmexplorer/plan/mechanisms: each way of moving bytes is one object in a registry, and the stages that replay,
check, time and schedule a plan ask it what to do rather than branch on its name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vmexplorer.config import Mechanism
from vmexplorer.plan import Direction, MemOp, Mode, Origin
from vmexplorer.plan.mechanisms import MECHANISMS, mechanism_of
from vmexplorer.simulator import H100_DEFAULT

PACKAGE = Path(__file__).resolve().parents[1] / "vmexplorer"
# the stages a plan passes through between its policy and its timeline
STAGES = ("plan", "simulator", "engine/schedule.py", "policies/__init__.py", "session/trace.py", "details.py")


def test_every_mechanism_a_config_can_name_is_in_the_registry_under_its_own_name() -> None:
    assert set(MECHANISMS) == set(Mechanism)
    assert all(spec.name is name for name, spec in MECHANISMS.items())
    assert mechanism_of("swap") is mechanism_of(Mechanism.SWAP) is MECHANISMS[Mechanism.SWAP]


def test_an_unknown_mechanism_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="pinned"):
        mechanism_of("pinned")


def test_no_stage_branches_on_which_mechanism_a_plan_names() -> None:
    files = [p for stage in STAGES for p in ((PACKAGE / stage).rglob("*.py") if (PACKAGE / stage).is_dir()
                                             else [PACKAGE / stage]) if "mechanisms" not in p.parts]
    assert len(files) > 10
    branching = [f"{p.relative_to(PACKAGE)}:{n}" for p in files for n, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"Mechanism\.(SWAP|UVM)\b", line) and "= Mechanism.UVM" not in line
                 and "is not Mechanism.UVM and spec.uvm_only" not in line]
    assert not branching, branching


def test_the_driver_takes_only_the_bytes_needed_and_a_pool_the_whole_tensor() -> None:
    assert mechanism_of("uvm").evicted_bytes(held=100, over=30) == 30
    assert mechanism_of("uvm").evicted_bytes(held=20, over=30) == 20
    assert mechanism_of("swap").evicted_bytes(held=100, over=30) == 100


def test_under_uvm_a_missing_tensor_faults_in_and_under_swap_it_is_copied_in_before_its_op() -> None:
    fault = MemOp(0, Direction.TO_DEVICE, Mode.FAULT, 0, 1, Origin.DRIVER, 8)
    sync_in = MemOp(0, Direction.TO_DEVICE, Mode.SYNC, 0, 1, Origin.DRIVER, 8)
    assert mechanism_of("uvm").demand is Mode.FAULT and mechanism_of("swap").demand is Mode.SYNC
    assert mechanism_of("uvm").check_memop(3, fault) is None and mechanism_of("swap").check_memop(3, sync_in) is None
    assert "memory operation 3" in (mechanism_of("swap").check_memop(3, fault) or "")
    assert "memory operation 3" in (mechanism_of("uvm").check_memop(3, sync_in) or "")
    assert mechanism_of("uvm").transfer_kind(fault) == "demand fault"
    assert mechanism_of("swap").transfer_kind(sync_in) == "copied in on demand (synchronous)"


def test_pinned_copies_run_both_ways_at_once_at_their_own_rates_and_never_block_the_host() -> None:
    assert mechanism_of("uvm").rates(H100_DEFAULT) is H100_DEFAULT
    swap = mechanism_of("swap").rates(H100_DEFAULT)
    assert H100_DEFAULT.for_mechanism("swap") == swap
    assert (swap.prefetch_bytes_per_ns, swap.evict_bytes_per_ns) == (H100_DEFAULT.swap_to_device_bytes_per_ns,
                                                                      H100_DEFAULT.swap_to_host_bytes_per_ns)
    assert swap.host_block == 0 and not swap.serialises_directions
    assert mechanism_of("swap").sync_stream(Direction.TO_HOST) is Direction.TO_HOST
    assert mechanism_of("uvm").sync_stream(Direction.TO_HOST) is None
