"""Byte quantities as people type them: `4GiB`, `512MB`, `1.5e9`, or `50%` of a footprint."""

from __future__ import annotations

import re

# The most bytes any size may be (a capacity, a footprint, a tensor): about a thousand times any GPU's
# memory, so a larger one is a typo or a hostile file, and exact as a float (what --capacity 3e9 goes through).
MAX_BYTES = 2**50

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z%]*)\s*$")


def parse_bytes(text: str, footprint: int | None = None) -> int:
    """Parse a capacity; `%` needs the footprint it is a share of. Raises ValueError with the fix."""
    match = _PATTERN.match(str(text))
    if not match:
        raise ValueError(f"capacity {text!r} is not a size: write bytes, e.g. 4GiB, 512MiB, 3e9 or 50%")
    value, unit = float(match.group(1)), match.group(2).lower()
    if unit == "%":
        if footprint is None:
            raise ValueError(f"capacity {text!r} is a share, but no footprint is known to take it of")
        if not 0 < value <= 1000:
            raise ValueError(f"capacity {text!r}: a share must be above 0% (and at most 1000%)")
        return int(footprint * value / 100)
    if unit not in _UNITS:
        raise ValueError(f"capacity {text!r}: unknown unit {match.group(2)!r}; use B, KB, MB, GB, "
                         "KiB, MiB, GiB, TiB or %")
    nbytes = int(value * _UNITS[unit])
    if nbytes <= 0:
        raise ValueError(f"capacity {text!r} must be more than 0 bytes")
    return nbytes


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
        return f"{ns / 1e3:.1f} us"
    return f"{int(ns)} ns"
