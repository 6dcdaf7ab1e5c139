"""The named cost models shipped with the package: `h200` and `h100`, the GPUs the samples were recorded on.

Each is the calibration the recorded samples carry (sample_sessions/, `bench.calibrate_samples`), kept as
data beside this module (`calibrated/NAME.json`, written by `python -m bench.named_cost_models` and checked
against the samples by tests/simulator/test_named_cost_models.py), so that an installed package without the
repository's samples simulates with them too. A GPU's file holds one model per graph its samples ran (model,
batch and image size: op times are a graph's own); `named_cost_model(name, graph)` gives that graph's model
as the samples carry it, so a sample's configuration simulates with the same figures, and for any other graph
the GPU's rates (the medians over its graphs) with the op times left to the default compute rates.

The default cost model (`H100_DEFAULT`) is none of these: an H100's measured transfer rates beside guessed
compute rates, uncalibrated. `DEFAULT_GPU` says so wherever the default is named.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .costmodel import RATES, SWAP_RATES, CostModel, pooled

if TYPE_CHECKING:
    from ..graph import Graph

DATA = Path(__file__).resolve().parent / "calibrated"
# name -> the GPU its samples ran on, as the sessions' environment names it
GPUS = {"h200": "NVIDIA H200", "h100": "NVIDIA H100 80GB HBM3"}
DEFAULT_GPU = "an H100, uncalibrated: its measured transfer rates beside guessed compute rates"
FORMAT = 1  # the files' version


def cost_model_names() -> tuple[str, ...]:
    """The names `--cost-model` takes beside a file: `h200`, `h100`."""
    return tuple(GPUS)


def named_cost_model(name: str, graph: Graph | None = None) -> CostModel:
    """GPU `name`'s calibrated cost model for `graph`: the one its samples of that graph (model, batch, image
    size) carry, or, for a graph they did not run (or None), its rates with the default compute rates.
    KeyError (naming the choices) for a name that is not one."""
    data = _load(name)
    models = data["graphs"]
    if graph is not None:
        same = [m for m in models if tuple(m["key"]) == graph.key]
        same.sort(key=lambda m: m["workspaces"] != graph.workspaces)  # the same kind of graph first
        if same:
            cost = _cost(same[0]["cost_model"])
            return dataclasses.replace(cost, name=f"{name}: {cost.name}")
    rates = pooled([_cost(m["cost_model"]) for m in models], name)
    what = "no sample ran this graph" if graph is not None else "for any graph"
    return dataclasses.replace(rates, name=f"{name}: the {short(name)} samples' rates ({what}: op times from the "
                               "default compute rates)", op_ns={}, op_gap_ns={}, workspace_ns={})


def samples_model(graph: Graph, gpu: str) -> CostModel | None:
    """The model the samples of `graph` (the same kind: with workspaces or not) measured on `gpu` carry, as
    they carry it (its name too), or None: what `session.samples.gpu_cost_model` gives where the samples
    themselves are not beside the package."""
    for name, named_gpu in GPUS.items():
        if named_gpu == gpu:
            for m in _load(name)["graphs"]:
                if (tuple(m["key"]), m["workspaces"]) == (graph.key, graph.workspaces):
                    return _cost(m["cost_model"])
    return None


def calibrated_graphs(name: str) -> list[tuple[str, int, int]]:
    """The graphs (model, batch, image size) GPU `name`'s samples ran: its op times are theirs."""
    return list(dict.fromkeys(tuple(m["key"]) for m in _load(name)["graphs"]))


def short(name: str) -> str:
    return name.upper()


def gpu_of_name(name: str) -> str:
    """The GPU a named model was calibrated on, as the sessions name it."""
    return _load(name)["gpu"]


def encode(gpu: str, models: list[tuple[tuple[str, int, int], bool, CostModel]]) -> str:
    """A GPU's file: its samples' models by graph ((model, batch, image size), workspaces, model), sorted."""
    rows = [{"key": list(key), "workspaces": ws, "cost_model": _fields(cost)}
            for key, ws, cost in sorted(models, key=lambda m: (m[0], m[1]))]
    doc = {"format": FORMAT, "gpu": gpu, "made_by": "python -m bench.named_cost_models", "graphs": rows}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _fields(c: CostModel) -> dict[str, Any]:
    return {"name": c.name, **{f: float(getattr(c, f)) for f in (*RATES, *SWAP_RATES)},
            "serialises_directions": bool(c.serialises_directions),
            **{t: {k: float(v) for k, v in getattr(c, t).items()}
               for t in ("op_ns", "op_gap_ns", "fault_bytes_per_ns_by_kind")},
            "workspace_ns": {k: [[int(b), float(ns)] for b, ns in steps] for k, steps in c.workspace_ns.items()},
            "evict_fastest_bytes_per_ns": float(c.evict_fastest_bytes_per_ns)}


def _cost(d: dict[str, Any]) -> CostModel:
    ws = {k: tuple((int(b), float(ns)) for b, ns in steps) for k, steps in d["workspace_ns"].items()}
    return CostModel(**{**d, "workspace_ns": ws})


@functools.cache
def _load(name: str) -> dict[str, Any]:
    if name not in GPUS:
        raise KeyError(f"no cost model is named {name!r}; the named ones are {', '.join(GPUS)}")
    with open(DATA / f"{name}.json", encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data
