"""Shared lock (stale takeover), atomic publish, index, gc, sizes, version probing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time

import pytest

from squall.errors import SquallError
from squall.sqshbuild.cache import ImageCache, parse_size
from squall.sqshbuild.lock import SharedLock
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


def test_lock_with_an_old_heartbeat_from_another_host_is_stale(tmp_path):
    path = tmp_path / "l"
    path.write_text(json.dumps({"host": "some-other-node", "pid": 1, "since": 0}))
    lock = SharedLock(path, stale_after=30)
    assert not lock.is_stale()
    old = time.time() - 120
    os.utime(path, (old, old))
    assert lock.is_stale()
    assert lock.acquire(timeout=5)
    lock.release()


def test_waiter_returns_when_the_holder_publishes(tmp_path):
    holder = SharedLock(tmp_path / "l")
    assert holder.try_acquire()
    done = tmp_path / "done"
    done.write_text("x")
    assert SharedLock(tmp_path / "l").acquire(done=done.exists, timeout=5) is False
    holder.release()


def test_publish_index_and_gc(tmp_path):
    cache = ImageCache.open(tmp_path / "c")
    for digest, size in ((D1, 3000), (D2, 5000)):
        tmp = cache.temp_path(digest)
        assert not tmp.name.endswith(".sqsh")
        tmp.write_bytes(b"x" * size)
        path = cache.publish(digest, tmp, {"reference": digest})
        assert path == cache.sqsh(digest) and not tmp.exists()
        assert json.loads(cache.sidecar(digest).read_text())["size"] == size
    cache.remember("r/x:1", "linux/amd64", D1)
    assert cache.lookup("r/x:1", "linux/amd64") == D1
    assert cache.lookup("r/x:1", "linux/arm64") is None
    old = time.time() - 1000
    for p in (cache.sidecar(D2), cache.used_marker(D2), cache.sqsh(D2)):
        os.utime(p, (old, old))  # D2 is the least recently used
    (cache.layer_root / "sha256" / ("a" * 64 + ".tar")).write_bytes(b"l" * 100)
    (cache.layer_root / "sha256" / ("a" * 64 + ".ok")).write_bytes(b"")
    assert cache.gc(10_000, dry_run=True) == []
    removed = cache.gc(3_500)
    assert [r.get("layer") or r.get("image") for r in removed] == ["sha256:" + "a" * 64, D2]
    assert cache.has(D1) and not cache.has(D2) and not cache.sidecar(D2).exists()
    assert cache.lookup("r/x:1", "linux/amd64") == D1


def test_cache_dir_not_writable_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SquallError, match="cannot create cache directory"):
        ImageCache.open(tmp_path / "file" / "cache")


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


def test_subdirectories_inherit_a_shared_root_mode(tmp_path):
    import stat

    from squall.sqshbuild.layers import LayerCache
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o2775)
    cache = ImageCache.open(root)
    LayerCache(cache.layer_root)
    # group-writable, so sticky: no member may rename or remove another's entry
    for sub in ("index", "locks", "layers", "layers/sha256"):
        assert stat.S_IMODE((root / sub).stat().st_mode) == 0o3775, sub


def test_gc_cli(tmp_path):
    cache = ImageCache.open(tmp_path / "c")
    tmp = cache.temp_path(D1)
    tmp.write_bytes(b"x" * 4096)
    cache.publish(D1, tmp, {"reference": "r"})
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
