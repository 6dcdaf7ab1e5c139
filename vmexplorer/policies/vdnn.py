"""`vdnn`: vDNN's convolution policy (Rhu et al., "vDNN: Virtualized Deep Neural Networks for Scalable,
Memory-Efficient Neural Network Design", MICRO 2016: vDNN-conv). Every convolution's input feature map
is offloaded after its last forward use and prefetched before its first backward use, one layer ahead
(`prefetch_distance` 2: issued as the op before that use starts, so the transfer overlaps it).

What moves follows the layers, not the capacity: all conv inputs leave whatever room the device has,
which is what makes vDNN the classic anchor for graph-informed paging. Where that is not enough the
replay adds the driver's evictions; where it is more than enough the extra traffic is vDNN's price.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..graph import Graph, Kind, Phase
from ..plan import Move
from .spec import MAX_DISTANCE, OptionSpec, PolicySpec

OPTIONS = {
    "prefetch_distance": OptionSpec(int, 2, "issue each prefetch this many ops before its use (2: vDNN's "
                                            "one layer ahead)", minimum=1, maximum=MAX_DISTANCE),
}


def plan_moves(graph: Graph, capacity: int, options: Mapping[str, Any], moves: Sequence[Move]) -> list[Move]:
    return vdnn_moves(graph, options["prefetch_distance"])


def conv_inputs(graph: Graph) -> list[int]:
    """The tensors forward convolutions read besides their weights: the input feature maps (the batch
    of images for the first), in the order the convolutions run."""
    out: dict[int, None] = {}
    for op in graph.ops:
        if op.kind == "conv2d" and op.phase is Phase.FORWARD:
            out.update((t, None) for t in op.reads if graph.tensors[t].kind is not Kind.WEIGHT)
    return list(out)


def vdnn_moves(graph: Graph, prefetch_distance: int = 2) -> list[Move]:
    """Each conv input out after its last forward use, back `prefetch_distance` ops before its first
    backward use (no earlier than just after the offload; none where the two uses are adjacent)."""
    out = []
    for t in conv_inputs(graph):
        phases = [(k, graph.ops[k].phase is Phase.BACKWARD) for k in graph.uses[t]]
        forward = [k for k, backward in phases if not backward]
        backward = [k for k, backward in phases if backward]
        if not (forward and backward) or min(backward) - max(forward) < 2:
            continue
        last, use = max(forward), min(backward)
        out.append(Move(t, last, max(use - prefetch_distance, last + 1)))
    return sorted(out, key=lambda mv: (mv.offload_after, mv.tensor))


SPEC = PolicySpec("vdnn", "vDNN-conv: offload every convolution's input after its forward use, prefetch it "
                          "one layer before its backward use, whatever the capacity", plan_moves, OPTIONS)
