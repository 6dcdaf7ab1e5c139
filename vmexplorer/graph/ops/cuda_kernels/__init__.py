"""Hand-written CUDA kernels for the memory-bound ops, used when the ops run on cupy.

The generic `xp` bodies of relu, add, sgd_momentum, max_pool2d, batch_norm2d, dropout and the
convolution and linear biases are the reference (numpy runs them in CI); on cupy they cost many passes
over memory (bool temporaries, padded window copies, reductions over axes (0, 2, 3)). The kernels here
do each op in the fewest passes, in float32, with the same rounding as the numpy bodies wherever the
numpy body fixes it: `__fmul_rn` and friends keep nvcc from fusing a multiply and an add into one FMA,
which would round once where numpy rounds twice. Every reduction runs in a fixed order with no
atomics, so two runs give the same bits.

Assumptions, checked on entry: float32 operands (the ops fall back to the generic body otherwise),
C-contiguous NCHW arrays, matching shapes. cupy is imported only when a kernel is first needed, and
each source is compiled once per process (cupy also caches the binaries on disk).

One module per family of kernels holds its CUDA source beside the Python that checks the operands and
launches it: elementwise.py (relu, add, sgd_momentum), pooling.py (max pooling), batch_norm.py,
biases.py (the convolution and linear biases) and dropout.py; launch.py compiles the sources and sizes
the grids. Names with a leading underscore are the package's own, shared between its modules.
"""

from .batch_norm import SMALL_CHANNEL, batch_norm_backward, batch_norm_forward
from .biases import bias_add, channel_sum
from .dropout import dropout_backward, dropout_forward
from .elementwise import add, relu_backward, relu_forward, sgd_momentum
from .launch import BLOCK, MAX_BLOCKS_PER_SM, STAT_BLOCKS_PER_SM, Array, compiled, fast, is_cupy
from .pooling import max_pool2d_backward, max_pool2d_forward

__all__ = ["BLOCK", "MAX_BLOCKS_PER_SM", "SMALL_CHANNEL", "STAT_BLOCKS_PER_SM", "Array", "add", "batch_norm_backward",
           "batch_norm_forward", "bias_add", "channel_sum", "compiled", "dropout_backward", "dropout_forward", "fast",
           "is_cupy", "max_pool2d_backward", "max_pool2d_forward", "relu_backward", "relu_forward", "sgd_momentum"]
