"""Any file the loader accepts opens (`info`), compares and exports within 10 s and 1 GiB on a 2-core
machine (issue 32): the costliest files it accepts, each at a limit of the loader (one step more is
refused), put through every tool in a process of its own. bench/bench_largest_files.py builds them (and
more shapes: those cost less) and records the figures in bench/results/largest_files.txt."""

from __future__ import annotations

import dataclasses
import gzip
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench import bench_largest_files as bench
from vmexplorer.session import SessionError, session_from_bytes
from vmexplorer.session.files import MAX_VALUES
from vmexplorer.session.format import MAX_ITERATIONS
from vmexplorer.session.plan_format import MAX_MEMOPS

# the costliest of the bench's shapes: the most rows a policy's plan records (ResNet-152 under uvm at its
# least capacity, 91 iterations), a plan of the most memory operations a file may hold, repeated as often
# as the values allow, and the most collector records (kernels, in one iteration)
COSTLIEST = ("resnet152-uvm-least-simulated", "resnet152-ping-pong-plan", "resnet152-kernels-records")
SHAPES = [s for s in bench.SHAPES if s.name in COSTLIEST]
# what the loader says of a file one step larger: over its values, its bytes or its iterations
LIMITS = "|".join(re.escape(t) for t in (f"more than the {MAX_VALUES:,} a session may hold",
                                         "decompresses to more than", f"a session holds at most {MAX_ITERATIONS}"))


@dataclass(frozen=True)
class Largest:
    shape: Any  # bench_largest_files.Shape
    size: int  # its iterations, or its kernel records
    path: Path


@pytest.fixture(scope="module", params=SHAPES, ids=[s.name for s in SHAPES])
def largest(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Largest:
    shape = request.param
    size, data = bench.largest(shape)
    return Largest(shape, size, bench.write(tmp_path_factory.mktemp("largest") / f"{shape.name}.vms", data))


def test_the_largest_file_of_each_shape_is_at_a_limit_of_the_loader_one_step_more_is_refused(
        largest: Largest) -> None:
    # the file itself opens: every tool's test below opens it
    more = gzip.compress(bench.text(largest.shape.document(largest.size + 1)), compresslevel=1)
    with pytest.raises(SessionError, match=LIMITS):
        session_from_bytes(more)


def test_a_plan_of_the_most_memory_operations_a_file_may_hold_is_accepted_and_one_more_round_trip_is_not(
        ) -> None:
    shape = next(s for s in SHAPES if s.trips is not None)
    doc = shape.document(1)
    assert doc["plan"]["memops"]["rows"] == MAX_MEMOPS
    session_from_bytes(gzip.compress(bench.text(doc), compresslevel=1))
    more = dataclasses.replace(shape, trips=shape.trips + 1).document(1)
    with pytest.raises(SessionError, match=f"a plan holds at most {MAX_MEMOPS:,} memory operations"):
        session_from_bytes(gzip.compress(bench.text(more), compresslevel=1))


@pytest.mark.parametrize("tool", bench.TOOLS)
def test_every_tool_finishes_the_largest_file_within_10_s_and_1_gib(largest: Largest, tool: str,
                                                                    tmp_path: Path) -> None:
    r = bench.measure(bench.commands(largest.path, tmp_path)[tool])
    assert r["status"] == 0, r["stderr"]
    assert r["seconds"] <= bench.SECONDS, f"{tool}: {r['seconds']:.1f} s"
    assert r["rss_bytes"] <= bench.RSS_BYTES, f"{tool}: {r['rss_bytes'] / 2**20:.0f} MiB"

