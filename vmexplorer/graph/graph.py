"""One training iteration as data: tensors with exact bytes, ops in execution order.

A graph is what every other part of vmexplorer reads: policies compile it into a plan, the simulator
and the executor run that plan over it. Op and tensor ids are their positions in `Graph.ops` and
`Graph.tensors`, so plans and timelines can refer to them with plain integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property


class GraphError(ValueError):
    """A model cannot be built at the requested size."""


class Kind(StrEnum):
    INPUT = "input"  # the batch (images, labels): loaded once, kept for every iteration
    WEIGHT = "weight"  # trainable parameters
    BUFFER = "buffer"  # non-trainable state kept across iterations (batch-norm running stats)
    ACTIVATION = "activation"  # feature maps and what forward saves for backward
    GRADIENT = "gradient"  # gradients of activations and of weights
    OPTIMIZER_STATE = "optimizer_state"  # SGD momentum
    WORKSPACE = "workspace"  # scratch memory of a kernel (sizes come from the engine's algorithm choice)


class Phase(StrEnum):
    FORWARD = "forward"
    LOSS = "loss"
    BACKWARD = "backward"
    UPDATE = "update"


PERSISTENT = -1  # producer of a tensor that exists before the iteration starts

# An op's attributes as (name, value) pairs, in the order its layer records them: kernel, stride,
# padding, flags. Frozen and hashable like the rest of the graph; `dict(op.attrs)` reads them.
Attrs = tuple[tuple[str, int | float | bool], ...]


@dataclass(frozen=True)
class Tensor:
    name: str
    kind: Kind
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    producer: int  # op that creates it, or PERSISTENT
    consumers: tuple[int, ...]  # ops that read it, ascending

    @property
    def persistent(self) -> bool:
        return self.producer == PERSISTENT


@dataclass(frozen=True)
class Op:
    name: str
    kind: str  # e.g. "conv2d", "conv2d_backward", "relu", "sgd"
    phase: Phase
    layer: str  # forward and backward ops of one layer share it, so sessions align by layer
    reads: tuple[int, ...]
    writes: tuple[int, ...]  # new tensors and tensors updated in place
    flops: int
    bytes_touched: int
    # What the op's kernel needs beyond shapes (ops.op_attrs reads them). A function of the
    # model like everything else here, but session files do not store it yet, so it stays out of ==
    # (a graph loaded from a session equals the one built from its config).
    attrs: Attrs = field(default=(), compare=False)

    @property
    def touches(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(self.reads + self.writes))


@dataclass(frozen=True)
class Graph:
    model: str
    batch: int
    image_size: int
    tensors: tuple[Tensor, ...]
    ops: tuple[Op, ...]

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.model, self.batch, self.image_size)

    @cached_property
    def uses(self) -> tuple[tuple[int, ...], ...]:
        """Ops touching each tensor (reading or writing it), ascending."""
        out: list[list[int]] = [[] for _ in self.tensors]
        for i, op in enumerate(self.ops):
            for t in op.touches:
                out[t].append(i)
        return tuple(tuple(u) for u in out)

    @cached_property
    def last_use(self) -> tuple[int, ...]:
        """Last op touching each tensor (its producer if nothing reads it)."""
        last = [t.producer for t in self.tensors]
        for i, op in enumerate(self.ops):
            for t in op.touches:
                last[t] = i
        return tuple(last)

    @cached_property
    def live_bytes(self) -> tuple[int, ...]:
        """Bytes alive during each op when nothing is paged: persistent state plus live temporaries."""
        n = len(self.ops)
        delta = [0] * (n + 1)
        base = 0
        for t, tensor in enumerate(self.tensors):
            if tensor.persistent:
                base += tensor.nbytes
            else:
                delta[tensor.producer] += tensor.nbytes
                delta[self.last_use[t] + 1] -= tensor.nbytes
        out, running = [], base
        for i in range(n):
            running += delta[i]
            out.append(running)
        return tuple(out)

    @property
    def footprint(self) -> int:
        """Peak device bytes with everything resident: what the `device` policy needs."""
        return max(self.live_bytes)

    @cached_property
    def working_sets(self) -> tuple[int, ...]:
        """Bytes each op touches: all of them must be on the device while it runs."""
        return tuple(sum(self.tensors[t].nbytes for t in op.touches) for op in self.ops)

    def working_set(self, op: int) -> int:
        return self.working_sets[op]

    @cached_property
    def min_capacity(self) -> tuple[int, int]:
        """(bytes, op): the largest single-op working set, below which no plan can run."""
        best = max(range(len(self.ops)), key=self.working_sets.__getitem__)
        return self.working_sets[best], best

    @property
    def param_count(self) -> int:
        return sum(_numel(t.shape) for t in self.tensors if t.kind is Kind.WEIGHT)

    def bytes_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {k.value: 0 for k in Kind}
        for t in self.tensors:
            out[t.kind.value] += t.nbytes
        return out

    def tensor_id(self, name: str) -> int:
        try:
            return self._ids[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in the {self.model} graph") from None

    @cached_property
    def _ids(self) -> dict[str, int]:
        return {t.name: i for i, t in enumerate(self.tensors)}


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


DTYPE_BYTES = {"float32": 4, "int32": 4, "uint8": 1}


def nbytes_of(shape: tuple[int, ...], dtype: str) -> int:
    return _numel(shape) * DTYPE_BYTES[dtype]
