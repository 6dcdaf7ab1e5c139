"""The figures in the docs are generated, not typed: each generated section of docs/results.md matches what
its script makes from the files in the repo now. The layout in docs/design.md names the package as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [
    ["bench/results_table.py", "--check"],  # its default is docs/results.md
    ["bench/validate_simulator.py", "--readme", "docs/results.md", "--check"],
], ids=["measured results table", "simulator validation"])
def test_a_generated_section_of_the_results_matches_its_script(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "up to date" in done.stdout


def test_the_layout_section_names_every_package_and_module_of_the_tree_and_nothing_else() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    block = design.split("## Layout", 1)[1].split("```")[1]
    named: set[str] = set()
    for line in block.splitlines():
        head = line.split("  ")[0].strip()
        if head.startswith("vmexplorer/"):
            rest = head.removeprefix("vmexplorer/")
            named.update(part.strip() for part in rest.split(","))
    package = ROOT / "vmexplorer"
    tree = {p.name + "/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    tree |= {p.name for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    assert named == tree
