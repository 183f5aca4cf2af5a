"""Whose entries the cache uses, and locks nobody can hold forever (docs/security.md)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from squall.sqshbuild import safefs
from squall.sqshbuild.cache import ImageCache
from squall.sqshbuild.lock import SharedLock, pid_alive
from squall.sqshbuild.trust import Trust

D1 = "sha256:" + "1" * 64
OTHER = 4242  # a uid nobody trusts
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def test_builders_by_uid_name_and_group(monkeypatch):
    monkeypatch.setenv("SQSHBUILD_BUILDERS", "4243, root ,@0,no-such-user-here")
    t = Trust.current()
    assert t.owner(4243) and t.owner(0) and t.owner(os.geteuid())
    assert not t.owner(OTHER)
    assert 0 in t.gids


def test_a_file_with_two_links_or_writable_by_all_is_not_trusted(tmp_path):
    t = Trust.current()
    f = tmp_path / "f"
    f.write_bytes(b"x")
    os.chmod(f, 0o644)
    assert t.why_not_file(f.lstat()) == ""
    os.link(f, tmp_path / "g")
    assert "hard links" in t.why_not_file(f.lstat())
    os.unlink(tmp_path / "g")
    os.chmod(f, 0o666)
    assert "writable by every user" in t.why_not_file(f.lstat())
    os.symlink(f, tmp_path / "l")
    assert "symlink" in t.why_not_file((tmp_path / "l").lstat())


def test_open_read_refuses_links_and_never_blocks_on_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(safefs.Unsafe, match="FIFO"):
        safefs.open_read(tmp_path / "fifo")
    (tmp_path / "f").write_text("x")
    os.symlink(tmp_path / "f", tmp_path / "l")
    with pytest.raises(safefs.Unsafe, match="symlink"):
        safefs.read_file(tmp_path / "l")
    assert safefs.read_file(tmp_path / "f") == b"x"


def test_a_zombie_is_not_alive():
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while pid_alive(proc.pid):  # exits, and stays a zombie until waited for
        assert time.monotonic() < deadline, "a zombie was taken for alive"
        time.sleep(0.05)
    assert os.path.exists(f"/proc/{proc.pid}")
    proc.wait()


def test_a_trusted_lock_that_lies_stops_counting_after_the_bound(tmp_path):
    """Foreign host, mtime a year ahead, never refreshed: taken after stale_after of the
    waiter's own clock (was: never)."""
    path = tmp_path / "l"
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "since": 0}))
    later = time.time() + 365 * 86400
    os.utime(path, (later, later))
    lock = SharedLock(path, stale_after=1.0)
    started = time.monotonic()
    assert lock.acquire(timeout=10, poll=0.05)
    assert lock.held and 1.0 <= time.monotonic() - started < 5
    lock.release()


def test_a_refreshed_lock_is_honoured(tmp_path):
    holder = SharedLock(tmp_path / "l", heartbeat=0.2, stale_after=1.0)
    assert holder.try_acquire()
    waiter = SharedLock(tmp_path / "l", stale_after=1.0)
    with pytest.raises(Exception, match="timed out"):
        waiter.acquire(timeout=2.5, poll=0.05)
    holder.release()


@root_only
def test_a_lock_of_an_untrusted_user_is_ignored_at_once(tmp_path, caplog):
    path = tmp_path / "l"
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "since": 0}))
    os.chown(path, OTHER, OTHER)
    lock = SharedLock(path)
    assert lock.acquire(timeout=5) and lock.unlocked and not lock.held
    assert "ignoring the lock" in caplog.text
    lock.release()
    assert path.exists(), "another user's lock is never removed"


@root_only
def test_an_index_record_or_image_of_an_untrusted_user_is_absence(tmp_path, caplog):
    cache = ImageCache.open(tmp_path / "c")
    tmp = cache.temp_path(D1)
    tmp.write_bytes(b"hsqs")
    cache.publish(D1, tmp, {"reference": "r"})
    cache.remember("r/x:1", "linux/amd64", D1)
    assert cache.lookup("r/x:1", "linux/amd64") == D1
    os.chown(cache._index_path("r/x:1", "linux/amd64"), OTHER, OTHER)
    fresh = ImageCache.open(tmp_path / "c")
    assert fresh.lookup("r/x:1", "linux/amd64") is None
    assert "note: ignoring" in caplog.text
    os.chown(fresh.sqsh(D1), OTHER, OTHER)
    assert not fresh.has(D1) and fresh.blocked(D1)


@pytest.mark.parametrize("body", ["[1, 2]", '{"digest": 7}', '{"digest": "sha256:zz"}',
                                  "{not json", "\x00\xff"])
def test_a_malformed_index_record_is_one_note(tmp_path, caplog, body):
    cache = ImageCache.open(tmp_path / "c")
    cache._index_path("r/x:1", "linux/amd64").write_text(body)
    assert cache.lookup("r/x:1", "linux/amd64") is None
    assert caplog.text.count("malformed index record") == 1


def test_a_chain_with_a_repeated_name_names_the_right_directory(tmp_path):
    """/.../x/x: the unsafe one is the deeper x (was: the first x was named)."""
    inner = tmp_path / "x" / "x"
    inner.mkdir(parents=True)
    os.chmod(inner, 0o777)
    with pytest.raises(safefs.Unsafe) as exc:
        safefs.check_chain(inner, Trust.current())
    assert str(exc.value).startswith(f"{inner} is writable by every user"), exc.value
