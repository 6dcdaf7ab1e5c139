"""Collectors: what the GPU itself reports while the engine runs, on one clock.

Every collector has the shape `Collector` declares (`base.py`): `start()` once the CUDA context exists,
`flush()` at the end of every iteration (so buffers stay bounded on long runs), `stop()`, then `rows`
(raw columns on CUPTI's clock, ns) and its status (`available`, and `reason` why not). A collector that
cannot run (package missing, another profiler attached, counters unsupported) is reported, never
fatal: the run goes on. Their names and parts, each switchable, are spelled once, in
`vmexplorer.records.collected.PARTS`.

- cupti: unified-memory counters (GPU page-fault groups, bytes each way, thrashing, throttling),
  kernel activity and memory copies, through cupti-python.
- nvml: device memory used, PCIe throughput each way and utilisation, sampled by a thread.
A recorded run times its iterations with CUPTI's unified-memory counters off and counts one or more
iterations after them (`RunSettings.counted`): counting slows paging itself, much more than the kernel,
memory-copy and NVML records cost the timed iterations (bench/results/h100/README.md measures both;
notes/um-counting-cost.md, the cost inside one run).
NVTX ranges are emitted by the executor for every op and memory operation (Nsight Systems shows them);
the session keeps the same spans from CUDA events, placed on CUPTI's clock with the records here.
"""

from .base import Collector
from .cupti_collector import CuptiCollector
from .nvml_sampler import NvmlSampler

__all__ = ["Collector", "CuptiCollector", "NvmlSampler"]
