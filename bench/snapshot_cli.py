"""A snapshot of everything the command line prints and writes, to prove a refactoring changed nothing.

Runs a fixed script of `vmexplorer` commands (every command; several models, policies and capacities;
the sample sessions; a few refusals) in fresh processes and records, per command, the exit status,
stdout, stderr and a digest of every file it wrote; then re-saves every sample session through the
loader and the writer and records a digest of the bytes. Run it before a change and after, and
compare:

    python -m bench.snapshot_cli --out /tmp/before.json
    ...change...
    python -m bench.snapshot_cli --out /tmp/after.json && cmp /tmp/before.json /tmp/after.json

What differs between two runs of the same code is normalised, and only that: a session's `created`
time, Bokeh's random element ids in an HTML export, and the temporary folder's name.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_sessions").glob("*.vms"))
MODELS = ("alexnet", "vgg11", "vgg19", "resnet18", "resnet50")
POLICY_ARGS: tuple[tuple[str, str, list[str]], ...] = (
    ("device", "100%", []),
    ("uvm", "60%", []),
    ("uvm", "75%", []),
    ("autovm", "60%", []),
    ("autovm", "60%", ["--offload", "all", "--prefetch-distance", "2"]),
    ("manual", "70%", []),
)
MOVES = {"moves": [{"tensor": "features.1.out", "offload_after": "features.2",
                    "prefetch_after": "features.3.backward"},
                   {"tensor": 3, "offload_after": 5, "prefetch_after": None}]}


def commands(tmp: Path) -> list[list[str]]:
    sample = str(SAMPLES[0])
    vgg = [s for s in SAMPLES if s.name.startswith("vgg19")]
    cmds: list[list[str]] = [["models"], ["models", "--format", "json"],
                             ["models", "--batch", "32", "--image-size", "128", "--format", "json"]]
    for m in MODELS:
        cmds.append(["graph", "--model", m, "--batch", "32", "--format", "json"])
        cmds.append(["graph", "--model", m, "--batch", "8", "--image-size", "64"])
        for policy, capacity, extra in POLICY_ARGS:
            args = ["--model", m, "--batch", "32", "--capacity", capacity, "--policy", policy, *extra]
            cmds.append(["plan", *args, "--format", "json"])
        cmds.append(["plan", "--model", m, "--batch", "16", "--capacity", "60%", "--policy", "autovm"])
    cmds.append(["plan", "--model", "vgg19", "--batch", "64", "--capacity", "50%", "--policy", "manual",
                 "--moves", str(tmp / "moves.json"), "--format", "json"])
    for m in ("vgg19", "resnet50"):
        for policy in ("uvm", "autovm", "manual"):
            out = tmp / f"{m}-{policy}.vms"
            moves = ["--moves", str(tmp / "moves.json")] if policy == "manual" and m == "vgg19" else []
            cmds.append(["simulate", "--model", m, "--batch", "64", "--capacity", "50%", "--policy", policy,
                         *moves, "--out", str(out), "--note", "snapshot", "--format", "json"])
            cmds.append(["info", str(out), "--format", "json"])
            cmds.append(["export", str(out), "--chrome-trace", str(out.with_suffix(".trace.json"))])
    for s in SAMPLES:
        cmds.append(["info", str(s), "--format", "json"])
        cmds.append(["info", str(s)])
    device = next(str(s) for s in vgg if "device" in s.name)
    for s in vgg[:3]:
        cmds.append(["calibrate", str(s), "--device", device, "--out", str(tmp / f"cal-{s.name}"),
                     "--format", "json"])
        cmds.append(["export", str(s), "--chrome-trace", str(tmp / f"{s.name}.trace.json")])
    cmds.append(["export", sample, "--html", str(tmp / "sample.html")])
    cmds.append(["compare", str(vgg[0]), str(vgg[-1]), "--format", "json"])
    cmds.append(["compare", str(vgg[1]), str(vgg[2]), "--top", "5"])
    cmds.append(["compare", str(tmp / "vgg19-uvm.vms"), str(tmp / "vgg19-autovm.vms"), "--format", "json"])
    cmds += [["plan", "--help"], ["simulate", "--help"], ["--help"],
             ["plan", "--model", "vgg19", "--batch", "64", "--capacity", "1%", "--policy", "uvm"],
             ["plan", "--model", "nope", "--batch", "64", "--capacity", "50%", "--policy", "uvm"],
             ["plan", "--model", "vgg19", "--batch", "64", "--capacity", "50%", "--policy", "device"],
             ["plan", "--model", "vgg19", "--batch", "64", "--capacity", "50%", "--policy", "uvm",
              "--prefetch-distance", "2"],
             ["info", str(tmp / "missing.vms")],
             ["run", "--model", "vgg19", "--batch", "64", "--capacity", "50%", "--policy", "uvm",
              "--out", str(tmp / "run.vms")]]
    return cmds


def without_created(text: str) -> str:
    return re.sub(r'"created": ?"[^"]*"', '"created": ""', text)


def normalised(path: Path, tmp: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    data = data.replace(str(tmp).encode(), b"TMP")
    data = re.sub(rb'"created": ?"[^"]*"', b'"created": ""', data)
    if path.suffix == ".html":
        data = re.sub(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", b"UUID", data)
    return data


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def resaved_samples() -> dict[str, str]:
    from vmexplorer.session import load_session, session_to_bytes

    return {s.name: digest(session_to_bytes(load_session(s))) for s in SAMPLES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the snapshot, as JSON")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "moves.json").write_text(json.dumps(MOVES))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "100"}
        for cmd in commands(tmp):
            before = set(tmp.iterdir())
            done = subprocess.run([sys.executable, "-m", "vmexplorer", *cmd], capture_output=True, env=env,
                                  cwd=ROOT, timeout=600, check=False)
            written = sorted(set(tmp.iterdir()) - before)
            results.append({
                "command": [c.replace(str(tmp), "TMP") for c in cmd],
                "rc": done.returncode,
                "stdout": without_created(done.stdout.decode().replace(str(tmp), "TMP")),
                "stderr": done.stderr.decode().replace(str(tmp), "TMP"),
                "files": {p.name: digest(normalised(p, tmp)) for p in written},
            })
            print(done.returncode, " ".join(results[-1]["command"])[:110], file=sys.stderr)
    snapshot = {"commands": results, "resaved_samples": resaved_samples()}
    args.out.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
