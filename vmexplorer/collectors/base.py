"""The one interface every collector has: what the executor and `build_collected` ask of it."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Collector(Protocol):
    """A source of records during a GPU run, on CUPTI's clock.

    `start()` once the CUDA context exists (and before the run allocates: CUPTI follows only managed
    memory allocated after its counters were enabled); `flush()` at the end of every iteration, so
    buffers stay bounded on long runs; `stop()` once, at the end, even after a failure. Then `rows`
    holds the raw columns (clock times in ns), and the status says how it fared: `available`, and
    `reason` why not (or, for one that ran, its limitation), `dropped` records it lost and
    `overhead_ns` of host time it held the run up. A collector that cannot run is reported this way,
    never raised: the run goes on without it."""

    name: str  # as `vmexplorer.records.collected.PARTS` spells it: its status entry's name
    available: bool
    reason: str
    dropped: int
    overhead_ns: int
    rows: dict[str, list[Any]]

    def start(self) -> None: ...

    def flush(self) -> None: ...

    def stop(self) -> None: ...
