"""What a measured run took of the GPU's memory, all in: read with cudaMemGetInfo around the run, the CUDA
context and the libraries' handles measured apart.

The capacity is emulated (docs/design.md), so the figure that says whether a run kept to it is the
device memory it took: free memory with its context made and nothing of its own allocated (read as it
began and again once it has freed everything: the kernels CUDA loads on first launch stay, with the context)
less the least free memory seen after any of its iterations. Plain device memory and the swap pool are taken and
kept, and CuPy's pool keeps the kernels' scratch once allocated, so that difference is everything the run
held at once. Managed memory is different: the driver keeps the physical chunks of pages once touched,
wherever the pages are now (measured, docs/design.md), so for a managed run what cudaMemGetInfo saw is
shown but its residency is the executor's ledger's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..units import format_bytes


@dataclass(frozen=True)
class DeviceMemory:
    total_bytes: int  # the GPU's memory
    # the CUDA context and the cuDNN and cuBLAS handles, measured apart, and the kernels the run loaded on first
    # use (they stay loaded once it has freed its memory); None: not measured
    context_bytes: int | None
    # free with nothing of the run's own allocated: its context made, the kernels it loads loaded (read after
    # it freed its memory, where that is less than as it began)
    free_before_bytes: int
    least_free_bytes: int  # the least free after any of its iterations
    pool_bytes: int  # the run's one allocation of its tensors: the device pool, the swap pool or the managed arena
    # CuPy's pool after the run: the kernels' temporaries (convolution workspaces too in a graph without them)
    scratch_bytes: int
    ledger_peak_bytes: int  # the most bytes the executor's ledger had on the device while an op ran
    managed: bool  # tensors in managed memory, whose residency cudaMemGetInfo cannot read back

    @property
    def taken_bytes(self) -> int:
        """What the run took beyond its context: free before it, less the least free during it."""
        return max(self.free_before_bytes - self.least_free_bytes, 0)

    def over(self, capacity: int) -> int:
        """Bytes the run held beyond the capacity: taken beyond the context for plain device memory and
        swap, the ledger's peak for managed memory."""
        return max((self.ledger_peak_bytes if self.managed else self.taken_bytes) - capacity, 0)

    def describe(self, capacity: int) -> str:
        """One line for people: what the run took beside its capacity."""
        context = ("" if self.context_bytes is None else
                   f" (the context, library handles and kernels loaded: {format_bytes(self.context_bytes)})")
        parts = f"its tensors' pool {format_bytes(self.pool_bytes)}, kernel scratch {format_bytes(self.scratch_bytes)}"
        if self.managed:
            over = self.over(capacity)
            dead = (f", {format_bytes(over)} over it: dead tensors' pages wait on the device until a new tensor "
                    "takes them over (vmexplorer run --dead-pages discard keeps within it)") if over else ", within it"
            return (f"capacity {format_bytes(capacity)}; the executor's ledger held at most "
                    f"{format_bytes(self.ledger_peak_bytes)} on the device{dead}. Managed memory: the driver keeps "
                    f"chunks once touched, so cudaMemGetInfo saw {format_bytes(self.taken_bytes)} taken beyond the "
                    f"CUDA context{context} ({parts})")
        over = self.over(capacity)
        verdict = f", {format_bytes(over)} over it" if over else ", within it"
        return (f"capacity {format_bytes(capacity)}; the run took {format_bytes(self.taken_bytes)} beyond the CUDA "
                f"context{context}{verdict} ({parts})")

    def as_json(self) -> dict[str, int | bool | None]:
        return asdict(self)
