"""squall.atomic_write: the one helper that replaces a file in place."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from squall.atomic_write import temp_name, write_atomic


def test_writes_the_data_with_the_mode_whatever_the_umask(tmp_path: Path):
    old = os.umask(0o077)
    try:
        write_atomic(tmp_path / "f", "héllo\n", 0o644)
    finally:
        os.umask(old)
    assert (tmp_path / "f").read_bytes() == "héllo\n".encode()
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["f"]


def test_replaces_an_existing_file_and_a_link_is_replaced_not_followed(tmp_path: Path):
    (tmp_path / "f").write_text("old")
    write_atomic(tmp_path / "f", b"new", fsync=False)
    assert (tmp_path / "f").read_text() == "new"
    (tmp_path / "elsewhere").write_text("kept")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    write_atomic(tmp_path / "link", b"x")
    assert (tmp_path / "elsewhere").read_text() == "kept"
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "link").read_text() == "x"


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path: Path):
    (tmp_path / "d").mkdir()  # renaming a file over a directory fails
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path / "d", b"data")
    assert sorted(os.listdir(tmp_path)) == ["d"] and (tmp_path / "d").is_dir()


def test_never_writes_through_an_existing_temporary_name(tmp_path: Path):
    (tmp_path / "target").write_text("theirs")
    tmp = tmp_path / "tmp"
    tmp.symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError):
        write_atomic(tmp_path / "f", b"data", tmp=tmp)
    assert (tmp_path / "target").read_text() == "theirs" and tmp.is_symlink()
    assert not (tmp_path / "f").exists()


def test_temp_name_says_whose_it_is(tmp_path: Path):
    name = temp_name(tmp_path / "x.json", ".building-").name
    assert name.startswith(".building-x.json.") and f".{os.getpid()}~" in name
    assert temp_name(tmp_path / "x") != temp_name(tmp_path / "x")
