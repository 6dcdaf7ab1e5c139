"""A session of a model imported from an ONNX file carries its graph (schema 15's `graph.definition`): it saves,
loads where the file is not, and re-plans as a built-in model's does; a built-in model's session stores
only its name; a definition from a file is untrusted, and any fault in it is one SessionError saying where."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest
from onnx_models import Net, resnet18, small

from vmexplorer.config import Config
from vmexplorer.graph import Graph, build_graph, import_onnx
from vmexplorer.plan import PlanError
from vmexplorer.session import Session, SessionError, session_from_bytes
from vmexplorer.session.files import session_to_bytes
from vmexplorer.session.planned import bound_at, plan_for, simulated_split
from vmexplorer.simulator import H100_DEFAULT


def _session(graph: Graph, policy: str = "autovm") -> Session:
    config = Config(*graph.key, graph.footprint // 2, policy, {}, definition=graph.definition)
    return plan_for(config, H100_DEFAULT).simulated()


@pytest.fixture(scope="module")
def imported() -> Graph:
    net = Net()
    return import_onnx(net.bytes(resnet18(net)), 8, image_size=64)


@pytest.fixture(scope="module")
def session(imported: Graph) -> Session:
    return _session(imported)


def _doc(s: Session) -> dict[str, Any]:
    return json.loads(gzip.decompress(session_to_bytes(s)))


def _load(doc: dict[str, Any]) -> Session:
    return session_from_bytes(gzip.compress(json.dumps(doc).encode()), "net.vms")


def test_a_session_of_an_imported_model_loads_from_its_bytes_alone_with_the_graph_the_import_made(
        imported: Graph, session: Session) -> None:
    loaded = session_from_bytes(session_to_bytes(session))
    assert loaded.graph == session.graph and loaded.graph.definition == imported.definition
    assert [op.attrs for op in loaded.graph.ops] == [op.attrs for op in session.graph.ops]  # what kernels read
    assert loaded.plan == session.plan and loaded.summary == session.summary and loaded.bound == session.bound
    assert loaded.plan.config.model == "model.onnx" and loaded.plan.config.definition == imported.definition
    # re-planned where the file is not, from the session alone: the same plan
    again = plan_for(loaded.plan.config, H100_DEFAULT)
    assert again.plan == session.plan and again.simulated().summary == session.summary


def test_the_file_stores_the_forward_layers_of_an_imported_model_and_null_for_a_built_in_one(
        session: Session) -> None:
    doc = _doc(session)
    definition = doc["graph"]["definition"]
    assert doc["schema_version"] == 15
    assert definition["name"] == doc["config"]["model"] == "model.onnx"
    assert definition["layers"]["rows"] == 68 and definition["channels"] == 3
    assert definition["layers"]["columns"]["kind"][:4] == ["conv2d", "batch_norm2d", "relu", "max_pool2d"]
    assert _doc(_session(build_graph("resnet18", 8, 64)))["graph"]["definition"] is None


def test_two_imported_models_of_one_name_and_batch_have_their_own_bounds_and_splits() -> None:
    a, b = Net(), Net()
    one = import_onnx(a.bytes(small(a, classes=10)), 8, name="net")
    other = import_onnx(b.bytes(small(b, classes=4000)), 8, name="net")  # a wider classifier: more to move
    assert one.key == other.key
    capacity = max(one.min_capacity[0], other.min_capacity[0]) * 2
    bounds = [bound_at(g, capacity, H100_DEFAULT, "uvm") for g in (one, other)]
    assert bounds[0] != bounds[1]
    splits = [simulated_split(Config(*g.key, capacity, "uvm", {}, definition=g.definition), H100_DEFAULT)
              for g in (one, other)]
    assert splits[0] != splits[1]
    with pytest.raises(PlanError, match="two different models named net.onnx"):
        plan_for(Config(*one.key, capacity, "uvm", {}, definition=one.definition), H100_DEFAULT, graph=other)


def _layers(doc: dict[str, Any]) -> dict[str, Any]:
    layers: dict[str, Any] = doc["graph"]["definition"]["layers"]
    return layers


def _column(name: str, row: int, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: _layers(doc)["columns"][name].__setitem__(row, value)


def _inputs(row: int, value: int) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        ragged = _layers(doc)["ragged"]["inputs"]
        ragged["values"][ragged["offsets"][row]] = value
    return change


def _field(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["graph"]["definition"].__setitem__(name, value)


def _many_layers(doc: dict[str, Any]) -> None:
    layers = _layers(doc)
    n = 4_097
    layers["rows"] = n
    layers["columns"] = {k: [v[2]] * n for k, v in layers["columns"].items()}  # relu rows
    layers["ragged"]["inputs"] = {"offsets": list(range(n + 1)), "values": [-1] * n}


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "not an object": (lambda doc: doc["graph"].__setitem__("definition", [1, 2]),
                      "graph.definition should be an object, not a list"),
    "a missing field": (lambda doc: doc["graph"]["definition"].pop("channels"),
                        "graph.definition has no 'channels' field"),
    "a name that is markup": (_field("name", "<img src=x onerror=alert(1)>.onnx"),
                              'graph.definition.name is "<img src=x onerror'),
    "a built-in model's name": (_field("name", "resnet18"), "and not a built-in model's name"),
    "a name the config does not give": (_field("name", "other.onnx"),
                                        'config.model is "model.onnx", but graph.definition defines "other.onnx"'),
    "no channels": (_field("channels", 0), "graph.definition.channels is 0, expected at least 1"),
    "an output past the layers": (_field("output_layer", 68), "graph.definition.output_layer is 68, not a layer"),
    "too many layers": (_many_layers, "has 4,097 rows; a model has 1 to 4,096 layers"),
    "an unknown kind": (_column("kind", 3, "sigmoid"), 'layers row 3, kind: "sigmoid" is not one of conv2d'),
    "a layer name that is markup": (_column("name", 3, "<b>x</b>"), 'layers row 3, name: "<b>x</b>" should be'),
    "two layers of one name": (_column("name", 3, "conv1"), 'two layers are named "conv1"'),
    "a layer reading a later one": (_inputs(3, 7), "layers row 3, inputs: [7]; a max_pool2d layer reads 1 earlier"),
    "a text where a number goes": (_column("kernel", 0, "7"), "column 'kernel' row 0 should be a whole number"),
    "no output channels": (_column("out", 0, 0), "layers row 0, out: 0 is not from 1 to 65536"),
    "a huge kernel": (_column("kernel", 0, 1 << 40), "layers row 0, kernel: 1099511627776 is not from 1 to 65536"),
    "a kernel for a relu": (_column("kernel", 2, 3), "layers row 2, kernel: 3, but a relu layer takes none (0)"),
    "a bias for a relu": (_column("bias", 2, True), "layers row 2, bias: true, but a relu layer has none"),
    "an infinite eps": (_column("eps", 1, "INFINITE"), "column 'eps' row 1 should be a number, not an infinite"),
    "a negative eps": (_column("eps", 1, -1e-5), "layers row 1, eps: -1e-05 is out of range for a batch_norm2d"),
    "a window larger than its input": (_column("kernel", 3, 999), "graph.definition does not build a training "
                                       "iteration: model.onnx: image size 64 is too small"),
    "layers the stored graph is not": (_column("out", 67, 10), "shape: [1000, 512] is not model.onnx batch 8 at "
                                       "64px's [10, 512]"),
    "a definition in a schema 14 file": (lambda doc: doc.__setitem__("schema_version", 14),
                                         'graph has an unexpected field "definition"'),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_definition_is_one_session_error_saying_where(session: Session, case: str) -> None:
    change, says = HOSTILE[case]
    doc = _doc(session)
    change(doc)
    text = json.dumps(doc).replace('"INFINITE"', "1e999")
    with pytest.raises(SessionError) as info:
        session_from_bytes(gzip.compress(text.encode()), "net.vms")
    message = str(info.value)
    assert message.startswith("net.vms is not a valid session: ") and len(message.splitlines()) == 1
    assert says in message, message
