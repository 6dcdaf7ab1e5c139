"""One training iteration as data: tensors with exact bytes, ops in execution order.

A graph is what every other part of vmexplorer reads: policies compile it into a plan, the simulator
and the executor run that plan over it. Op and tensor ids are their positions in `Graph.ops` and
`Graph.tensors`, so plans and timelines can refer to them with plain integers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any


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
    RECOMPUTE = "recompute"  # a forward op run again to make a dropped activation anew (`recompute.py`)


PERSISTENT = -1  # producer of a tensor that exists before the iteration starts
WORKSPACE_FLOOR = 4096  # the least workspace an op is given: every convolution has algorithms that need none

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
class Recompute:
    """Activation `tensor` is made again before op `before` (both numbered as in the graph without
    recomputation), and ops from `before` on read the copy (`recompute.recomputed`)."""

    tensor: int
    before: int


@dataclass(frozen=True)
class Graph:
    model: str
    batch: int
    image_size: int
    tensors: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    # Whether the kernels' scratch memory is in the graph as workspace tensors, inside every capacity
    # (sessions recorded before schema 11 ran with it outside: their graphs have none).
    workspaces: bool = True
    # The capacity the workspaces are fitted to (`fitted`); None: each as large as its op's tensors.
    capacity: int | None = None
    # The graph with full workspaces this one was fitted from (None: this is it).
    full: Graph | None = field(default=None, compare=False, repr=False)
    # The recomputations this graph holds as ops (`recompute.recomputed`), and the graph without them
    # (None: this is it); a fitted graph's are its `full` graph's.
    recomputes: tuple[Recompute, ...] = field(default=(), compare=False, repr=False)
    plain: Graph | None = field(default=None, compare=False, repr=False)
    # A model that is not built in (from a file): its forward layers, from which the rest is derived and
    # which its sessions store (a `definition.Definition`, which builds graphs: typed loosely here, as this
    # module cannot import it); None for a built-in model, which its name fixes.
    definition: Any = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, int, int]:
        """The model this graph trains: sessions and cost models of one key describe the same ops."""
        return (self.model, self.batch, self.image_size)

    def fitted(self, capacity: int) -> Graph:
        """This graph with each workspace fitted to a device of `capacity` bytes: at most its full size
        (the bytes of the tensors its op touches) and at most half of what the op's tensors leave of the
        capacity (at least `WORKSPACE_FLOOR`), so the rest stays for what the plan keeps beside the op.
        A convolution chooses its algorithm within its workspace: in less memory, slower ones."""
        if not self.workspaces or self.capacity == capacity:
            return self
        full = self.full or self
        fits = full._fits
        if capacity not in fits:
            if len(fits) > 64:  # a slider dragged over many capacities: keep the latest
                fits.clear()
            fits[capacity] = full._fit(int(capacity))
        return fits[capacity]

    def least_workspaces(self) -> Graph:
        """This graph with every fitted workspace at its least: what a bound over all plans assumes of the
        memory, since a plan may be made with any room down to the least (and of the time, each
        convolution's in the workspace it runs fastest in: `CostModel.compute_ns`)."""
        return (self.full or self).fitted(0)

    def sized_for(self, capacity: int) -> Graph:
        """The graph a plan at `capacity` runs: a graph with full workspaces fitted to it; a graph already
        fitted (to the capacity of the plan being made, whose room may be less) as it is."""
        return self if self.capacity is not None else self.fitted(capacity)

    @cached_property
    def _fits(self) -> dict[int, Graph]:
        return {}

    @cached_property
    def _recomputations(self) -> dict[tuple[Recompute, ...], Graph]:
        return {}

    def __getstate__(self) -> dict[str, object]:
        # a graph sent to the work pool (in a session) travels without the graphs it has cached
        return {k: v for k, v in self.__dict__.items() if k not in ("_fits", "_recomputations")}

    def _fit(self, capacity: int) -> Graph:
        size = list(self.workspace_bytes)
        for i, op in enumerate(self.ops):
            if size[i] and dict(op.attrs).get("workspace"):  # a fixed scratch (attr `scratch`) stays whole
                operands = sum(self.tensors[t].nbytes for t in op.touches if self.tensors[t].kind is not Kind.WORKSPACE)
                size[i] = min(size[i], max(WORKSPACE_FLOOR, (capacity - operands) // 2 // 256 * 256))
        tensors = tuple(t if t.kind is not Kind.WORKSPACE else
                        Tensor(t.name, t.kind, (size[t.producer],), t.dtype, size[t.producer], t.producer, t.consumers)
                        for t in self.tensors)
        return Graph(self.model, self.batch, self.image_size, tensors, self.ops, True, capacity, self,
                     definition=self.definition)

    def with_workspaces(self, nbytes: Mapping[int, int]) -> Graph:
        """This graph with the workspace tensors in `nbytes` (tensor -> bytes) that large: what a run
        executes where its pool had less room for a workspace than its fitting gave it."""
        tensors = tuple(t if i not in nbytes else Tensor(t.name, t.kind, (nbytes[i],), t.dtype, nbytes[i], t.producer,
                                                         t.consumers)
                        for i, t in enumerate(self.tensors))
        return Graph(self.model, self.batch, self.image_size, tensors, self.ops, self.workspaces,
                     self.capacity if self.capacity is not None else self.footprint, self.full or self,
                     definition=self.definition)

    def without_workspaces(self) -> Graph:
        """This graph as vmexplorer built it before workspaces were graph tensors: the same tensors and
        ops, numbered the same (workspaces are the last tensors), with the kernels' scratch outside."""
        if not self.workspaces:
            return self
        keep = [t for t, tensor in enumerate(self.tensors) if tensor.kind is not Kind.WORKSPACE]
        if keep != list(range(len(keep))):
            raise ValueError(f"{self.model}: workspace tensors should come after every other tensor")
        n = len(keep)
        full = self.full or self
        ops = tuple(Op(o.name, o.kind, o.phase, o.layer, o.reads, tuple(t for t in o.writes if t < n), o.flops,
                       o.bytes_touched, tuple(a for a in o.attrs if a[0] not in ("workspace", "scratch")))
                    for o in full.ops)
        return Graph(self.model, self.batch, self.image_size, full.tensors[:n], ops, workspaces=False,
                     definition=self.definition)

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
        """Peak device bytes with everything resident and full workspaces: what the `device` policy needs,
        and what a capacity's share (`50%`) is of, fitted or not."""
        return max((self.full or self).live_bytes)

    @cached_property
    def workspace_bytes(self) -> tuple[int, ...]:
        """Bytes of each op's workspace (0 for an op whose kernel takes none)."""
        out = [0] * len(self.ops)
        for tensor in self.tensors:
            if tensor.kind is Kind.WORKSPACE:
                out[tensor.producer] += tensor.nbytes
        return tuple(out)

    @cached_property
    def working_sets(self) -> tuple[int, ...]:
        """Bytes each op touches: all of them must be on the device while it runs."""
        return tuple(sum(self.tensors[t].nbytes for t in op.touches) for op in self.ops)

    def working_set(self, op: int) -> int:
        return self.working_sets[op]

    @cached_property
    def min_capacity(self) -> tuple[int, int]:
        """(bytes, op): the largest single-op working set, below which no plan can run (for a graph whose
        workspaces are not fitted yet, with the smallest workspaces: they shrink with the room)."""
        if self.workspaces and self.capacity is None and any(self.workspace_bytes):
            return self.least_workspaces().min_capacity
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
