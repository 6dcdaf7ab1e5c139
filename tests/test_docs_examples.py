"""The example commands in README.md and docs/cli.md run as the pages say, and the pages' links lead somewhere.

An example is a line of a fenced code block (one with no language, or `shell`/`console`) that starts with
`vmexplorer ` or `$ vmexplorer `. Under a `$ ` line, the lines up to the next command or the end of the block
are what the command prints, and must be exactly what it prints now. A page's examples run in order, in one
temporary folder where `sample_sessions/` is the checkout's, so that a later example reads what an earlier
one wrote. Each must exit with status 0, except:

- `vmexplorer run ...` needs an NVIDIA GPU: on a machine without CuPy it must print the documented one-line
  "no GPU" error and exit with status 2 (where CuPy is installed, the GPU tests run it instead);
- `vmexplorer serve ...` is started on a free port, must answer HTTP at the URL it prints, and must stop
  with status 0 on SIGTERM.

The two set-up commands in the README are not examples (they start with `[ -x`): CI runs one of them.
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from vmexplorer.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/cli.md")
LANGUAGES = ("", "shell", "console")  # fenced blocks whose lines may be commands
NO_GPU = re.compile(r"vmexplorer: error: (the GPU engine needs CuPy for CUDA 13 \(pip install -e '\.\[gpu\]'\); "
                    r"it could not be imported: .+"
                    r"|no NVIDIA GPU is visible to CUDA|no usable NVIDIA GPU or driver: .+)")
COMMAND_S = 120
SERVE_START_S = 120
# files a page links to before they are made: remove each once it is in the repository
PENDING: dict[str, str] = {}


@dataclass(frozen=True)
class Example:
    doc: str
    line: int  # 1-based, in the doc
    argv: tuple[str, ...]  # after `vmexplorer`
    shown: tuple[str, ...] | None  # the output the doc shows under a `$ ` line, or None

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: vmexplorer {shlex.join(self.argv)}"


def examples(doc: str) -> list[Example]:
    """The example commands of a page, in order."""
    found: list[Example] = []
    fence: str | None = None  # the open block's language; None outside blocks
    current: tuple[int, tuple[str, ...]] | None = None  # a `$ ` command whose shown output is being read
    shown: list[str] = []

    def close() -> None:
        nonlocal current
        if current is not None:
            found.append(Example(doc, current[0], current[1], tuple(shown)))
            current = None

    for number, line in enumerate((ROOT / doc).read_text().splitlines(), start=1):
        if line.startswith("```"):
            close()
            fence = line[3:].strip() if fence is None else None
            continue
        if fence not in LANGUAGES:
            continue
        prompt = line.startswith("$ vmexplorer ")
        if prompt or line.startswith("vmexplorer "):
            close()
            argv = tuple(shlex.split(line.removeprefix("$ "), comments=True)[1:])
            if prompt:
                current, shown = (number, argv), []
            else:
                found.append(Example(doc, number, argv, None))
        elif current is not None:
            shown.append(line)
    close()
    return found


def _vmexplorer(argv: tuple[str, ...] | list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vmexplorer", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=COMMAND_S, stdin=subprocess.DEVNULL)


def _problem(example: Example, cwd: Path) -> str | None:
    """What is wrong with running `example` in `cwd` as its page says, or None."""
    done = _vmexplorer(example.argv, cwd)
    said = f"exit status {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
    if example.argv[0] == "run":
        lines = done.stderr.splitlines()
        if done.returncode != 2 or len(lines) != 1 or not NO_GPU.fullmatch(lines[0]):
            return f"expected the one-line no-GPU error and exit status 2; {said}"
        return None
    if done.returncode != 0:
        return said
    if example.shown is not None and done.stdout.rstrip("\n").splitlines() != list(example.shown):
        return "the page shows:\n" + "\n".join(example.shown) + "\nthe command prints:\n" + done.stdout
    return None


@pytest.mark.parametrize("doc", DOCS)
def test_every_example_command_runs_as_the_page_says(doc: str, tmp_path: Path) -> None:
    found = [e for e in examples(doc) if e.argv[0] != "serve"]
    assert found, f"{doc} has no example commands"
    if any(e.argv[0] == "run" for e in found) and importlib.util.find_spec("cupy") is not None:
        found = [e for e in found if e.argv[0] != "run"]  # with CuPy there may be a GPU: tests/gpu runs the engine
    (tmp_path / "sample_sessions").symlink_to(ROOT / "sample_sessions")
    problems = [f"{e}\n{p}" for e in found if (p := _problem(e, tmp_path)) is not None]
    assert not problems, "\n\n".join(problems)


def test_the_pages_show_an_example_of_every_command() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    shown = {e.argv[0] for e in examples("docs/cli.md")}
    assert set(sub.choices) <= shown, f"docs/cli.md has no example of {sorted(set(sub.choices) - shown)}"


def _serve_examples() -> list[Example]:
    distinct: dict[tuple[str, ...], Example] = {}
    for doc in DOCS:
        for e in examples(doc):
            if e.argv[0] == "serve":
                distinct.setdefault(e.argv, e)
    return list(distinct.values())


def _on_a_free_port(argv: tuple[str, ...]) -> list[str]:
    """The example's arguments with `--port 0` (any free port) in place of its own or the default."""
    out, rest = [], list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--port":
            rest.pop(0)
        elif not arg.startswith("--port="):
            out.append(arg)
    return [*out, "--port", "0"]


@pytest.mark.parametrize("example", _serve_examples(), ids=str)
def test_every_serve_example_answers_http_and_stops(example: Example, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vmexplorer", *_on_a_free_port(example.argv)], cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        end, url = time.monotonic() + SERVE_START_S, None
        while url is None:
            found = re.search(r"serving the app at (http://\S+)", log.read_text())
            url = found.group(1) if found else None
            if url is None and (proc.poll() is not None or time.monotonic() > end):
                pytest.fail(f"{example} did not start (exit status {proc.poll()}):\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        where = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection("127.0.0.1", where.port, timeout=60)
        conn.request("GET", where.path)
        answer = conn.getresponse()
        answer.read()
        conn.close()
        assert answer.status == 200, f"{example}: GET {url} answered {answer.status}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-3000:]
        assert f"stopped serving {url}" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    lines, inside = [], False
    for line in page.read_text().splitlines():
        inside = inside != line.startswith("```")
        if not inside and line.startswith("#"):
            lines.append(line.lstrip("#"))
    return {_slug(h) for h in lines}


@pytest.mark.parametrize("doc", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))])
def test_every_link_of_a_page_leads_to_a_file_and_heading_that_exist(doc: str) -> None:
    page = ROOT / doc
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if where.is_relative_to(ROOT) and str(where.relative_to(ROOT)) in PENDING:
            continue
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{doc}: " + "; ".join(broken)
