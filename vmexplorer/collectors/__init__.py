"""Measurement collectors for GPU runs (not built yet), sharing one small start/stop/records interface.

What will live here, per DESIGN.md:
- CUPTI (`cupti-python`): unified-memory counters with timestamps (GPU page-fault groups, bytes host to
  device and device to host), kernel and memcpy activity;
- NVTX ranges for every op and memory operation, on CUPTI's clock so ranges, kernels and faults share
  one time axis (and Nsight Systems shows them too);
- NVML (`nvidia-ml-py`): a sampler of device memory used, PCIe throughput and utilisation.
Each collector's overhead is measured and reported. GPU packages are imported only where used and fail
with "X is needed for Y", so importing this package works on a machine with no GPU.
"""
