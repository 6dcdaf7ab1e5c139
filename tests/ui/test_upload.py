"""The page's file input: a file sent in pieces arrives whole, or is refused in words; nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from vmexplorer.ui.upload import FileUpload


class Got:
    def __init__(self) -> None:
        self.files: list[tuple[bytes, str]] = []
        self.refusals: list[str] = []

    def upload(self, **params: Any) -> FileUpload:
        return FileUpload(on_file=lambda data, name: self.files.append((data, name)),
                          on_refused=self.refusals.append, **params)


def pieces(data: bytes, size: int, name: str = "run.vms") -> list[dict[str, Any]]:
    chunks = [data[i:i + size] for i in range(0, len(data), size)] or [b""]
    return [{"kind": "part", "name": name, "size": len(data), "index": i, "count": len(chunks),
             "data": c} for i, c in enumerate(chunks)]


def test_a_file_sent_in_pieces_arrives_whole_under_its_name() -> None:
    got = Got()
    upload = got.upload(chunk_bytes=4)
    data = bytes(range(10))
    for msg in pieces(data, 4):
        upload._handle_msg(msg)
    for msg in pieces(b"", 4, "empty.vms"):
        upload._handle_msg(msg)
    assert got.files == [(data, "run.vms"), (b"", "empty.vms")] and got.refusals == []


def test_a_file_the_browser_found_too_large_is_refused_with_its_size_and_the_limit() -> None:
    got = Got()
    got.upload(max_bytes=2**20)._handle_msg({"kind": "refused", "name": "<b>term</b>.vms", "size": 3 * 2**20})
    assert got.refusals == ['"<b>term</b>.vms" is 3.00 MiB: the largest file the page takes is 1.00 MiB']


@pytest.mark.parametrize("spoil", [
    lambda ms: [ms[0], ms[2], ms[1]],  # out of order
    lambda ms: ms[1:],  # its first piece lost
    lambda ms: [{**ms[0], "data": "AAAA"}, *ms[1:]],  # text, not bytes
    lambda ms: [{**m, "size": 4} for m in ms],  # more bytes than it said
    lambda ms: [{**m, "size": 11} for m in ms],  # fewer bytes than it said
    lambda ms: [{**m, "size": 2**40} for m in ms],  # more than the page takes, past the browser's check
    lambda ms: [{**m, "index": "0"} for m in ms],
])
def test_pieces_that_do_not_make_the_file_they_say_are_refused_and_nothing_is_opened(spoil: Any) -> None:
    got = Got()
    upload = got.upload(chunk_bytes=4)
    for msg in spoil(pieces(bytes(10), 4)):
        upload._handle_msg(msg)
    assert got.files == [] and got.refusals and "did not arrive whole" in got.refusals[0]
    for msg in pieces(b"again", 4):  # and the next file arrives
        upload._handle_msg(msg)
    assert got.files == [(b"again", "run.vms")]


def test_messages_that_are_not_pieces_are_ignored_and_a_long_name_is_cut() -> None:
    got = Got()
    upload = got.upload()
    for msg in (None, "part", 3, {"kind": "something"}, {}):
        upload._handle_msg(msg)
    assert got.files == [] and got.refusals == []
    upload._handle_msg({"kind": "unreadable", "name": "x" * 10_000, "size": 1})
    assert len(got.refusals) == 1 and len(got.refusals[0]) < 300
