"""Opening what another user may have planted (spank/core/safeopen.c), via cffi.

A FIFO, a device, a socket or a directory where a file is expected is refused without being
opened (a FIFO opened for reading blocks until a writer comes), a link is not followed where
it must not be, and a directory root acts in is checked (type, owner, mode) through a
descriptor opened with O_NOFOLLOW. Every call here runs under a timeout: a blocking open
fails the test instead of hanging it.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
from pathlib import Path

import pytest

from squall._core import ffi, lib

AT_FDCWD = -100


@pytest.fixture(autouse=True)
def never_blocks():
    """An open that blocks (the bug) raises here after 5 s instead of hanging the run."""
    def expired(signum, frame):
        raise TimeoutError("blocked in the call under test")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def open_regular(path: Path | str, nofollow: bool = False,
                 dirfd: int = AT_FDCWD) -> tuple[int, int, int]:
    """(fd or -1, errno, mode)."""
    mode = ffi.new("unsigned int *")
    fd = lib.sq_open_regular(dirfd, str(path).encode(), lib.SQ_OPEN_NOFOLLOW if nofollow else 0,
                             mode)
    return fd, ffi.errno if fd < 0 else 0, mode[0]


def kind(mode: int) -> str:
    return ffi.string(lib.sq_file_kind(mode)).decode()


def planted(tmp_path: Path) -> dict[str, Path]:
    """One of each thing a hostile user can leave where a file is expected."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.close()
    (tmp_path / "dir").mkdir()
    return {"a FIFO (named pipe)": fifo, "a UNIX socket": sock_path,
            "a directory": tmp_path / "dir", "a character device": Path("/dev/null")}


def test_only_a_regular_file_is_opened_and_nothing_else_blocks(tmp_path):
    good = tmp_path / "img.sqsh"
    good.write_bytes(b"hsqs" + bytes(92))
    fd, _, mode = open_regular(good)
    assert fd >= 0 and stat.S_ISREG(mode)
    assert os.read(fd, 4) == b"hsqs"
    assert os.get_blocking(fd), "O_NONBLOCK is cleared on the returned descriptor"
    os.close(fd)
    for what, path in planted(tmp_path).items():
        fd, err, mode = open_regular(path)
        assert fd == -1 and err == errno.EINVAL, (what, fd, err)
        assert kind(mode) == what


def test_a_link_is_followed_only_when_allowed(tmp_path):
    good = tmp_path / "img.sqsh"
    good.write_bytes(b"hsqs")
    link = tmp_path / "link.sqsh"
    link.symlink_to(good)
    fd, _, _ = open_regular(link)
    assert fd >= 0
    os.close(fd)
    fd, err, mode = open_regular(link, nofollow=True)
    assert fd == -1 and err == errno.EINVAL and kind(mode) == "a symbolic link"
    # A link to a FIFO is refused by what it points at, without opening it.
    fifo_link = tmp_path / "fifo-link"
    fifo_link.symlink_to(planted(tmp_path)["a FIFO (named pipe)"])
    fd, err, mode = open_regular(fifo_link)
    assert fd == -1 and kind(mode) == "a FIFO (named pipe)"


def test_missing_file_and_relative_to_a_directory(tmp_path):
    fd, err, mode = open_regular(tmp_path / "none")
    assert fd == -1 and err == errno.ENOENT and mode == 0
    (tmp_path / "rec").write_text("x")
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd, _, _ = open_regular("rec", nofollow=True, dirfd=dfd)
        assert fd >= 0
        os.close(fd)
        fd, err, _ = open_regular("none", nofollow=True, dirfd=dfd)
        assert fd == -1 and err == errno.ENOENT
    finally:
        os.close(dfd)


def test_kinds_for_messages():
    assert kind(stat.S_IFBLK | 0o600) == "a block device"
    assert kind(stat.S_IFREG) == "a regular file"
    assert kind(0) == "a file of an unknown type"


