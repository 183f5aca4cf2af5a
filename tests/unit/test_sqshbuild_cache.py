"""Shared lock (stale takeover), atomic publish, index, gc, sizes, version probing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from squall.errors import SquallError
from squall.sqshbuild.cache import gc, index
from squall.sqshbuild.cache.image_cache import open_shared
from squall.sqshbuild.cache.layout import parse_size
from squall.sqshbuild.cache.publish import publish
from squall.sqshbuild.lock import SKEW_BOUND, SharedLock
from squall.sqshbuild.versions import VersionProbe

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def test_lock_excludes_and_releases(tmp_path):
    a, b = SharedLock(tmp_path / "l"), SharedLock(tmp_path / "l")
    assert a.try_acquire()
    assert not b.try_acquire()
    assert not b.break_stale()  # the owner is alive
    a.release()
    assert b.try_acquire()
    b.release()
    assert not (tmp_path / "l").exists()


def test_lock_of_a_dead_process_is_taken_over(tmp_path):
    code = ("import sys, os; sys.path.insert(0, sys.argv[2]);"
            "from squall.sqshbuild.lock import SharedLock; from pathlib import Path;"
            "assert SharedLock(Path(sys.argv[1])).try_acquire(); os._exit(0)")
    root = os.path.join(os.path.dirname(__file__), "..", "..", "python")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "l"), root], check=True)
    assert (tmp_path / "l").exists()
    lock = SharedLock(tmp_path / "l")
    assert lock.acquire(timeout=5)
    lock.release()


def test_a_lock_left_hours_ago_by_another_host_is_stale_at_once(tmp_path):
    path = tmp_path / "l"
    path.write_text(json.dumps({"host": "some-other-node", "pid": 1, "since": 0}))
    lock = SharedLock(path, stale_after=30)
    assert not lock.is_stale()
    old = time.time() - 30 - SKEW_BOUND - 60
    os.utime(path, (old, old))
    assert lock.is_stale()
    assert lock.acquire(timeout=5)
    lock.release()


def test_a_lock_minutes_old_by_this_clock_waits_for_its_own_bound(tmp_path):
    """Two minutes old by this node's clock: another node's clock may be two minutes
    behind, so only stale_after of this waiter's own watching makes it stale."""
    path = tmp_path / "l"
    path.write_text(json.dumps({"host": "some-other-node", "pid": 1, "since": 0}))
    old = time.time() - 120
    os.utime(path, (old, old))
    lock = SharedLock(path, stale_after=1.0)
    assert not lock.is_stale()
    started = time.monotonic()
    assert lock.acquire(timeout=10, poll=0.05)
    assert 1.0 <= time.monotonic() - started < 5
    lock.release()


def test_a_live_lock_of_a_node_whose_clock_is_minutes_behind_is_honoured(tmp_path):
    """The holder's node refreshes the lock every 0.2 s, its clock 5 minutes behind this
    one's (on a network file system the client sets mtime): never taken over (before: at
    once, and both built)."""
    path = tmp_path / "l"
    path.write_text(json.dumps({"host": "some-other-node", "pid": 1, "since": 0}))
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.2):
            behind = time.time() - 300
            os.utime(path, (behind, behind))

    threading.Thread(target=beat, daemon=True).start()
    try:
        waiter = SharedLock(path, stale_after=1.0)
        with pytest.raises(SquallError, match="timed out"):
            waiter.acquire(timeout=2.5, poll=0.05)
    finally:
        stop.set()


def test_waiter_returns_when_the_holder_publishes(tmp_path):
    holder = SharedLock(tmp_path / "l")
    assert holder.try_acquire()
    done = tmp_path / "done"
    done.write_text("x")
    assert SharedLock(tmp_path / "l").acquire(done=done.exists, timeout=5) is False
    holder.release()


def test_a_waiter_polls_less_often_and_reads_the_holders_file_once(tmp_path, monkeypatch):
    """Issue 27: 1,000 nodes wait for one pull. Each poll was an O_EXCL create, two stats
    and an open and read of the holder's file, every 0.3 s (about 20 file operations per
    second per waiting node, at the metadata server); now the polls thin out to one every
    POLL_MAX s, each one stat, the holder's file read once (it names the same holder for
    as long as it exists)."""
    from squall.sqshbuild import lock as lockmod

    holder = SharedLock(tmp_path / "l")
    assert holder.try_acquire()
    calls = {"lstat": 0, "owner": 0, "create": 0}
    real_lstat, real_owner, real_try = lockmod.safefs.lstat, SharedLock.owner, \
        SharedLock.try_acquire

    def lstat(path):
        calls["lstat"] += 1
        return real_lstat(path)

    def owner(self):
        calls["owner"] += 1
        return real_owner(self)

    def try_acquire(self):
        calls["create"] += 1
        return real_try(self)

    monkeypatch.setattr(lockmod.safefs, "lstat", lstat)
    monkeypatch.setattr(SharedLock, "owner", owner)
    monkeypatch.setattr(SharedLock, "try_acquire", try_acquire)
    threading.Timer(8.0, holder.release).start()
    started = time.monotonic()
    assert SharedLock(tmp_path / "l").acquire(timeout=20)
    waited = time.monotonic() - started
    assert 8.0 <= waited < 11, waited
    polls = calls["create"]  # the waiter tries to create the lock once it is gone
    # 0.3 s at first, then 1.5x, at most POLL_MAX: 10 polls in 8 s (was: 27)
    assert calls["lstat"] <= 12, calls
    assert calls["owner"] <= 1 and polls == 1, calls


