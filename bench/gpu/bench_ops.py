"""The CUDA fast paths of the memory-bound ops against the generic cupy path, on the models' own shapes.

    python3 -m bench.gpu.bench_ops [--cases vgg19:64,resnet50:64] [--repeats 10] [--detail]

For each op kind with a fast path (relu, max_pool2d, batch_norm2d, add, sgd_momentum and the
backwards), every distinct (operand shapes, attrs) signature in the model's training graph is run on
random data both ways and timed with CUDA events (median of --repeats, after a warm-up). The generic
path is the ops' own xp body, reached by handing them cupy under another module name. Per kind the
table gives per-iteration totals (time x occurrences in the graph) and the bandwidth over the bytes
the op must move at least: every operand read once and every output written once (batch norm's
forward and backward read x, and dy, twice, so they top out below the copy bandwidth).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vmexplorer.graph import build_graph
from vmexplorer.graph.ops import OPS, op_attrs

KINDS = ("relu", "relu_backward", "max_pool2d", "max_pool2d_backward", "batch_norm2d", "batch_norm2d_backward",
         "add", "sgd_momentum")


class GenericCupy:
    """cupy under another name: the ops see no "cupy" and run their generic xp bodies on it."""

    __name__ = "cupy-generic"

    def __init__(self, cp: Any) -> None:
        self._cp = cp

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cp, name)


def time_ms(cp: Any, fn: Callable[..., None], args: tuple[Any, ...], repeats: int) -> float:
    fn(*args)
    cp.cuda.get_current_stream().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def operands(cp: Any, graph: Any, op: Any, attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Random float32 operands for one op; a tensor both read and written is one array, as in the engine."""
    arrays: dict[int, Any] = {}
    for t in dict.fromkeys(op.reads + op.writes):
        arrays[t] = cp.random.standard_normal(graph.tensors[t].shape, dtype=cp.float32)
    reads = [arrays[t] for t in op.reads]
    if op.kind == "batch_norm2d":
        reads[4][...] = 1.0  # running variance
    elif op.kind == "batch_norm2d_backward":
        cp.abs(reads[3], out=reads[3])  # saved invstd > 0
        reads[3] += 0.5
    elif op.kind == "max_pool2d_backward":  # y must be the pooling of x
        OPS["max_pool2d"](cp, [reads[0]], [reads[1]], attrs)
    elif op.kind == "relu_backward":
        cp.maximum(reads[0], 0, out=reads[0])
    return reads, [arrays[t] for t in op.writes]


def bench(model: str, batch: int, repeats: int, detail: bool) -> list[dict[str, Any]]:
    import cupy as cp

    graph = build_graph(model, batch)
    generic = GenericCupy(cp)
    groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for i, op in enumerate(graph.ops):
        if op.kind in KINDS:
            attrs = {k: v for k, v in op_attrs(graph, i).items() if k != "op"}
            shapes = tuple(graph.tensors[t].shape for t in op.reads + op.writes)
            groups[(op.kind, shapes, tuple(sorted(attrs.items())), op.reads == op.writes)].append(i)
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    rows = []
    for (kind, shapes, _, _), indices in groups.items():
        op = graph.ops[indices[0]]
        attrs = op_attrs(graph, indices[0])
        reads, writes = operands(cp, graph, op, attrs)
        nbytes = sum(a.nbytes for a in reads) + sum(a.nbytes for a in writes)
        fast = time_ms(cp, OPS[kind], (cp, reads, writes, attrs), repeats)
        slow = time_ms(cp, OPS[kind], (generic, reads, writes, attrs), max(1, repeats // 3))
        count = len(indices)
        row = {"model": model, "batch": batch, "kind": kind, "shape": list(shapes[0]), "count": count,
               "fast_ms": fast, "generic_ms": slow, "bytes": nbytes, "fast_GBps": nbytes / fast / 1e6}
        rows.append(row)
        for key, value in (("fast_ms", fast * count), ("generic_ms", slow * count), ("bytes", nbytes * count)):
            totals[kind][key] += value
        totals[kind]["count"] += count
        if detail:
            print(f"  {kind:22s} {str(shapes[0]):24s} x{count:<3d} fast {fast:8.3f} ms ({row['fast_GBps']:6.0f} GB/s)"
                  f"  generic {slow:8.3f} ms", flush=True)
        reads, writes = [], []  # let the pool give the memory back before the next signature
        cp.get_default_memory_pool().free_all_blocks()
    print(f"{model} b{batch}: per iteration, {'kind':22s} {'ops':>4s} {'fast ms':>9s} {'GB/s':>6s} "
          f"{'generic ms':>11s} {'speed-up':>8s}")
    for kind in KINDS:
        if kind in totals:
            t = totals[kind]
            print(f"{'':{len(model) + len(str(batch)) + 17}s}{kind:22s} {int(t['count']):4d} {t['fast_ms']:9.3f} "
                  f"{t['bytes'] / t['fast_ms'] / 1e6:6.0f} {t['generic_ms']:11.3f} "
                  f"{t['generic_ms'] / t['fast_ms']:7.1f}x", flush=True)
    return rows


def host_overhead_us(calls: int = 2000) -> None:
    """Host time per call on a tiny tensor, where the GPU waits on Python: what a small op costs at least."""
    import time

    import cupy as cp

    x, y = cp.ones((64, 4096), cp.float32), cp.empty((64, 4096), cp.float32)
    for name, xp in (("fast", cp), ("generic", GenericCupy(cp))):
        OPS["relu"](xp, [x], [y], {})
        cp.cuda.get_current_stream().synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            OPS["relu"](xp, [x], [y], {})
        cp.cuda.get_current_stream().synchronize()
        print(f"host cost of one relu call on (64, 4096), {name}: {(time.perf_counter() - t) / calls * 1e6:.1f} us")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="vgg19:64,resnet50:64")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--detail", action="store_true", help="one line per distinct op signature")
    args = ap.parse_args()
    host_overhead_us()
    rows = []
    for case in args.cases.split(","):
        model, batch = case.split(":")
        rows += bench(model, int(batch), args.repeats, args.detail)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_ops.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
