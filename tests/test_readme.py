"""The figures in the docs are generated, not typed: each generated section of docs/results.md matches what
its script makes from the files in the repo now, and the README's summary quotes those sections. The
layout in docs/design.md names the package as it is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "docs/results.md"


@pytest.mark.parametrize("command", [
    ["-m", "bench.results_table", "--check"],  # its default is docs/results.md
    ["-m", "bench.validate_simulator", "--readme", RESULTS, "--check"],
    ["-m", "bench.goals_recompute", "--check"],  # bench/results/h200/goals_issue34.md
], ids=["measured results table", "simulator validation", "issue 34's goals"])
def test_a_generated_section_of_the_results_matches_its_script(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "up to date" in done.stdout


def test_every_figure_of_the_readme_summary_is_one_of_the_generated_results() -> None:
    readme = (ROOT / "README.md").read_text()
    summary = readme.split("## Results in brief", 1)[1].split("\n## ", 1)[0]
    sections = re.findall(r"<!-- ([\w-]+):start -->(.*?)<!-- \1:end -->", (ROOT / RESULTS).read_text(), flags=re.S)
    generated = "".join(body for _, body in sections)
    figures = re.findall(r"[+-]?\d[\d.,]*(?:-\d[\d.]*)?(?: ?(?:ms|GiB|MiB|x)\b|%)|\d+ of \d+", summary)
    assert len(figures) >= 10, figures
    missing = [f for f in figures if f not in generated]
    assert not missing, f"the README's summary quotes figures the generated results do not hold: {missing}"


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


def test_a_stale_section_is_reported_with_the_lines_that_moved(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.sections import check

    assert check("a\nworst +4.6%\nb\n", "a\nworst +4.6%\nb\n", "python -m bench.x") == 0
    assert capsys.readouterr().out == "up to date\n"
    assert check("a\nworst +4.6%\nb\n", "a\nworst +4.7%\nb\n", "python -m bench.x") == 1
    out = capsys.readouterr().out
    assert out.startswith("out of date: run python -m bench.x\n")
    assert "-worst +4.6%\n" in out and "+worst +4.7%\n" in out and "\na\n" not in out
