"""Byte quantities as people type them: `4GiB`, `512MB`, `1.5e9`, or `50%` of a footprint."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

# The most bytes any size may be (a capacity, a footprint, a tensor): about a thousand times any GPU's
# memory, so a larger one is a typo or a hostile file, and exact as a float (what --capacity 3e9 goes through).
MAX_BYTES = 2**50

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z%]*)\s*$")
# Below this a number is no byte of any unit; checked before exact arithmetic, as 1e-999999999 as a
# fraction would need a denominator of a billion digits.
_TINY = Decimal("1e-30")


def parse_bytes(text: str, footprint: int | None = None) -> int:
    """Parse a size; `%` needs the footprint it is a share of. Raises ValueError with the fix.

    Numbers are read exactly, not through a float, and the result is a whole number of bytes from 1 to
    MAX_BYTES; `inf`, `nan` and anything larger are refused."""
    match = _PATTERN.match(str(text))
    if not match:
        raise ValueError(f"capacity {typed(text, 40)} is not a size: write a finite number of bytes, e.g. 4GiB, "
                         "512MiB, 3e9 or 50%")
    value, unit = Decimal(match.group(1)), match.group(2).lower()  # a Decimal is exact at any exponent
    if unit == "%":
        if footprint is None:
            raise ValueError(f"capacity {typed(text, 40)} is a share, but no footprint is known to take it of")
        if not 0 < value <= 1000:
            raise ValueError(f"capacity {typed(text, 40)}: a share must be above 0% (and at most 1000%)")
        nbytes = int(footprint * _exact(value) / 100)
    elif unit not in _UNITS:
        raise ValueError(f"capacity {typed(text, 40)}: unknown unit {match.group(2)!r}; use B, KB, MB, GB, "
                         "KiB, MiB, GiB, TiB or %")
    elif value > MAX_BYTES:  # compared before multiplying: 1e400 must not be turned into an integer
        raise _too_large(text)
    else:
        nbytes = int(_exact(value) * _UNITS[unit])
    if nbytes <= 0:
        raise ValueError(f"capacity {typed(text, 40)} must be more than 0 bytes")
    if nbytes > MAX_BYTES:
        raise _too_large(text)
    return nbytes


def quoted(value: Any, limit: int = 80) -> str:
    """A value read from a JSON file, in a message as the file spells it (`null`, `true`, `"text"`,
    `[1, 2]`), control characters and everything beyond ASCII escaped, cut short: safe to print or show."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=repr)
    except (ValueError, RecursionError):  # a cycle, from a caller of the Python API
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def typed(text: Any, limit: int = 60) -> str:
    """What a person typed, or a name, in a message as Python quotes it (`'lots'`, control characters
    escaped), cut short: an argument can be a hundred thousand digits long."""
    text = str(text)
    return repr(text) if len(text) <= limit else repr(text[:limit - 3] + "...")


def _exact(value: Decimal) -> Fraction:
    return Fraction(0) if value < _TINY else Fraction(value)


def _too_large(text: str) -> ValueError:
    return ValueError(f"capacity {typed(text, 40)} is more than {format_bytes(MAX_BYTES)} ({MAX_BYTES} bytes), "
                      "the most any size may be; give the device memory to emulate, e.g. 80GiB or 50%")


def format_bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def format_ns(ns: float) -> str:
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{int(ns)} ns"
