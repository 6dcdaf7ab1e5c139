"""NVML in a background thread: device memory used, PCIe throughput each way, GPU utilisation."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..records.collected import NVML

INTERVAL_S = 0.02  # NVML's PCIe throughput counters integrate over 20 ms: sampling faster repeats them


class NvmlSampler:
    name = NVML

    def __init__(self, clock: Callable[[], int], device: int = 0, interval_s: float = INTERVAL_S) -> None:
        self.clock, self.device, self.interval_s = clock, device, interval_s
        self.available, self.reason = False, "not started"
        self.dropped = 0
        self.overhead_ns = 0  # the sampler has its own thread and never holds the run up
        self.rows: dict[str, list] = {k: [] for k in ("t", "memory_used", "pcie_tx", "pcie_rx", "gpu_util")}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.device)
            self._sample(pynvml, handle)
        except Exception as e:  # nvidia-ml-py missing, or no NVML on this machine
            self.reason = f"NVML unavailable: {type(e).__name__}: {e}"
            return
        self.available, self.reason = True, ""
        self._thread = threading.Thread(target=self._run, args=(pynvml, handle), name="nvml-sampler", daemon=True)
        self._thread.start()

    def _run(self, pynvml: Any, handle: Any) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample(pynvml, handle)
            except Exception:
                self.dropped += 1

    def _sample(self, pynvml: Any, handle: Any) -> None:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        tx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)  # KB/s
        rx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        util = pynvml.nvmlDeviceGetUtilizationRates(handle)
        self.rows["t"].append(self.clock())
        self.rows["memory_used"].append(int(memory.used))
        self.rows["pcie_tx"].append(int(tx) * 1000)
        self.rows["pcie_rx"].append(int(rx) * 1000)
        self.rows["gpu_util"].append(int(util.gpu))

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            import pynvml

            pynvml.nvmlShutdown()
        except Exception:
            pass
