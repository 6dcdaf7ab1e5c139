"""Which gradients differ from PyTorch's, with the CuPy fast paths on and off (fp32, no TF32).

    python3 bench/gpu/diagnose_gradients.py resnet18 32 64
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))

from reference import reference_gradients  # noqa: E402

from vmexplorer.engine.executor import RunSettings, execute  # noqa: E402
from vmexplorer.graph import build_graph  # noqa: E402
from vmexplorer.graph.ops import cuda_kernels  # noqa: E402
from vmexplorer.policies import compile_plan  # noqa: E402


def main() -> None:
    model, batch, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    graph = build_graph(model, batch, size)
    plan = compile_plan(graph, graph.footprint, "device")
    fast = cuda_kernels.fast
    for label, switch in (("fast paths", fast), ("generic cupy", lambda *a, **k: False)):
        cuda_kernels.fast = switch
        result = execute(graph, plan, RunSettings(iterations=1, warmup=0, allow_tf32=False, keep_weights=True))
        masks = {k: v for k, v in result.weights.items() if k.endswith(".mask")}
        _, truth = reference_gradients(graph, masks, allow_tf32=False)
        errors = sorted(((float(np.linalg.norm(result.weights[k] - g) / max(np.linalg.norm(g), 1e-30)), k)
                         for k, g in truth.items()), reverse=True)
        a = np.concatenate([result.weights[k].ravel() for k in sorted(truth)])
        b = np.concatenate([truth[k].ravel() for k in sorted(truth)])
        print(f"{label}: overall {np.linalg.norm(a - b) / np.linalg.norm(b):.2e}; worst:",
              ", ".join(f"{k} {e:.1e}" for e, k in errors[:6]), flush=True)
    cuda_kernels.fast = fast


if __name__ == "__main__":
    main()
