"""A generated section of a document, checked against what its script makes now."""

from __future__ import annotations

import difflib

DIFF_LINES = 80  # enough to name every changed figure in a CI log, not the whole document


def check(committed: str, made: str, command: str) -> int:
    """0 and "up to date" where the document holds what was made now; else 1, the command that makes it
    and the lines that differ, so that a log from another machine shows which figure moved."""
    if made == committed:
        print("up to date")
        return 0
    print(f"out of date: run {command}")
    diff = list(difflib.unified_diff(committed.splitlines(keepends=True), made.splitlines(keepends=True),
                                     "committed", "made now", n=0))
    print("".join(diff[:DIFF_LINES]), end="")
    if len(diff) > DIFF_LINES:
        print(f"... and {len(diff) - DIFF_LINES} more lines of difference")
    return 1