def test_a_new_holder_on_a_reused_inode_is_not_judged_by_the_old_one(tmp_path):
    """The holder is read once per lock file, keyed by its inode; file systems reuse
    inode numbers. A lock released by a process now dead and created again, on the same
    inode, by a live one must not be taken over for the dead pid read before: a dead
    holder is read again before it counts."""
    path = tmp_path / "l"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    lock = SharedLock(path)
    fresh = SharedLock(path)
    path.write_text(json.dumps({"host": lock.host, "pid": int(dead), "since": 3}))
    assert fresh.is_stale()
    ino = os.stat(path).st_ino
    with open(path, "r+") as f:  # the same inode, a new (live) holder's text
        f.write(json.dumps({"host": lock.host, "pid": os.getpid(), "since": 4}))
        f.truncate()
    assert os.stat(path).st_ino == ino
    assert not fresh.is_stale(), "a cached dead holder judged the live one on that inode"


@pytest.fixture(autouse=True)
def _no_builder(monkeypatch):
    monkeypatch.setenv("SQSHBUILD_BUILDER", "none")  # root alone writes these caches


def test_publish_index_and_gc(tmp_path):
    cache = open_shared(tmp_path / "c")
    for digest, size in ((D1, 3000), (D2, 5000)):
        tmp = cache.temp_path(digest)
        assert not tmp.name.endswith(".sqsh")
        tmp.write_bytes(b"x" * size)
        path = publish(cache, digest, tmp, {"reference": digest})
        assert path == cache.sqsh(digest) and not tmp.exists()
        assert json.loads(cache.sidecar(digest).read_text())["size"] == size
    index.remember(cache, "r/x:1", "linux/amd64", D1)
    assert index.lookup(cache, "r/x:1", "linux/amd64") == D1
    assert index.lookup(cache, "r/x:1", "linux/arm64") is None
    old = time.time() - 1000
    for p in (cache.sidecar(D2), cache.used_marker(D2), cache.sqsh(D2)):
        os.utime(p, (old, old))  # D2 is the least recently used
    (cache.layer_root / "sha256" / ("a" * 64 + ".tar")).write_bytes(b"l" * 100)
    (cache.layer_root / "sha256" / ("a" * 64 + ".ok")).write_bytes(b"")
    assert gc.gc(cache, 10_000, dry_run=True) == []
    removed = gc.gc(cache, 3_500)
    assert [r.get("layer") or r.get("image") for r in removed] == ["sha256:" + "a" * 64, D2]
    assert cache.has(D1) and not cache.has(D2) and not cache.sidecar(D2).exists()
    assert index.lookup(cache, "r/x:1", "linux/amd64") == D1


def test_cache_dir_not_writable_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SquallError, match="cannot create the image cache"):
        open_shared(tmp_path / "file" / "cache")


@pytest.mark.parametrize("text,value", [("1024", 1024), ("500M", 500 << 20), ("2G", 2 << 30),
                                        ("1.5T", int(1.5 * (1 << 40))), ("10GiB", 10 << 30)])
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_parse_size_errors():
    with pytest.raises(SquallError, match="500G"):
        parse_size("lots")


def test_version_probe():
    probe = VersionProbe()

    def see(path, data=None):
        info = tarfile.TarInfo(path)
        info.size = len(data or b"")
        if probe.wants_data(path, info):
            probe.observe(path, info, data)
        else:
            probe.observe(path, info, None)

    see("usr/local/cuda-12.4/version.json", json.dumps({"cuda": {"version": "12.4.1"}}).encode())
    see("usr/include/cudnn_version.h",
        b"#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n")
    see("usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")
    see("opt/amazon/efa/lib/libfabric.so.1.22.0")
    see("opt/amazon/efa/lib/pkgconfig/libfabric.pc", b"Name: libfabric\nVersion: 1.22.0amzn1\n")
    see("opt/aws-ofi-nccl-1.9.1/lib/libnccl-net.so")
    see("usr/lib/python3.10/os.py")
    see("usr/lib/python3.12/os.py")
    see("usr/local/lib/python3.12/dist-packages/torch/version.py",
        b"__version__ = '2.3.0a0+40ec155e58'\ngit_version = 'x'\n")
    assert probe.found == {"cuda": "12.4.1", "cudnn": "9.1.0", "nccl": "2.21.5",
                           "libfabric": "1.22.0amzn1", "aws-ofi-nccl": "1.9.1",
                           "python": "3.12", "pytorch": "2.3.0a0+40ec155e58"}


