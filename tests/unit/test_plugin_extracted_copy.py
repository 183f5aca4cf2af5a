"""The extraction reads a node-local copy of the image, not the shared one (issue 27).

A step on several nodes sends its image once with sbcast (spank/keeper/shared_copy.h); each
node's extraction then reads its copy (spank/keeper/extracted.c, through
spank/keeper/tests/cache_probe.c, with the real mksquashfs and unsquashfs): the image path
given names nothing here, so a tree can only come from the copy. A copy is moved into
KEY.part while the extraction runs (a resumed run reads it again), removed once the tree is
published, and what an ended job's broadcast left is removed once nobody waits for it. The
broadcast itself runs on the mini cluster (tests/integration/test_plugin_localcache.py) and
its bytes from /fsx are measured on the scale cluster (tests/integration/test_scale_smoke.py).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest
from extracted_cache import KEY, make_image, run
from plugin_probe import build_cache_probe

UNSQUASHFS = "/usr/bin/unsquashfs"


@pytest.fixture(scope="module")
def cache_probe(tmp_path_factory) -> Path:
    return build_cache_probe(tmp_path_factory.mktemp("copyprobe") / "cache_probe")


@pytest.fixture()
def cache(tmp_path) -> Path:
    d = tmp_path / "cache" / "1000"
    d.mkdir(parents=True, mode=0o700)
    return d


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    return make_image(tmp_path_factory.mktemp("copy"), 60, odd=False)


def gone_image(tmp_path: Path) -> Path:
    """Where the shared image would be: nothing there, so any tree came from the copy."""
    return tmp_path / "fsx-unreachable" / "img.sqsh"


def test_the_extraction_reads_the_broadcast_copy_and_removes_it(cache_probe, cache, image,
                                                                 tmp_path):
    copy = cache / "copy-7.0.in"
    copy.write_bytes(image.read_bytes())
    out = run(cache_probe, "build", cache, KEY, gone_image(tmp_path), UNSQUASHFS, 1 << 40,
              copy)
    assert out["rc"] == "0"
    tree = cache / KEY / "rootfs"
    assert (tree / "big").stat().st_size == 1 << 20
    assert (tree / "d0").is_dir()
    left = sorted(p.name for p in cache.iterdir())
    assert left == [KEY, f"{KEY}.lock", f"{KEY}.size"], left
    assert sorted(p.name for p in (cache / KEY).iterdir()) == ["rootfs"]


def test_without_a_copy_the_extraction_reads_the_image_as_before(cache_probe, cache, image):
    out = run(cache_probe, "build", cache, KEY, image, UNSQUASHFS, 1 << 40)
    assert out["rc"] == "0"
    assert (cache / KEY / "rootfs" / "big").stat().st_size == 1 << 20


def test_a_copy_an_earlier_run_left_in_the_partial_tree_is_read_again(cache_probe, cache,
                                                                       image, tmp_path):
    """A job ended mid-extraction: its KEY.part keeps the copy, the next run reads it (the
    shared image is not read again), even when the partial tree itself is started over."""
    part = cache / f"{KEY}.part"
    part.mkdir(mode=0o700)
    (part / "image.sqsh").write_bytes(image.read_bytes())
    out = run(cache_probe, "build", cache, KEY, gone_image(tmp_path), UNSQUASHFS, 1 << 40)
    assert out["rc"] == "0"
    assert (cache / KEY / "rootfs" / "big").stat().st_size == 1 << 20
    assert not (cache / f"{KEY}.part").exists()
    assert not (cache / KEY / "image.sqsh").exists()


def test_a_copy_that_is_not_an_image_fails_the_run_and_leaves_nothing(cache_probe, cache,
                                                                      tmp_path):
    copy = cache / "copy-7.0.in"
    copy.write_bytes(b"not a squashfs image" * 100)
    out = run(cache_probe, "build", cache, KEY, gone_image(tmp_path), UNSQUASHFS, 1 << 40,
              copy)
    assert out["rc"] == "-1"
    left = sorted(p.name for p in cache.iterdir())
    assert left == [f"{KEY}.lock"], left


def test_a_broadcast_nobody_waits_for_goes_once_slurmd_stops_writing_it(cache_probe, cache):
    """Issue 40: the copies of ended jobs stayed for a day (slurmd wrote late blocks after
    the job epilog had removed them). A copy goes once it has not been written for a
    minute and no keeper holds its step's lock (copy-JOB.STEP.lock, held by each keeper
    that sends or receives it until its extraction took it)."""
    quiet = time.time() - 120
    other = "f" * 32
    ended = [cache / "copy-5.0.in", cache / "copy-5.0.sum", cache / "copy-5.0.out",
             cache / "copy-5.0.lock"]           # an ended job's: nobody holds the lock
    waited = [cache / "copy-6.1.in", cache / "copy-6.1.lock"]   # a keeper waits for it
    fresh = [cache / "copy-9.0.in", cache / "copy-9.0.sum"]      # still being written
    for p in ended + waited + fresh:
        p.write_bytes(b"x" * 1000)
    for p in ended + waited:
        os.utime(p, (quiet, quiet))
    # A copy staged by an extraction that died (its key's lock free) goes at once.
    staged = cache / f"{other}.sqsh"
    staged.write_bytes(b"x" * 1000)
    (cache / f"{other}.lock").write_text("")
    with open(cache / "copy-6.1.lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_SH)
        run(cache_probe, "evict", cache, 1 << 40)
    assert [p.exists() for p in ended] == [False] * 4
    assert [p.exists() for p in waited] == [True] * 2
    assert [p.exists() for p in fresh] == [True] * 2
    assert not staged.exists()
    # Its keeper gone (the job ended), the next pass takes it too.
    run(cache_probe, "evict", cache, 1 << 40)
    assert [p.exists() for p in waited] == [False] * 2
