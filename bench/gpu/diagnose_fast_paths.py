"""Every op of a graph through the CuPy fast path and the generic path on the same random inputs:
which kind and shape disagree, and by how much.

    python3 bench/gpu/diagnose_fast_paths.py resnet18 32 64
"""

from __future__ import annotations

import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vmexplorer.graph import build_graph  # noqa: E402
from vmexplorer.graph.ops import OPS, cuda_kernels, op_attrs  # noqa: E402


def main() -> None:
    graph = build_graph(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    rng = np.random.default_rng(0)
    fast, seen = cuda_kernels.fast, set()
    for k, op in enumerate(graph.ops):
        shapes = tuple(graph.tensors[t].shape for t in op.reads)
        if (op.kind, shapes) in seen or op.kind.startswith(("conv", "linear", "softmax", "dropout")):
            continue
        seen.add((op.kind, shapes))
        reads = []
        for t in op.reads:
            spec = graph.tensors[t]
            if spec.dtype == "int32":
                reads.append(rng.integers(0, 10, spec.shape).astype(np.int32))
            elif spec.name.endswith(("saved_invstd", "running_var")):
                reads.append(rng.uniform(0.5, 2, spec.shape).astype(np.float32))
            else:
                reads.append(rng.standard_normal(spec.shape).astype(np.float32))
        if op.kind == "max_pool2d_backward":  # y must be the pooling of x, as in a real run
            fwd = next(j for j, o in enumerate(graph.ops) if o.kind == "max_pool2d" and o.writes[0] == op.reads[1])
            cuda_kernels.fast = lambda *a, **kw: False
            y = cp.zeros(graph.tensors[op.reads[1]].shape, cp.float32)
            OPS["max_pool2d"](cp, [cp.asarray(reads[0])], [y], op_attrs(graph, fwd))
            reads[1] = y.get()
            cuda_kernels.fast = fast
        outs = {}
        for label, switch in (("fast", fast), ("generic", lambda *a, **kw: False)):
            cuda_kernels.fast = switch
            r = [cp.asarray(a) for a in reads]
            by_id = dict(zip(op.reads, r))
            w = [by_id[t] if t in by_id else cp.zeros(graph.tensors[t].shape, graph.tensors[t].dtype)
                 for t in op.writes]
            OPS[op.kind](cp, r, w, op_attrs(graph, k))
            outs[label] = [a.get().astype(np.float64) for a in w]
        cuda_kernels.fast = fast
        errs = [float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)) for a, b in zip(outs["fast"], outs["generic"])]
        flag = "  <-- DIFFERS" if max(errs) > 1e-5 else ""
        print(f"{op.kind:28s} {str(shapes[0]):22s} max rel diff {max(errs):.1e}{flag}", flush=True)


if __name__ == "__main__":
    main()
