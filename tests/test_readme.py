"""The README's figures are generated, not typed: each generated section matches what its script
makes from the files in the repo now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [
    ["bench/results_table.py", "--check"],
    ["bench/validate_simulator.py", "--readme", "README.md", "--check"],
], ids=["measured results table", "simulator validation"])
def test_a_generated_readme_section_matches_its_script(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "up to date" in done.stdout
