"""docs/api.md runs as written: its ```python blocks, in order, in one namespace, as a notebook would.

Each block is executed after the ones before it, so a later block uses what an earlier one made; a block
that raises fails the test naming it. Output is not checked: the page shows calls, not figures."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_api_pages_blocks_run_in_order() -> None:
    code = blocks(DOC.read_text(encoding="utf-8"))
    assert len(code) >= 6
    namespace: dict[str, object] = {"__name__": "api_doc"}
    printed = io.StringIO()
    for k, block in enumerate(code, start=1):
        with contextlib.redirect_stdout(printed):
            try:
                exec(compile(block, f"docs/api.md block {k}", "exec"), namespace)  # noqa: S102
            except Exception as e:
                raise AssertionError(f"docs/api.md's block {k} fails: {type(e).__name__}: {e}\n{block}") from e
    out = printed.getvalue()
    assert "the tuned policy searches its plan in the simulator" in out  # the refusal the page shows
    assert "tuned: from " in out  # the search's report, told through `report=print`


def test_the_api_module_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    probe = "import sys, vmexplorer.api; print(sorted(m for m in ('bokeh', 'panel', 'numpy') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
