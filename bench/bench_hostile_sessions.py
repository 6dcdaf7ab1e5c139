"""Peak memory and time of every tool that opens a session, on the worst files the loader's limits allow.

A session is untrusted input, and its memory must be bounded by what a file can make, not only by its
size (docs/session-format.md, "Memory"). This builds, in a temporary folder:
- the two compression bombs the issue reported (200 MB and 1 GB of `{},`, 194 KB and 962 KB gzipped);
- the worst texts within the limits for each kind of JSON value: two-character strings (ASCII, and
  emoji, which make Python store the whole text at 4 bytes a character), floats, large integers, one
  long string, one object with two million keys, ten thousand empty objects, nesting too deep to parse;
- the largest real-looking sessions: measured samples with their iterations repeated until the values
  are just under the limit (ResNet-50 and VGG-19 under `uvm`, every collector on);
and runs `vmexplorer info`, `export --html`, `export --chrome-trace`, `compare F F` and the app's upload
(a Page, as a served page has, handed the file as the upload widget hands it) on each, each in a
process of its own, measuring its peak resident memory (the child's ru_maxrss, read by a small
intermediate process so that nothing of this one's memory is counted) and its time.

    python -m bench.bench_hostile_sessions [--out bench/results/hostile_sessions.txt]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_sessions"
LIMIT_MB = 1024

# Runs argv[1:] and prints its peak RSS (KiB), wall time and exit status as JSON: started from a small
# process, the child's ru_maxrss counts nothing of the parent's memory at the fork.
MEASURE = """
import json, os, subprocess, sys, time
t = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read().decode(errors="replace")
_, status, usage = os.wait4(p.pid, 0)
print(json.dumps({"rss_kib": usage.ru_maxrss, "seconds": time.monotonic() - t,
                  "status": os.waitstatus_to_exitcode(status), "stderr": err.strip()[-300:]}))
