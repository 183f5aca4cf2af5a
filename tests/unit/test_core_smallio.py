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


def _read_file(path) -> bytes | None:
    n = ffi.new("size_t *")
    p = lib.sq_read_file(str(path).encode(), n)
    if p == ffi.NULL:
        return None
    try:
        assert p[n[0]] == b"\0"                 # NUL-terminated after its n bytes
        return ffi.unpack(p, n[0])
    finally:
        lib.sq_str_free(p)


def test_read_file_reads_all_of_a_file_bigger_than_the_first_buffer(tmp_path):
    f = tmp_path / "mountinfo"
    data = bytes(range(256)) * 1024             # 256 KiB with NULs (an environ block)
    f.write_bytes(data)
    assert _read_file(f) == data


def test_read_file_of_an_empty_file_is_empty_and_of_a_missing_one_null(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    assert _read_file(tmp_path / "empty") == b""
    assert _read_file(tmp_path / "missing") is None


def test_read_all_leaves_the_descriptor_open(tmp_path):
    f = tmp_path / "record"
    f.write_text("1 2\n")
    fd = os.open(f, os.O_RDONLY)
    try:
        n = ffi.new("size_t *")
        p = lib.sq_read_all(fd, n)
        assert ffi.unpack(p, n[0]) == b"1 2\n"
        lib.sq_str_free(p)
        os.fstat(fd)                            # still open: the caller's
    finally:
        os.close(fd)


def test_write_record_replaces_the_record_whole_and_private(tmp_path):
    rec = tmp_path / "keeper-7.0"
    rec.write_text("old record that is longer\n")
    assert lib.sq_write_record(str(rec).encode(), b"123 456\n") == 0
    assert rec.read_text() == "123 456\n"
    assert rec.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["keeper-7.0"]   # no temporary left


def test_write_record_never_writes_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    rec = tmp_path / "running-job"
    # a link where the record goes, and one at every temporary name it might use
    rec.symlink_to(victim)
    (tmp_path / f"running-job.tmp.{os.getpid()}").symlink_to(victim)
    assert lib.sq_write_record(str(rec).encode(), b"1 2\n") == 0
    assert victim.read_text() == "precious\n"
    assert not rec.is_symlink() and rec.read_text() == "1 2\n"


def test_write_record_in_a_missing_directory_fails(tmp_path):
    assert lib.sq_write_record(str(tmp_path / "gone" / "rec").encode(), b"x\n") == -1
