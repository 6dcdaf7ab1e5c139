"""Stage 1, the graph: one training iteration of a model as ops over tensors.

`graph.py` is the data, `builder.py` records a model's forward ops and derives the backward pass and
the update, `ops/` holds each op (its shapes, FLOPs, what its backward keeps, its math) and
`models.py` the CNNs built from them; `onnx_import/` reads a person's own CNN from an ONNX file.
"""

from .definition import Definition, describe
from .graph import PERSISTENT, WORKSPACE_FLOOR, Graph, GraphError, Kind, Op, Phase, Recompute, Tensor
from .models import DEFAULT_IMAGE_SIZE, MODELS, build_graph
from .onnx_import import import_onnx

__all__ = ["DEFAULT_IMAGE_SIZE", "MODELS", "PERSISTENT", "WORKSPACE_FLOOR", "Definition", "Graph", "GraphError", "Kind",
           "Op", "Phase", "Recompute", "Tensor", "build_graph", "describe", "import_onnx"]
