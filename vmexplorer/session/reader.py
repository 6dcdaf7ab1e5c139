"""Checked reading of a parsed session document: objects, values and columnar tables, each checked as it is
read, so that a bad file fails at its first wrong value, with its place (format.py and plan_format.py say what
each place holds). The shape of a table is written here too (`write_table`), beside the reader of it."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any, NoReturn

import numpy as np

from ..records.spans import MAX_NS
from ..units import quoted
from .session import SessionError

MAX_ROWS = 10_000_000  # per table; the loader's count of values (vmexplorer.session.files) binds first
MAX_TOTAL = 2**62  # what the values of one column may add up to: int64 sums never wrap
INT, NUM, STR, BOOL = "int", "num", "str", "bool"
ColType = str | type[StrEnum]


class Reader:
    """Checks values against the schema; every failure names the file and the place in it."""

    def __init__(self, source: str, lead: str | None = None) -> None:
        self.source = source
        self.lead = lead or f"{source} is not a valid session"

    def fail(self, problem: str) -> NoReturn:
        raise SessionError(f"{self.lead}: {problem}") from None  # the message says it all

    def fields(self, value: Any, where: str, keys: tuple[str, ...] | None) -> dict[str, Any]:
        """An object with exactly `keys` (any text keys when None)."""
        if not isinstance(value, dict):
            self.fail(f"{where} should be an object, not {_describe(value)}")
        if keys is not None:
            missing = [k for k in keys if k not in value]
            if missing:
                self.fail(f"{where} has no {missing[0]!r} field")
            extra = sorted(set(value) - set(keys))
            if extra:
                self.fail(f"{where} has an unexpected field {quoted(extra[0])}")
        return value

    def scalar(self, value: Any, where: str, kind: str, minimum: int | None = None) -> Any:
        if not _is(value, kind):
            self.fail(f"{where} should be {_NAMES[kind]}, not {_describe(value)}")
        if minimum is not None and value < minimum:
            self.fail(f"{where} is {value}, expected at least {minimum}")
        return value

    def column(self, values: Any, where: str, kind: ColType, rows: int | None) -> Any:
        if not isinstance(values, list):
            self.fail(f"{where} should be a list, not {_describe(values)}")
        if rows is not None and len(values) != rows:
            self.fail(f"{where} has {len(values)} values for {rows} rows")
        if kind in (INT, NUM):
            return self.numbers(values, where, str(kind))
        # the types of a column's values, gathered at C speed: a file's columns hold millions of values,
        # and a loop in Python over each is seconds; the loop below only finds the first wrong one
        if kind == BOOL:
            if not set(map(type, values)) <= {bool}:
                bad = next(i for i, v in enumerate(values) if type(v) is not bool)
                self.fail(f"{where} row {bad} should be true or false, not {_describe(values[bad])}")
            return values
        if not set(map(type, values)) <= {str}:
            bad = next(i for i, v in enumerate(values) if not isinstance(v, str))
            self.fail(f"{where} row {bad} should be text, not {_describe(values[bad])}")
        if not isinstance(kind, str):
            allowed = {e.value for e in kind}
            if not set(values) <= allowed:
                bad = next(i for i, v in enumerate(values) if v not in allowed)
                self.fail(f"{where} row {bad} is {quoted(values[bad])}, expected one of "
                          f"{', '.join(sorted(allowed))}")
        return values

    def numbers(self, values: Any, where: str, kind: str) -> np.ndarray:
        if not isinstance(values, list):
            self.fail(f"{where} should be a list, not {_describe(values)}")
        array = _fast_numbers(values, kind)
        if array is None:  # something is wrong (or unusual): find the first wrong value, one at a time
            bad = next((i for i, v in enumerate(values) if not _is(v, kind)), None)
            if bad is not None:
                self.fail(f"{where} row {bad} should be {_NAMES[kind]}, not {_describe(values[bad])}")
            array = np.array(values, dtype=np.int64 if all(type(v) is int for v in values) else np.float64)
        # every figure derived from a column is a sum over some of its rows: bounding the whole
        # column's sum keeps each of them inside int64 (floats keep their precision well past it)
        if array.size and float(np.abs(array, dtype=np.float64).sum()) >= MAX_TOTAL:
            self.fail(f"{where}: its values add up to more than 2**62, more than any session can hold")
        return array

    def table(self, value: Any, where: str, columns: dict[str, ColType],
              ragged: dict[str, ColType] | None = None) -> dict[str, Any]:
        """Columns as arrays (lists for text), `rows`, and each ragged column as (values, offsets)."""
        d = self.fields(value, where, ("rows", "columns", "ragged") if ragged else ("rows", "columns"))
        rows = self.scalar(d["rows"], f"{where}.rows", INT, 0)
        if rows > MAX_ROWS:
            self.fail(f"{where} claims {rows:,} rows, more than the {MAX_ROWS:,} a session may hold")
        cols = self.fields(d["columns"], f"{where}.columns", tuple(columns))
        out: dict[str, Any] = {"rows": rows, "where": where}
        for name, kind in columns.items():
            out[name] = self.column(cols[name], f"{where} column {name!r}", kind, rows)
        lists = self.fields(d["ragged"], f"{where}.ragged", tuple(ragged)) if ragged else {}
        for name, kind in (ragged or {}).items():
            csr = self.fields(lists[name], f"{where}.ragged.{name}", ("offsets", "values"))
            offsets = self.numbers(csr["offsets"], f"{where} offsets of {name!r}", INT)
            values = self.column(csr["values"], f"{where} values of {name!r}", kind, None)
            if len(offsets) != rows + 1 or offsets[0] != 0 or (np.diff(offsets) < 0).any() \
                    or offsets[-1] != len(values):
                self.fail(f"{where} offsets of {name!r} do not index its {len(values)} values for {rows} "
                          f"rows (expected {rows + 1} rising offsets from 0 to {len(values)})")
            out[name] = (values, offsets)
        return out

    def times(self, table: dict[str, Any], name: str) -> None:
        """A time on the timeline, or a duration: from 0 to MAX_NS."""
        self.within(table, name, 0, MAX_NS + 1, "a time in ns from the first iteration's start (0 to 104 days)")

    def spans(self, table: dict[str, Any]) -> None:
        """`start_ns` and `end_ns` are times, and every span ends when or after it starts."""
        self.times(table, "start_ns")
        self.times(table, "end_ns")
        late = np.flatnonzero(table["end_ns"] < table["start_ns"])
        if late.size:
            self.fail(f"{table['where']} row {late[0]}: it ends (end_ns) before it starts (start_ns)")

    def within(self, table: dict[str, Any], name: str, lo: int, hi: int | None, what: str) -> None:
        """Every value of a column (or of a ragged column's lists) lies in [lo, hi)."""
        ragged = isinstance(table[name], tuple)
        values = table[name][0] if ragged else table[name]
        hits = np.flatnonzero(values < lo if hi is None else (values < lo) | (values >= hi))
        if not hits.size:
            return
        i = int(hits[0])
        row = int(np.searchsorted(table[name][1], i, "right") - 1) if ragged else i
        expected = f"at least {lo}" if hi is None else f"{lo} to {hi - 1}"
        self.fail(f"{table['where']} row {row}, {name}: {values[i]} is not {what}; expected {expected}")

    @staticmethod
    def split(table: dict[str, Any], name: str) -> list[tuple[int, ...]]:
        values, offsets = table[name]
        flat, bounds = values.tolist(), offsets.tolist()
        return [tuple(flat[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def write_table(columns: dict[str, list[Any]], ragged: dict[str, list[tuple[int, ...]]] | None = None
                ) -> dict[str, Any]:
    """Columns (and lists of varying length per row) as a table `Reader.table` reads back."""
    rows = len(next(iter(columns.values())))
    out: dict[str, Any] = {"rows": rows, "columns": columns}
    if ragged:
        out["ragged"] = {name: {"offsets": np.cumsum([0] + [len(v) for v in lists]).tolist(),
                                "values": [x for v in lists for x in v]}
                         for name, lists in ragged.items()}
    return out


def key_text(name: str) -> str:
    """A key from a file as part of a place in a message: as it is when it is a plain name, else quoted."""
    return name if name.replace("_", "").replace("-", "").replace(".", "").isalnum() and name.isascii() \
        else quoted(name)


_INT64 = (-(2**63), 2**63 - 1)
_NAMES = {INT: "a whole number", NUM: "a number", STR: "text", BOOL: "true or false"}


def _fast_numbers(values: list[Any], kind: str) -> np.ndarray | None:
    """The column as int64 (all whole numbers) or float64, checked by numpy rather than value by value;
    None where a value may be wrong (not a number, not finite, beyond 64 bits), for `Reader.numbers` to
    find and name it."""
    types = set(map(type, values))
    try:
        if types <= {int}:
            return np.array(values, dtype=np.int64)  # OverflowError beyond 64 bits
        if kind == NUM and types <= {int, float}:
            array = np.array(values, dtype=np.float64)
            # an int beyond 64 bits becomes a large float here: those (and infinities) go the slow way
            return array if bool(np.all(np.abs(array) < 2.0**63)) else None
    except OverflowError:
        pass
    return None


def _is(value: Any, kind: str) -> bool:
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return type(value) is bool
    if type(value) is int:  # not bool: JSON's true is not a count
        return _INT64[0] <= value <= _INT64[1]
    return kind == NUM and type(value) is float and math.isfinite(value)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
        return "a number beyond 64 bits"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (int, float)):
        return f"the number {value}" if not isinstance(value, float) or math.isfinite(value) else \
            "an infinite number"
    if isinstance(value, str):
        return f"the text {quoted(value)}"
    return "a list" if isinstance(value, list) else "an object"
