"""What an op module's recording function may call on the graph builder, as a structural type.

Op modules record themselves into a graph but must not import `graph/builder.py`, which imports them
(to derive the loss, gradient sums and updates from their modules): `GraphBuilder` satisfies this
protocol without naming it, and mypy checks that it does wherever a builder is passed to an op.
"""

from __future__ import annotations

from typing import Protocol

from ..graph import PERSISTENT, Attrs, Kind, Phase

Shape = tuple[int, ...]
Output = tuple[str, Kind, Shape, str]  # a new tensor: (name, kind, shape, dtype)
Saved = tuple[str, Shape, str]  # an extra forward output kept for backward: (name suffix, shape, dtype)


class Recorder(Protocol):
    @property
    def model(self) -> str: ...

    @property
    def image_size(self) -> int: ...

    def shape(self, t: int) -> Shape: ...

    def name(self, t: int) -> str: ...

    def new_tensor(self, name: str, kind: Kind, shape: Shape, dtype: str = "float32",
                   producer: int = PERSISTENT) -> int: ...

    def param(self, layer: str, name: str, shape: Shape) -> int: ...

    def add_op(self, name: str, kind: str, phase: Phase, layer: str, reads: tuple[int, ...],
               outputs: list[Output], updates: tuple[int, ...] = (), flops: int = 0,
               attrs: Attrs = ()) -> tuple[int, list[int]]:
        """Record an op that creates `outputs` and updates `updates` in place; returns (op, new tensors)."""
        ...

    def forward(self, kind: str, layer: str, inputs: tuple[int, ...], params: tuple[int, ...],
                out_shape: Shape, flops: int, keeps: tuple[int, ...] = (), backward_flops: int = 0,
                input_grad_flops: int = 0, saved: tuple[Saved, ...] = (), reads: tuple[int, ...] = (),
                updates: tuple[int, ...] = (), passes_gradient: bool = False,
                attrs: Attrs = (), workspace: bool = False, backward_scratch: int = 0) -> tuple[int, list[int]]:
        """Record a forward op whose backward the builder derives; returns (output, saved tensors). With
        `workspace`, its kernels (forward and backward) take scratch memory as a tensor of their own, the
        last of their writes, fitted to the room; with `backward_scratch`, its backward takes one of
        exactly those bytes."""
        ...
