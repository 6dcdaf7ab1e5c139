"""Writing output files so that a failure never leaves half a file or loses the one already there.

Every file vmexplorer writes (sessions, traces, HTML pages) goes through `atomic_write`: the bytes go
to a temporary file beside the target, which then replaces the target in one rename. A crash, a full
disk or a Ctrl-C leaves either the old file or the new one, never a mixture. Only a regular file is
ever replaced: `--out /dev/null --force` run as root must not rename a file over the device node, and
a symbolic link or a named pipe in the way is more likely a mistake (or a trap) than a target.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path


class OutputError(ValueError):
    """An output file cannot be written: the message names the path and the fix."""


def atomic_write(path: str | os.PathLike[str], data: bytes | Iterable[bytes], force: bool = False) -> None:
    """Write `data` (bytes, or pieces of them, so a large export need not be in memory at once) to
    `path`; an existing file is refused unless `force`, and kept on any failure."""
    target = Path(path)
    refuse_unless_replaceable(target, force)
    folder = target.parent
    if not folder.is_dir():
        raise OutputError(f"cannot write {target}: the folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".partial")
    except OSError as e:
        raise OutputError(f"cannot write {target}: {e.strerror or e} (in {folder})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in (data,) if isinstance(data, bytes) else data:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file private (0600); a shared session or trace should read like any other
        # file, and a replaced file keeps the permissions its owner gave it.
        os.chmod(tmp, _mode_of(target))
        if force:
            refuse_unless_replaceable(target, force)  # again: something else may have taken the name
            os.replace(tmp, target)
        else:
            _place_without_clobbering(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, FileExistsError):
            raise OutputError(f"{target} exists; pass --force to replace it") from None
        if isinstance(e, OSError):
            raise OutputError(f"cannot write {target}: {e.strerror or e}") from None
        raise


def refuse_unless_replaceable(path: str | os.PathLike[str], force: bool) -> None:
    """Raise OutputError unless `path` is free to write: missing, or (with `force`) a regular file.
    The link itself is examined (lstat), so a symbolic link is refused even where it points to a file."""
    target = Path(path)
    try:
        mode = os.lstat(target).st_mode
    except OSError:  # missing, or a path through a file ("afile/s.vms"): writing it will say why
        return
    if stat.S_ISDIR(mode):
        raise OutputError(f"{target} is a folder; give the name of a file to write")
    if not stat.S_ISREG(mode):
        raise OutputError(f"{target} exists and is {_kind_of(mode)}, not a regular file; vmexplorer replaces only "
                          "regular files, even with --force: give the name of a file to write")
    if not force:
        raise OutputError(f"{target} exists; pass --force to replace it")


def _kind_of(mode: int) -> str:
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "something else"


def _mode_of(target: Path) -> int:
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        return 0o644


def _place_without_clobbering(tmp: str, target: Path) -> None:
    """Rename unless someone created the target since we checked: a hard link fails if it exists."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise
    except OSError:
        # file systems without hard links (FAT, some network mounts): the earlier check must do
        if target.exists():
            raise FileExistsError(str(target)) from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)
