"""Dead extractions of the node-local cache go, live ones count (issue 19).

The next extraction (and every eviction) removes dead extractions `KEY.tmp-PID`: the process
gone, a zombie (`kill(pid, 0)` says a zombie is alive), or nobody holding the key's lock (the
PID reused); live extractions count toward `local_cache_gb` while they run; a FIFO or link
planted as `KEY.size` neither blocks nor redirects the eviction (spank/keeper/extracted.c,
through spank/keeper/tests/cache_probe.c, under a timeout).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from extracted_cache import Held
from plugin_probe import build_cache_probe


@pytest.fixture(scope="module")
def cache_probe(tmp_path_factory) -> Path:
    return build_cache_probe(tmp_path_factory.mktemp("cache") / "cache_probe")


def run(*argv: str | Path) -> dict[str, str]:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=20,
                         check=True)
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)


KEYS = [c * 32 for c in "abcdef"]
# A stand-in for unsquashfs: makes DEST/etc (DEST: the argument after -d).
UNSQUASHFS = ('#!/bin/sh\nwhile [ "$#" -gt 1 ]; do [ "$1" = -d ] && mkdir -p "$2/etc"; '
              'shift; done\n')


def zombie() -> int:
    """A child that has exited and is not waited for: kill(pid, 0) still succeeds."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return pid


def gone() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def extraction(cache: Path, key: str, pid: int, mib: int = 0) -> Path:
    tmp = cache / f"{key}.tmp-{pid}"
    (tmp / "rootfs/etc").mkdir(parents=True)
    if mib:
        (tmp / "rootfs/data").write_bytes(os.urandom(mib << 20))
    return tmp


def complete(cache: Path, key: str, size: int, last_use: float) -> None:
    (cache / key / "rootfs").mkdir(parents=True)
    (cache / f"{key}.size").write_text(f"{size}\n")
    lock = cache / f"{key}.lock"
    lock.write_text("")
    os.utime(lock, (last_use, last_use))


@pytest.fixture()
def cache(tmp_path) -> Path:
    d = tmp_path / "cache" / "1000"
    d.mkdir(parents=True, mode=0o700)
    return d


def test_the_next_extraction_removes_dead_ones_and_keeps_live_ones(cache_probe, cache,
                                                                   tmp_path):
    z = zombie()
    try:
        dead_zombie = extraction(cache, KEYS[0], z)
        dead_gone = extraction(cache, KEYS[1], gone())
        # A live PID (ours) but nobody extracts that key: the number was reused.
        reused = extraction(cache, KEYS[2], os.getpid())
        held = Held(cache, KEYS[3])
        live = extraction(cache, KEYS[3], os.getpid())
        tool = tmp_path / "unsquashfs"
        tool.write_text(UNSQUASHFS)
        tool.chmod(0o755)
        image = tmp_path / "img.sqsh"
        image.write_bytes(b"hsqs")
        out = run(cache_probe, "build", cache, KEYS[4], image, tool, 1 << 30)
        held.release()
    finally:
        os.waitpid(z, 0)
    assert out == {"rc": "0"}, out
    assert (cache / KEYS[4] / "rootfs/etc").is_dir()
    assert not dead_zombie.exists() and not dead_gone.exists() and not reused.exists()
    assert live.exists()


def test_live_extractions_count_toward_the_limit_and_dead_ones_do_not(cache_probe, cache):
    now = time.time()
    complete(cache, KEYS[0], 500_000, now - 200)      # the oldest
    complete(cache, KEYS[1], 500_000, now - 100)
    z = zombie()
    try:
        dead = extraction(cache, KEYS[2], z, mib=3)   # removed first, so it does not count
        held = Held(cache, KEYS[3])
        live = extraction(cache, KEYS[3], os.getpid(), mib=1)
        # 1.0 MB complete + ~1 MiB being extracted > 1.6 MB: the oldest tree goes.
        out = run(cache_probe, "evict", cache, 1_600_000)
        held.release()
    finally:
        os.waitpid(z, 0)
    assert out == {}, out
    assert not (cache / KEYS[0]).exists() and not (cache / f"{KEYS[0]}.size").exists()
    assert (cache / KEYS[1] / "rootfs").is_dir()
    assert not dead.exists() and live.exists()


def test_planted_entries_never_block_or_redirect_the_eviction(cache_probe, cache, tmp_path):
    now = time.time()
    complete(cache, KEYS[0], 100, now - 100)
    os.unlink(cache / f"{KEYS[0]}.size")
    os.mkfifo(cache / f"{KEYS[0]}.size")               # read for eviction: never blocks
    complete(cache, KEYS[1], 100, now - 50)
    os.unlink(cache / f"{KEYS[1]}.size")
    secret = tmp_path / "secret"
    secret.write_text("999999999999\n")
    (cache / f"{KEYS[1]}.size").symlink_to(secret)    # not followed: size unknown (0)
    out = run(cache_probe, "evict", cache, 1000)
    assert out == {}
    assert (cache / KEYS[0] / "rootfs").is_dir() and (cache / KEYS[1] / "rootfs").is_dir()
    assert secret.read_text() == "999999999999\n"
