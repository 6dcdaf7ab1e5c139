"""The raw recording passes of a set, kept as one archive in the repository.

    python -m bench.passes pack DIR         DIR (pass1, pass2, ...) becomes DIR.tar; DIR is removed
    python -m bench.passes unpack DIR       prints the folder DIR.tar's passes are unpacked in

A set is tens of passes of tens of sessions each (`bench/gpu/record_samples.py`), hundreds of small files
that nothing edits once the samples are picked and the passes reduced (`bench/pick_samples.py`,
`bench/reduce_passes.py`, which work on the folder). So each set is committed as one tar, uncompressed
(its sessions are gzip already), written the same way from the same files (members sorted, no owners,
times or modes of this machine). Whatever reads a set asks `folder(DIR)`: DIR itself while it is a
folder, else DIR.tar unpacked once into a cache (`VMEXPLORER_BENCH_CACHE`, else the user's cache
folder), under the archive's digest, so a changed archive is never read stale and a half-unpacked one
never read at all.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DONE = ".unpacked"  # written last into an unpacked set: the mark that it is whole


def archive_of(folder: Path) -> Path:
    """Where the set `folder` is kept once packed."""
    return folder.with_name(folder.name + ".tar")


def cache_root() -> Path:
    """`VMEXPLORER_BENCH_CACHE`, else the user's cache folder, else (none writable) one in the temp folder."""
    given = os.environ.get("VMEXPLORER_BENCH_CACHE")
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        return Path(given)
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vmexplorer-bench"
        base.mkdir(parents=True, exist_ok=True)
        return base
    except (OSError, RuntimeError):  # no home, or a read-only one
        base = Path(tempfile.gettempdir()) / f"vmexplorer-bench-{os.getuid()}"
        base.mkdir(mode=0o700, exist_ok=True)
        return base


def folder(path: Path) -> Path:
    """The folder of the set at `path`: `path` itself where it is a folder (or where nothing is there),
    else its archive unpacked."""
    archive = archive_of(path)
    if path.is_dir() or not archive.is_file():
        return path
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
    where = cache_root() / f"{path.name}-{digest}"
    if not (where / DONE).is_file():
        scratch = Path(tempfile.mkdtemp(prefix=f"{path.name}-", dir=where.parent))
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        (scratch / DONE).write_text(archive.name + "\n")
        try:
            scratch.rename(where)
        except OSError:  # another process unpacked it first, or a stale half remains: keep the whole one
            if not (where / DONE).is_file():
                shutil.rmtree(where, ignore_errors=True)
                scratch.rename(where)
            else:
                shutil.rmtree(scratch, ignore_errors=True)
    return where


def pack(path: Path) -> Path:
    """Write the set `path` (a folder of pass folders) as its archive, then remove the folder."""
    files = sorted(p for p in path.rglob("*") if p.is_file())
    if not files:
        raise ValueError(f"{path} holds no files")
    archive = archive_of(path)
    scratch = archive.with_name(archive.name + ".partial")
    with tarfile.open(scratch, "w", format=tarfile.PAX_FORMAT) as tar:
        for p in files:
            data = p.read_bytes()
            info = tarfile.TarInfo(p.relative_to(path).as_posix())
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    scratch.replace(archive)  # whole, or not there at all
    shutil.rmtree(path)
    return archive


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("pack", "unpack"))
    ap.add_argument("set", type=Path, help="the set's folder (pass1, pass2, ... inside), packed or not")
    args = ap.parse_args(argv)
    path = args.set.resolve()
    if args.action == "pack":
        if not path.is_dir():
            print(f"{args.set} is not a folder of passes", file=sys.stderr)
            return 2
        print(pack(path))
        return 0
    if not path.is_dir() and not archive_of(path).is_file():
        print(f"neither {args.set} nor {archive_of(args.set)} is there", file=sys.stderr)
        return 2
    print(folder(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
