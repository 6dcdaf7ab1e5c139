"""Engine memory rules that hold with no GPU: aligned ranges, and refusing what the card cannot hold."""

import pytest

from vmexplorer.engine.memory import ALIGN, ResourceError, check_resources, layout
from vmexplorer.graph import build_graph

GiB = 2**30


def test_every_tensor_gets_its_own_2mib_aligned_range():
    g = build_graph("resnet18", 4, 64)
    lay = layout(g)
    ends = [off + t.nbytes for off, t in zip(lay.offsets, g.tensors)]
    assert all(off % ALIGN == 0 for off in lay.offsets)
    assert all(end <= nxt for end, nxt in zip(ends, lay.offsets[1:]))
    assert lay.total % ALIGN == 0 and lay.total >= ends[-1]


@pytest.mark.parametrize("total,capacity,managed,free,host,message", [
    (50 * GiB, 10 * GiB, True, 80 * GiB, 500 * GiB, "needs 50.00 GiB of managed memory"),
    (10 * GiB, 45 * GiB, True, 80 * GiB, 500 * GiB, "not well under the GPU's free memory"),
    (10 * GiB, 5 * GiB, True, 80 * GiB, 10 * GiB, "of host RAM to page into"),
    (75 * GiB, 75 * GiB, False, 80 * GiB, 500 * GiB, "of device memory"),
])
def test_a_run_the_machine_cannot_hold_safely_is_refused_before_allocating(total, capacity, managed, free, host,
                                                                           message):
    with pytest.raises(ResourceError, match=message):
        check_resources(total, capacity, managed, free, host)


def test_a_run_well_within_the_machine_is_accepted():
    check_resources(12 * GiB, 3 * GiB, True, 80 * GiB, 100 * GiB)
    check_resources(12 * GiB, 12 * GiB, False, 80 * GiB, 1 * GiB)
