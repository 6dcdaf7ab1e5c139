"""The GPU executor: runs any plan on a real GPU and measures it.

Per docs/design.md ("The executor"): a policy-agnostic loop over a plan's steps that launches each op's
kernels (CuPy, and cuDNN through `nvidia-cudnn-frontend`) on a compute stream and each memory operation
(`cudaMemPrefetchAsync` to host or device) on a copy stream, ordered by CUDA events, enqueuing far enough
ahead that blocking prefetch calls never starve the GPU. All tensors live in managed memory; the device
is emulated as a smaller GPU by evicting exactly as the plan says, after checking free device and host
memory and refusing with a clear message. A plan through the `swap` mechanism runs instead in a device pool
of its capacity with pinned host memory behind it, moving tensors by cudaMemcpyAsync (`swap.py`). GPU
packages are imported only inside the functions that use them, so importing this package works on a
machine with no GPU.
"""