"""

# The app's upload path: the page a server holds (a Page over the default sample), then the file as
# the FileInput widget hands it over.
UPLOAD = """
import sys
from pathlib import Path
from vmexplorer.ui.page import Page
view = Page()
path = Path(sys.argv[1])
view.files.upload.filename = path.name
view.files._on_upload(path.read_bytes())
print("vmexplorer: error: " + view.state.message if view.state.message else view.state.status, file=sys.stderr)
sys.exit(2 if view.state.message else 0)
"""


def peak(argv: list[str]) -> dict[str, object]:
    # from the checkout's root, so that `-m vmexplorer` and the upload's `-c` import its vmexplorer
    done = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True, check=True, cwd=ROOT)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def hostile_texts() -> dict[str, bytes]:
    """The JSON texts, before gzip. The limits: 48 MiB of text, 4,000,000 values, 10,000 containers."""
    from vmexplorer.session.files import MAX_CONTAINERS, MAX_JSON_BYTES, MAX_VALUES

    head, tail = b'{"format":"vmexplorer-session","schema_version":6,"x":[', b"0]}"
    room = MAX_JSON_BYTES - len(head) - len(tail) - 16

    def fill(unit: bytes, values: int = MAX_VALUES - 16) -> bytes:
        return head + unit * min(values, room // len(unit)) + tail

    emoji = "\U0001F600".encode()
    return {
        "the issue's 194 KB bomb ({} x 66M)": b"[" + b"{}," * 66_666_666 + b"{}]",
        "the issue's 962 KB bomb ({} x 333M)": b"[" + b"{}," * 333_333_333 + b"{}]",
        "2-char strings, ASCII": fill(b'"ab",'),
        "2-char strings, emoji": fill(b'"' + emoji * 2 + b'",'),
        "floats": fill(b"0.5,"),
        "large integers": fill(b"123456789012345678,"),
        "one ASCII string": head + b'"' + b"a" * room + b'"' + tail[1:],
        "one emoji string": head + b'"' + emoji * (room // 4) + b'"' + tail[1:],
        "one object, 2M keys": b'{"format":"vmexplorer-session","schema_version":6,"x":{'
                               + b",".join(b'"k%d":0' % i for i in range(MAX_VALUES // 2 - 8)) + b"}}",
        "10,000 empty objects": fill(b"{},", MAX_CONTAINERS - 8),
        "nesting 5,000 deep": b"[" * 5000 + b"]" * 5000,
    }


def tiled(sample: Path, target_values: int) -> bytes:
    """A measured sample with its iterations repeated back to back (times shifted, every iteration
    counted) until it holds just under `target_values` values: the largest real-looking session."""
    doc = json.loads(gzip.decompress(sample.read_bytes()))
    tl = doc["timeline"]
    n = len(set(tl["ops"]["columns"]["iteration"]))
    span = max(tl["ops"]["columns"]["end_ns"] + tl["memops"]["columns"]["end_ns"]) + 1000

    def text(d: dict[str, object]) -> bytes:
        return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()

    def values(b: bytes) -> int:
        return 1 + b.count(b"{") + b.count(b"[") + b.count(b",") + b.count(b":")

    base = values(text(doc))
    tables = [(tl[t], ("start_ns", "end_ns")) for t in ("ops", "memops")] + [(tl["resident"], ("t_ns",))]
    if doc.get("collected"):
        c = doc["collected"]
        tables += [(c[t], ("start_ns", "end_ns")) for t in ("kernels", "um", "memcpy")] + [(c["nvml"], ("t_ns",))]
    per_copy = sum(t["rows"] * len(t["columns"]) for t, _ in tables)
    k = max(1, (target_values - base) // per_copy + 1)
    for table, times in tables:
        cols = table["columns"]
        for name, v in cols.items():
            if name == "iteration":
                cols[name] = [x + j * n for j in range(k) for x in v]
            elif name in times:
                cols[name] = [x + j * span for j in range(k) for x in v]
            else:
                cols[name] = v * k
        table["rows"] *= k
    tl["counted_iterations"] = 0
    return text(doc)


def make(folder: Path) -> list[tuple[str, Path]]:
    from vmexplorer.session.files import MAX_VALUES

    files = []
    for i, (name, text) in enumerate(hostile_texts().items()):
        path = folder / f"hostile-{i}.vms"
        path.write_bytes(gzip.compress(text, compresslevel=9, mtime=0))
        files.append((name, path))
    for sample in ("resnet50-b64-uvm-50pct.measured.vms", "vgg19-b64-uvm-50pct.measured.vms"):
        path = folder / f"largest-{sample}"
        path.write_bytes(gzip.compress(tiled(SAMPLES / sample, MAX_VALUES - 150_000), mtime=0))
        files.append((f"largest real: {sample.split('.')[0]}, repeated", path))
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--make", type=Path, help=argparse.SUPPRESS)  # the child that writes the files
    args = parser.parse_args()
    if args.make:
        print(json.dumps([(name, str(path)) for name, path in make(args.make)]))
        return 0
    lines = [f"# bench/bench_hostile_sessions.py on {platform.node()} ({platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}); limit {LIMIT_MB} MB per tool",
             "", "| file | gzip | JSON | tool | outcome | peak RSS | time |", "|---|---:|---:|---|---|---:|---:|"]
    worst = 0.0
    with tempfile.TemporaryDirectory() as d:
        # the files are made by a child, so this process stays small
        made = subprocess.run([sys.executable, "-m", "bench.bench_hostile_sessions", "--make", d], capture_output=True,
                              text=True, check=True, cwd=ROOT)
        out = Path(d) / "out"
        for name, path_text in json.loads(made.stdout):
            path = Path(path_text)
            size = len(gzip.decompress(path.read_bytes()))
            tools = {"info": ["-m", "vmexplorer", "info", str(path)],
                     "export --html": ["-m", "vmexplorer", "export", str(path), "--html", str(out), "--force"],
                     "export --chrome-trace": ["-m", "vmexplorer", "export", str(path), "--chrome-trace", str(out),
                                               "--force"],
                     "compare F F": ["-m", "vmexplorer", "compare", str(path), str(path)],
                     "app upload": ["-c", UPLOAD, str(path)]}
            for tool, argv in tools.items():
                r = peak([sys.executable, *argv])
                mb = int(r["rss_kib"]) / 1024  # type: ignore[call-overload]
                worst = max(worst, mb)
                last = str(r["stderr"]).splitlines()[-1] if r["stderr"] else ""
                # the refusal, without the file's path: "...: <what is wrong>"
                outcome = "opened" if r["status"] == 0 else "refused: " + last.split(".vms", 1)[-1].lstrip(": ")[:90]
                lines.append(f"| {name} | {path.stat().st_size / 1e3:,.0f} KB | {size / 2**20:.1f} MiB | {tool} | "
                             f"{outcome.replace('|', '/')} (exit {r['status']}) | {mb:,.0f} MB | "
                             f"{float(r['seconds']):.1f} s |")  # type: ignore[arg-type]
                print(lines[-1], flush=True)
    lines += ["", f"worst peak: {worst:,.0f} MB ({'within' if worst <= LIMIT_MB else 'OVER'} the {LIMIT_MB} MB limit)"]
    print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0 if worst <= LIMIT_MB else 1


if __name__ == "__main__":
    sys.exit(main())
