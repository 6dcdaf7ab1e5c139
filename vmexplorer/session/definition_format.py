"""`graph.definition` in a session file, both ways: the forward layers of a model that is not built in (one
imported from an ONNX file), from which the session's graph is built again where the file is not.

A built-in model's session stores null here: its name fixes its graph. Another's stores the layers
(`vmexplorer.graph.definition`), checked as untrusted input before anything is built of them: bounded
counts, names of a few safe characters, kinds from the list, inputs that are earlier layers, each
argument in its range (and 0 where the kind takes none, so a model has one spelling and one digest).
The graph they build is then compared with the file's `graph` tables as a built-in model's is.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..graph import MODELS, Definition, GraphError
from ..graph.definition import ARG_NAMES, ARGS, IMAGES, INPUTS, Layer
from ..units import quoted
from .reader import BOOL, INT, NUM, STR, Reader, write_table

MAX_LAYERS = 4_096  # ResNet-152 has some 520 forward layers
MAX_NAME = 100  # characters of a model's or a layer's name (the importer makes at most 54 and 80)
MAX_SIZE = 1 << 16  # channels, features, a window's side or stride or padding, a pooled side
NAME = re.compile(r"[A-Za-z0-9_.-]+")  # what the importer's names are made of: shown as text, safe anywhere
FIELDS = ("name", "channels", "output_layer", "layers")
_INTS = ("out", "kernel", "stride", "padding")
_FLOATS = ("eps", "momentum", "p")
# each argument's least and greatest value where its kind takes it (ints; floats are checked apart)
_RANGES = {"out": (1, MAX_SIZE), "kernel": (1, MAX_SIZE), "stride": (1, MAX_SIZE), "padding": (0, MAX_SIZE)}


def encode_definition(d: Definition | None) -> dict[str, Any] | None:
    if d is None:
        return None
    layers = d.layers
    return {"name": d.name, "channels": d.channels, "output_layer": d.output,
            "layers": write_table({"name": [x.name for x in layers], "kind": [x.kind for x in layers],
                                   **{a: [getattr(x, a) for x in layers] for a in ARG_NAMES}},
                                  {"inputs": [x.inputs for x in layers]})}


def read_definition(r: Reader, value: Any) -> Definition | None:
    """The definition of a model not built in, checked; None (null) for a built-in model."""
    if value is None:
        return None
    d = r.fields(value, "graph.definition", FIELDS)
    name = r.scalar(d["name"], "graph.definition.name", STR)
    if not _safe(name) or name in MODELS:
        r.fail(f"graph.definition.name is {quoted(name, 60)}: expected 1 to {MAX_NAME} letters, digits, `_`, `-` "
               "or `.`, and not a built-in model's name")
    channels = r.scalar(d["channels"], "graph.definition.channels", INT, 1)
    if channels > MAX_SIZE:
        r.fail(f"graph.definition.channels is {channels}, more than the {MAX_SIZE} any image has")
    t = r.table(d["layers"], "graph.definition.layers",
                {"name": STR, "kind": STR, **dict.fromkeys(_INTS, INT), "bias": BOOL, **dict.fromkeys(_FLOATS, NUM)},
                {"inputs": INT})
    rows = t["rows"]
    if not 0 < rows <= MAX_LAYERS:
        r.fail(f"graph.definition.layers has {rows:,} rows; a model has 1 to {MAX_LAYERS:,} layers")
    output = r.scalar(d["output_layer"], "graph.definition.output_layer", INT, 0)
    if output >= rows:
        r.fail(f"graph.definition.output_layer is {output}, not a layer (0 to {rows - 1})")
    inputs = r.split(t, "inputs")
    layers = tuple(_layer(r, t, i, inputs[i]) for i in range(rows))
    names = [x.name for x in layers]
    if len(set(names)) != rows:
        twice = next(n for i, n in enumerate(names) if n in names[:i])
        r.fail(f"graph.definition.layers: two layers are named {quoted(twice)}; each layer's name is its own")
    return Definition(name, channels, layers, output)


def _layer(r: Reader, t: dict[str, Any], i: int, inputs: tuple[int, ...]) -> Layer:
    where = f"graph.definition.layers row {i}"
    name, kind = t["name"][i], t["kind"][i]
    if kind not in ARGS:
        r.fail(f"{where}, kind: {quoted(kind, 40)} is not one of {', '.join(ARGS)}")
    if not _safe(name):
        r.fail(f"{where}, name: {quoted(name, 60)} should be 1 to {MAX_NAME} letters, digits, `_`, `-` or `.`")
    if len(inputs) != INPUTS[kind] or any(not IMAGES <= x < i for x in inputs):
        r.fail(f"{where}, inputs: {list(inputs)}; a {kind} layer reads {INPUTS[kind]} earlier layer(s) (0 to "
               f"{i - 1}) or the images ({IMAGES})")
    takes = ARGS[kind]
    args: dict[str, Any] = {"bias": bool(t["bias"][i])}
    for a in _INTS:
        x = int(t[a][i])
        if a not in takes and x != 0:
            r.fail(f"{where}, {a}: {x}, but a {kind} layer takes none (0)")
        if a in takes and not _RANGES[a][0] <= x <= _RANGES[a][1]:
            r.fail(f"{where}, {a}: {x} is not from {_RANGES[a][0]} to {_RANGES[a][1]}")
        args[a] = x
    if args["bias"] and "bias" not in takes:
        r.fail(f"{where}, bias: true, but a {kind} layer has none")
    for a in _FLOATS:
        v = float(t[a][i])
        args[a] = v
        if not _float_ok(kind, a, v):
            r.fail(f"{where}, {a}: {v:g} is out of range for a {kind} layer (eps above 0 and at most 1, momentum "
                   "and p from 0 to below 1 where the kind takes them, 0 where it does not)")
    return Layer(kind, name, inputs, **args)


def _float_ok(kind: str, a: str, x: float) -> bool:
    if a not in ARGS[kind]:
        return x == 0
    if a == "eps":
        return 0 < x <= 1
    return 0 <= x < 1 if a == "p" else 0 <= x <= 1 and math.isfinite(x)


def _safe(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME and NAME.fullmatch(name) is not None


def definition_graph_error(e: GraphError) -> str:
    return f"graph.definition does not build a training iteration: {e}"
