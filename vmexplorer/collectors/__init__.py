"""Collectors: what the GPU itself reports while the engine runs, on one clock.

Each collector has the same small shape: `start()` once the CUDA context exists, `flush()` at the end
of every iteration (so buffers stay bounded on long runs), `stop()`, then `rows` (raw columns on
CUPTI's clock, ns) and `status` (available, and why not). A collector that cannot run (package
missing, another profiler attached, counters unsupported) is reported, never fatal: the run goes on.

- cupti: unified-memory counters (GPU page-fault groups, bytes each way, thrashing, throttling) and
  kernel activity, through cupti-python.
- nvml: device memory used, PCIe throughput each way and utilisation, sampled by a thread.
A recorded run times its iterations with CUPTI's unified-memory counters off and counts one or more
iterations after them (`RunSettings.counted`): counting slows paging itself, by 17-47% per iteration on
the H100, while kernel, memory-copy and NVML records cost the timed iterations a few percent at most.
NVTX ranges are emitted by the executor for every op and memory operation (Nsight Systems shows them);
the session keeps the same spans from CUDA events, placed on CUPTI's clock with the records here.
"""

from .cupti_collector import CuptiCollector
from .nvml_sampler import NvmlSampler

__all__ = ["CuptiCollector", "NvmlSampler"]
