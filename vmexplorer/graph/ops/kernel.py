"""How an op module declares its kernels: the graph op kind each runs, the attrs it needs, the run
settings it takes.

`ops/__init__.py` gathers every module's `KERNELS` into one table, so the engine looks a kernel up by
the graph op's kind and never names an op itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (xp, arrays of the op's reads, arrays of its writes, attrs): results go into the writes in place
OpFn = Callable[[Any, list[Any], list[Any], dict[str, Any]], None]


@dataclass(frozen=True)
class RunContext:
    """The settings of a run that are not part of the graph, and the iteration an op runs in."""

    iteration: int = 0
    seed: int = 0
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    allow_tf32: bool = True
    deterministic: bool = False
    autotune: bool = False


# (the op's layer, the run) -> the attrs a kernel adds to what the graph recorded
SettingsFn = Callable[[str, RunContext], dict[str, Any]]


@dataclass(frozen=True)
class Kernel:
    kind: str  # the graph op kind it runs, e.g. "conv2d_backward"
    run: OpFn
    # attrs the graph must have recorded on the op: missing ones are an error, never a guess (they
    # cannot be derived from shapes: AlexNet's first convolution gives 55x55 from 224x224 with padding 2 or 3)
    requires: tuple[str, ...] = ()
    settings: SettingsFn | None = None


def run_numerics(layer: str, run: RunContext) -> dict[str, Any]:
    """The numerics a run asks of convolutions and matmuls (cuDNN chooses its engine by them; CuPy's
    matmuls stay full fp32 whatever they say)."""
    return {"allow_tf32": run.allow_tf32, "deterministic": run.deterministic, "autotune": run.autotune}
