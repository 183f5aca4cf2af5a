"""The core's small reads and writes (spank/core/smallio.c), driven through cffi."""

import os

from squall._core import ffi, lib


def test_read_text_reads_once_terminates_and_closes(tmp_path):
    f = tmp_path / "record"
    f.write_text("123 456\n")
    fd = os.open(f, os.O_RDONLY)
    buf = ffi.new("char[]", 5)
    assert lib.sq_read_text(fd, buf, 5) == 4
    assert ffi.string(buf) == b"123 "       # len - 1 bytes at most, NUL-terminated
    try:
        os.fstat(fd)
        raise AssertionError("the descriptor was left open")
    except OSError:
        pass


def test_read_text_of_nothing_is_an_empty_string():
    buf = ffi.new("char[]", b"stale")
    assert lib.sq_read_text(-1, buf, 6) == -1 and ffi.string(buf) == b""


def test_write_text_writes_an_existing_file_and_never_creates_one(tmp_path):
    f = tmp_path / "knob"
    f.write_text("")
    assert lib.sq_write_text(str(f).encode(), b"deny") == 0
    assert f.read_text() == "deny"
    assert lib.sq_write_text(str(tmp_path / "missing").encode(), b"x") == -1
    assert not (tmp_path / "missing").exists()
