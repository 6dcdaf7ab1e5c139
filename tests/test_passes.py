"""bench/passes.py: a set of recording passes is kept as one archive, written the same way from the same
files, and read back as the folder it was, unpacked once, never half."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import passes


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("VMEXPLORER_BENCH_CACHE", str(where))
    return where


def _set(root: Path) -> Path:
    for k, text in ((1, "first"), (2, "second")):
        (root / f"pass{k}" / "cost_models").mkdir(parents=True)
        (root / f"pass{k}" / "a.measured.vms").write_text(text)
        (root / f"pass{k}" / "cost_models" / "b.vms").write_text(text * 2)
    return root


def test_a_packed_set_reads_back_as_the_folder_it_was_and_the_folder_is_gone(tmp_path: Path) -> None:
    root = _set(tmp_path / "repo" / "passes")
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    archive = passes.pack(root)
    assert archive == tmp_path / "repo" / "passes.tar" and not root.exists()
    back = passes.folder(root)
    assert {p.relative_to(back): p.read_bytes() for p in back.rglob("*") if p.is_file()
            and p.name != passes.DONE} == before
    assert passes.folder(root) == back  # unpacked once


def test_packing_the_same_files_twice_writes_the_same_bytes(tmp_path: Path) -> None:
    first = passes.pack(_set(tmp_path / "one" / "passes")).read_bytes()
    second = passes.pack(_set(tmp_path / "two" / "passes")).read_bytes()
    assert first == second


def test_a_folder_is_read_as_it_is_and_a_changed_archive_is_unpacked_again(tmp_path: Path) -> None:
    root = _set(tmp_path / "passes")
    assert passes.folder(root) == root
    passes.pack(root)
    old = passes.folder(root)
    _set(root)
    (root / "pass1" / "a.measured.vms").write_text("changed")
    passes.pack(root)
    new = passes.folder(root)
    assert new != old and (new / "pass1" / "a.measured.vms").read_text() == "changed"


def test_a_half_unpacked_set_is_not_read(tmp_path: Path, cache: Path) -> None:
    root = _set(tmp_path / "passes")
    passes.pack(root)
    where = passes.folder(root)
    (where / passes.DONE).unlink()
    (where / "pass2" / "a.measured.vms").unlink()  # as if unpacking stopped halfway
    again = passes.folder(root)
    assert again == where and (again / "pass2" / "a.measured.vms").read_text() == "second"


def test_the_command_refuses_what_is_not_a_set_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert passes.main(["pack", str(tmp_path / "nothing")]) == 2
    assert passes.main(["unpack", str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err


def test_with_no_writable_home_the_cache_is_in_the_temp_folder(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("VMEXPLORER_BENCH_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert passes.cache_root().parent == tmp_path
