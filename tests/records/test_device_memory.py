"""What a run took of the GPU, said to people: plain memory by what cudaMemGetInfo saw, managed memory by the
executor's ledger, each beside the capacity."""

from __future__ import annotations

import dataclasses

from vmexplorer.records.device_memory import DeviceMemory

GiB = 1 << 30
PLAIN = DeviceMemory(total_bytes=150 * GiB, context_bytes=600 << 20, free_before_bytes=140 * GiB,
                     least_free_bytes=137 * GiB, pool_bytes=2 * GiB, scratch_bytes=GiB, ledger_peak_bytes=2 * GiB,
                     managed=False)


def test_plain_memory_is_judged_by_what_the_run_took_beyond_its_context() -> None:
    assert PLAIN.over(4 * GiB) == 0 and "within it" in PLAIN.describe(4 * GiB)
    assert PLAIN.over(2 * GiB) == GiB and "1.00 GiB over it" in PLAIN.describe(2 * GiB)


def test_managed_memory_is_judged_by_its_ledger_and_says_why_it_went_over() -> None:
    managed = dataclasses.replace(PLAIN, managed=True, ledger_peak_bytes=3 * GiB)
    assert managed.over(4 * GiB) == 0 and "within it" in managed.describe(4 * GiB)
    said = managed.describe(2 * GiB)
    assert managed.over(2 * GiB) == GiB and "1.00 GiB over it" in said
    assert "dead tensors' pages" in said and "--dead-pages discard" in said
