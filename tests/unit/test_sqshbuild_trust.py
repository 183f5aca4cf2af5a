"""Whose entries the cache uses, and locks nobody can hold forever (docs/security.md)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from squall.sqshbuild import safefs
from squall.sqshbuild.cache import index
from squall.sqshbuild.cache.image_cache import open_shared
from squall.sqshbuild.cache.publish import publish
from squall.sqshbuild.lock import SharedLock, pid_alive
from squall.sqshbuild.trust import BUILDER_ENV, Trust, builder_uid, is_writer

D1 = "sha256:" + "1" * 64
OTHER = 4242  # a uid nobody trusts
root_only = pytest.mark.needs_root("chown to another user")


@pytest.fixture(autouse=True)
def _no_builder(monkeypatch):
    monkeypatch.setenv(BUILDER_ENV, "none")


def test_the_builder_is_one_account_by_name_or_uid(monkeypatch, tmp_path):
    monkeypatch.setenv(BUILDER_ENV, "root")
    assert builder_uid() == 0 and Trust.shared().uids == {0}
    monkeypatch.setenv(BUILDER_ENV, "4243")
    assert builder_uid() == 4243 and Trust.shared().owner(4243)
    assert is_writer(4243) and is_writer(0) and not is_writer(OTHER)
    monkeypatch.setenv(BUILDER_ENV, "no-such-user-here")
    assert builder_uid() is None and Trust.shared().uids == {0}
    monkeypatch.setenv(BUILDER_ENV, "none")
    assert builder_uid() is None and not Trust.shared().owner(os.geteuid() or OTHER)


def test_the_builder_file_is_read_without_following_or_blocking(monkeypatch, tmp_path):
    from squall.sqshbuild import trust
    monkeypatch.delenv(BUILDER_ENV)
    f = tmp_path / "builder"
    monkeypatch.setattr(trust, "BUILDER_FILE", f)
    assert trust.builder_name() == "squall-builder"  # the packages' account
    f.write_text("# the account that writes /fsx/squall/images\n\n  4243 trailing\n")
    assert trust.builder_name() == "4243"
    f.unlink()
    os.mkfifo(f)
    assert trust.builder_name() == "squall-builder"  # a FIFO answers at once: default
    f.unlink()
    (tmp_path / "elsewhere").write_text("root\n")
    f.symlink_to(tmp_path / "elsewhere")
    assert trust.builder_name() == "squall-builder"
    f.unlink()
    f.write_text("none\n")
    assert trust.builder_name() == ""
    os.chmod(f, 0o666)  # as the plugin reads it: root's alone, or the default
    assert trust.builder_name() == "squall-builder"


def test_a_file_with_two_links_or_writable_by_all_is_not_trusted(tmp_path):
    t = Trust.private()
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
    cache = open_shared(tmp_path / "c")
    tmp = cache.temp_path(D1)
    tmp.write_bytes(b"hsqs")
    publish(cache, D1, tmp, {"reference": "r"})
    index.remember(cache, "r/x:1", "linux/amd64", D1)
    assert index.lookup(cache, "r/x:1", "linux/amd64") == D1
    os.chown(index.index_path(cache, "r/x:1", "linux/amd64"), OTHER, OTHER)
    fresh = open_shared(tmp_path / "c")
    assert index.lookup(fresh, "r/x:1", "linux/amd64") is None
    assert "note: ignoring" in caplog.text
    os.chown(fresh.sqsh(D1), OTHER, OTHER)
    assert not fresh.has(D1)


@pytest.mark.parametrize("body", ["[1, 2]", '{"digest": 7}', '{"digest": "sha256:zz"}',
                                  "{not json", "\x00\xff"])
def test_a_malformed_index_record_is_one_note(tmp_path, caplog, body):
    cache = open_shared(tmp_path / "c")
    index.index_path(cache, "r/x:1", "linux/amd64").write_text(body)
    assert index.lookup(cache, "r/x:1", "linux/amd64") is None
    assert caplog.text.count("malformed index record") == 1


def test_a_chain_with_a_repeated_name_names_the_right_directory(tmp_path):
    """/.../x/x: the unsafe one is the deeper x (was: the first x was named)."""
    inner = tmp_path / "x" / "x"
    inner.mkdir(parents=True)
    os.chmod(inner, 0o777)
    with pytest.raises(safefs.Unsafe) as exc:
        os.close(safefs.walk(inner, Trust.private(), dirs=Trust.private())[0])
    assert str(exc.value).startswith(f"{inner} is writable by every user"), exc.value
