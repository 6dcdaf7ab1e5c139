"""A moves file is untrusted input: whatever its bytes, `parse_moves` gives moves or one PlanError.

Seeds are real manual plans: the `plan.moves` that `vmexplorer plan --policy autovm --format json` prints
for AlexNet at batch 8 (named ops, and with `--tensors all --offload all` wrapped trips that use -1),
and the same moves numbered. Each example mutates a seed field by field (any JSON value, numbers far
beyond any index, deep nesting, strings with control characters, keys gone or added) or byte by byte
(flips, insertions, deletions in the serialized text). Any exception but PlanError, or an example
slower than the deadline, fails. Derandomized, so CI runs the same examples every time.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from vmexplorer.cli import plan_doc
from vmexplorer.graph import Graph, build_graph
from vmexplorer.plan import Move, Plan, PlanError
from vmexplorer.plan.moves import MAX_MOVES_FILE_BYTES, parse_moves
from vmexplorer.policies import compile_plan

GRAPH = build_graph("alexnet", 8)
N_OPS, N_TENSORS = len(GRAPH.ops), len(GRAPH.tensors)


def _plan(options: dict[str, Any]) -> Plan:
    return compile_plan(GRAPH, GRAPH.footprint * 7 // 10, "autovm", options)


def _moves_doc(plan: Plan) -> list[dict[str, Any]]:
    return plan_doc(GRAPH, plan, {}, "")["plan"]["moves"]  # what `vmexplorer plan --format json` prints


def _numbered(moves: list[dict[str, Any]], graph: Graph) -> list[dict[str, Any]]:
    ops = {op.name: i for i, op in enumerate(graph.ops)}

    def index(ref: Any) -> Any:
        return ops.get(ref, ref)
    return [{"tensor": graph.tensor_id(m["tensor"]), "offload_after": index(m["offload_after"]),
             "prefetch_after": index(m["prefetch_after"])} for m in moves]


FEW, MANY = _plan({}), _plan({"tensors": "all", "offload": "all"})
NAMED, ALL = _moves_doc(FEW), _moves_doc(MANY)
SEEDS = [{"moves": NAMED}, {"moves": ALL}, {"moves": _numbered(ALL, GRAPH)}, NAMED]
SEED_MOVES = [FEW.moves, MANY.moves, MANY.moves, FEW.moves]
FIELDS = ("tensor", "offload_after", "prefetch_after")

# Fragments of JSON text, written out rather than dumped: json.dumps cannot write a 5000-digit integer,
# and a parser must meet what a file can hold, not only what Python writes.
RAW_NUMBERS = st.sampled_from([
    "-1", "-2", str(N_OPS), str(N_TENSORS), "0.0", "1e400", "-1e400", "1e-400", "2.5", "9" * 31, "9" * 5000,
    str(2**63), str(-(2**63) - 1), "1E+2", "-0", "NaN", "Infinity", "-Infinity",
])
NESTED = st.integers(1, 200_000).map(lambda n: "[" * n + "]" * n)
TEXT = st.text(st.characters() | st.sampled_from("\x00\x1b\x07\x9b\u202e\u2066\u2028\x7f\ud800\udfff"),
               max_size=40)
NAMES = st.sampled_from([op.name for op in GRAPH.ops] + [t.name for t in GRAPH.tensors])
SCALARS = (st.none() | st.booleans() | st.integers(-(10**40), 10**40) | st.integers(-3, N_TENSORS + 3)
           | st.floats(allow_nan=True, allow_infinity=True) | TEXT | NAMES)
# json.dumps writes NaN and Infinity as Python does, which JSON refuses: the parser must too
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(TEXT | st.sampled_from(FIELDS), inner, max_size=4), max_leaves=12)

PLACEHOLDER = "\x00vmexplorer-fuzz\x00"  # cannot occur in dumped JSON (json.dumps escapes NUL)


def _check(raw: bytes) -> None:
    """The property: moves, each naming a real tensor and ops in range, or PlanError; nothing else."""
    try:
        moves, steps = parse_moves(GRAPH, raw)
    except PlanError as e:
        assert str(e) and "\n" not in str(e)
        event("PlanError: " + re.sub(r"\d+", "N", " ".join(str(e).split()[:3])))  # which check refused it
        return
    event(f"loaded {min(len(moves), 3)}+ moves")
    assert isinstance(moves, list) and steps == []  # the fuzzed documents hold no recomputes
    for mv in moves:
        assert isinstance(mv, Move) and type(mv.tensor) is int and 0 <= mv.tensor < N_TENSORS
        assert type(mv.offload_after) is int and -1 <= mv.offload_after < N_OPS
        assert mv.prefetch_after is None or (type(mv.prefetch_after) is int and -1 <= mv.prefetch_after < N_OPS)


FUZZ = settings(max_examples=500, deadline=timedelta(milliseconds=800), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_the_seeds_load_as_the_moves_autovm_planned(seed: int) -> None:
    assert len(SEED_MOVES[seed]) >= 2 and any(mv.prefetch_after == -1 for mv in MANY.moves)  # wrapped trips
    assert tuple(parse_moves(GRAPH, json.dumps(SEEDS[seed]).encode())[0]) == SEED_MOVES[seed]


@FUZZ
@given(seed=st.sampled_from(SEEDS), data=st.data())
def test_a_moves_file_mutated_field_by_field_loads_or_is_one_plan_error(seed: Any, data: st.DataObject) -> None:
    doc = json.loads(json.dumps(seed))  # a copy to mutate
    moves = doc["moves"] if isinstance(doc, dict) else doc
    what = data.draw(st.sampled_from(["field", "field", "field", "drop key", "add key", "move", "moves", "top"]))
    i = data.draw(st.integers(0, len(moves) - 1))
    if what == "field":
        moves[i][data.draw(st.sampled_from(FIELDS))] = PLACEHOLDER
    elif what == "drop key":
        moves[i].pop(data.draw(st.sampled_from(FIELDS)))
    elif what == "add key":
        moves[i][data.draw(TEXT)] = PLACEHOLDER
    elif what == "move":
        moves[i] = PLACEHOLDER
    elif what == "moves" and isinstance(doc, dict):
        doc["moves"] = PLACEHOLDER
    else:
        doc = PLACEHOLDER
    ascii_only = data.draw(st.booleans())  # escaped (\\u001b), or raw bytes in the file
    value = data.draw(VALUES.map(lambda v: json.dumps(v, ensure_ascii=ascii_only)) | RAW_NUMBERS | NESTED)
    text = json.dumps(doc, ensure_ascii=ascii_only).replace(json.dumps(PLACEHOLDER), value, 1)
    _check(text.encode("utf-8", "surrogatepass"))  # a raw lone surrogate is bytes no UTF-8 decoder takes


# mostly bytes JSON is made of, so that most edits still decode and reach the parser and the checks
BYTES = st.sampled_from(b'[]{}",:-+.eE0123456789 \\') | st.integers(0x20, 0x7E) | st.integers(0, 255)


@FUZZ
@given(seed=st.sampled_from(SEEDS), edits=st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete"]),
                                                            st.floats(0, 1, exclude_max=True), BYTES),
                                                  min_size=1, max_size=8))
@example(seed=SEEDS[0], edits=[("insert", 0.0, 0xEF)])  # a BOM's first byte alone: not UTF-8
def test_a_moves_file_mutated_byte_by_byte_loads_or_is_one_plan_error(
        seed: Any, edits: list[tuple[str, float, int]]) -> None:
    raw = bytearray(json.dumps(seed, indent=1).encode())
    for kind, where, byte in edits:
        at = int(where * len(raw)) if raw else 0
        if kind == "insert":
            raw.insert(at, byte)
        elif not raw:
            continue
        elif kind == "flip":
            raw[at] ^= 1 << (byte % 8)
        elif kind == "set":
            raw[at] = byte
        else:
            del raw[at]
    _check(bytes(raw))


def test_a_file_past_the_limit_is_refused_by_its_size_alone() -> None:
    seed = json.dumps(SEEDS[0]).encode()
    with pytest.raises(PlanError, match=f"more than a moves file may hold \\({MAX_MOVES_FILE_BYTES} bytes"):
        parse_moves(GRAPH, seed + b" " * (MAX_MOVES_FILE_BYTES - len(seed) + 1))
    assert parse_moves(GRAPH, seed + b" " * (MAX_MOVES_FILE_BYTES - len(seed)))[0]  # at the limit: read