def test_a_new_shared_cache_is_written_by_nobody_else(tmp_path):
    """0755 directories, 0644 files, no 0666 marker: whatever the umask (docs/security.md)."""
    import stat
    old = os.umask(0)
    try:
        cache = open_shared(tmp_path / "shared")
        tmp = cache.temp_path(D1)
        tmp.write_bytes(b"x")
        publish(cache, D1, tmp, {"reference": "r"})
    finally:
        os.umask(old)
    for p in [cache.root, *cache.root.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        assert mode == (0o755 if p.is_dir() else 0o644), (p, oct(mode))


@pytest.mark.parametrize("mode", [0o1777, 0o2775, 0o777])
def test_a_cache_others_may_write_is_refused_with_the_conversion(tmp_path, mode):
    """An earlier squall's cache (1777, or 2775 for a group of builders): neither read nor
    written, one line naming the command that converts it; its mode is left as it was."""
    import stat
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, mode)
    with pytest.raises(SquallError, match="sqshbuild convert-cache --cache-dir"):
        open_shared(root)
    assert stat.S_IMODE(root.stat().st_mode) == mode


def test_gc_cli(tmp_path):
    cache = open_shared(tmp_path / "c")
    tmp = cache.temp_path(D1)
    tmp.write_bytes(b"x" * 4096)
    publish(cache, D1, tmp, {"reference": "r"})
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "..",
                                                    "python"))
    cli = [sys.executable, "-c", "from squall.sqshbuild.cli import main; main()"]
    proc = subprocess.run([*cli, "gc", "--max-size", "1G", "--cache-dir", str(cache.root)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "already under" in proc.stdout and cache.has(D1)
    proc = subprocess.run([*cli, "gc", "--max-size", "1K", "--cache-dir", str(cache.root)],
                          capture_output=True, text=True, env=env)
    assert proc.stdout.strip() == f"removed image {D1} (4.0 KiB)" and not cache.has(D1)
    proc = subprocess.run([*cli, "gc", "--max-size", "lots", "--cache-dir", str(cache.root)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and proc.stderr.startswith("sqshbuild: error: size 'lots'")


def test_a_layer_cache_elsewhere_is_checked_like_the_cache(tmp_path, monkeypatch):
    """SQSHBUILD_LAYER_CACHE outside the cache root: made the same way (0755), and one
    others may write is refused as the cache itself would be."""
    import stat
    monkeypatch.setenv("SQSHBUILD_LAYER_CACHE", str(tmp_path / "layers"))
    cache = open_shared(tmp_path / "c")
    assert cache.layer_root == tmp_path / "layers"
    assert stat.S_IMODE((tmp_path / "layers" / "sha256").stat().st_mode) == 0o755
    assert not (tmp_path / "c" / "layers").exists()
    os.chmod(tmp_path / "layers" / "sha256", 0o777)
    with pytest.raises(SquallError, match="convert-cache"):
        open_shared(tmp_path / "c")


def test_a_dead_holders_other_locks_go_after_two_missed_heartbeats(tmp_path):
    """A build killed on another node held its image's lock and a layer's: once the image
    lock is judged stale (STALE_AFTER), the layer lock of the same holder goes after two
    missed heartbeats, not another full STALE_AFTER (was: 60 s + 60 s on the scale
    cluster's GlusterFS)."""
    owner = json.dumps({"host": "dead-node", "pid": 4242, "since": 0})
    image, layer = tmp_path / "image.lock", tmp_path / "layer.lock"
    image.write_text(owner)
    layer.write_text(owner)
    assert SharedLock(image, stale_after=0.5).acquire(timeout=5, poll=0.05)
    started = time.monotonic()
    waiter = SharedLock(layer, heartbeat=0.2, stale_after=30)
    assert waiter.acquire(timeout=10, poll=0.05)
    assert time.monotonic() - started < 5
    waiter.release()
    other = tmp_path / "other.lock"  # a holder never judged: its own full bound
    other.write_text(json.dumps({"host": "live-node", "pid": 4242, "since": 0}))
    with pytest.raises(SquallError, match="timed out"):
        SharedLock(other, heartbeat=0.2, stale_after=30).acquire(timeout=1.5, poll=0.05)