def dir_open(path: Path, owner: int = -1) -> tuple[int, str]:
    err = ffi.new("char[512]")
    fd = lib.sq_dir_open_checked(AT_FDCWD, str(path).encode(), owner, err, 512)
    return fd, ffi.string(err).decode()


def dir_make(parent: Path, name: str, uid: int, gid: int,
             mode: int = 0o700) -> tuple[int, str]:
    err = ffi.new("char[512]")
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = lib.sq_dir_make_checked(pfd, str(parent).encode(), name.encode(), uid, gid, mode,
                                     err, 512)
    finally:
        os.close(pfd)
    return fd, ffi.string(err).decode()


def test_a_directory_is_checked_before_use(tmp_path):
    me = os.geteuid()
    d = tmp_path / "runtime"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    fd, err = dir_open(d, owner=me)
    assert fd >= 0, err
    os.close(fd)
    d.chmod(0o777)
    fd, err = dir_open(d, owner=me)
    assert fd == -1 and err == (f"{d} is writable by other users (mode 0777) and not sticky: "
                                f"chmod go-w {d} (or +t)"), err
    d.chmod(0o1777)                    # sticky, as /tmp: others cannot replace our entries
    fd, err = dir_open(d, owner=me)
    assert fd >= 0, err
    os.close(fd)
    link = tmp_path / "link"
    link.symlink_to(d)
    fd, err = dir_open(link, owner=me)
    assert fd == -1 and err == (f"{link} is a symbolic link, not a directory: remove it "
                                "(squall makes it)"), err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd, err = dir_open(fifo, owner=me)
    assert fd == -1 and "is a FIFO (named pipe), not a directory" in err, err


@pytest.mark.needs_root("chown")
def test_owner_root_or_the_expected_user(tmp_path):
    d = tmp_path / "cache"
    d.mkdir(mode=0o755)
    os.chown(d, 1001, 1001)
    fd, err = dir_open(d, owner=-1)
    assert fd == -1 and err == (f"{d} is owned by uid 1001, not by root: remove it or give it "
                                "to root (chown root)"), err
    fd, err = dir_open(d, owner=1000)
    assert fd == -1 and "owned by uid 1001, not by root or uid 1000" in err, err
    fd, err = dir_open(d, owner=1001)
    assert fd >= 0, err
    os.close(fd)


@pytest.mark.needs_root("chown")
def test_make_gives_the_new_directory_away_through_its_descriptor(tmp_path):
    tmp_path.chmod(0o755)
    fd, err = dir_make(tmp_path, "1000", 1000, 1000)
    assert fd >= 0, err
    os.close(fd)
    st = os.lstat(tmp_path / "1000")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, 1000, 0o700)
    fd, err = dir_make(tmp_path, "1000", 1000, 1000)      # exists: checked, reused
    assert fd >= 0, err
    os.close(fd)
    # Another user's directory, or a link to one, under the expected name: refused, and
    # nothing of it is changed.
    other = tmp_path / "elsewhere"
    other.mkdir(mode=0o755)
    os.chown(other, 1001, 1001)
    os.rename(tmp_path / "1000", tmp_path / "old")
    (tmp_path / "1000").symlink_to(other)
    fd, err = dir_make(tmp_path, "1000", 1000, 1000)
    assert fd == -1 and err == (f"{tmp_path}/1000 is a symbolic link, not a directory: remove "
                                "it (squall makes it)"), err
    os.unlink(tmp_path / "1000")
    os.rename(other, tmp_path / "1000")
    fd, err = dir_make(tmp_path, "1000", 1000, 1000)
    assert fd == -1 and "is owned by uid 1001, not by uid 1000" in err, err
    st = os.lstat(tmp_path / "1000")
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (1001, 0o755)
    os.chmod(tmp_path / "1000", 0o777)
    os.chown(tmp_path / "1000", 1000, 1000)
    fd, err = dir_make(tmp_path, "1000", 1000, 1000)
    assert fd == -1 and "writable by other users (mode 0777)" in err, err
