"""The node-local copy of an image has the image's modes, and a cut before it is published
is resumed, not thrown away (issue 30).

The keeper extracts as the job's user, not root (spank/keeper/extracted.c, through
spank/keeper/tests/cache_probe.c, with the real unsquashfs and mksquashfs), so these tests
run the probe as `nobody` (setpriv) with umask 077 in effect, as the keeper's was, on a
cache directory that user owns:

- every entry of the published tree has the mode `unsquashfs -llnumeric` lists for it:
  set-uid, set-gid and sticky bits included, whatever the umask, made in one pass or in a
  run killed mid-way and resumed;
- an extraction cut after unsquashfs finished but before the rename that publishes it (a
  short job's end: the keeper's session is killed with the job) leaves a tree the next
  extraction resumes and publishes: the files written stay (same inodes), nothing of the
  resume's records is left in the published entry.

Cutting at exactly that point needs a hook: the probe built with
-DSQ_TEST_CUT_BEFORE_PUBLISH stops itself (SIGSTOP) just before the rename; the test waits
for it to be stopped and kills its session, as a job's end does. Production builds never
define it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from extracted_cache import KEY, RECENT, inodes, kill_session
from plugin_probe import build_cache_probe

from gate import need_root, need_tool

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
# Entries with modes that a copy made by a user with umask 077 got wrong.
SPECIAL = {"usr/bin/passwd": 0o4755, "usr/bin/wall": 0o2755, "etc/shadow": 0o640,
           "secret": 0o600, "ro/inside": 0o644, "sgid-dir/file": 0o2711,
           "usr/bin/sudo": 0o4111}
DIRS = {"tmp": 0o1777, "ro": 0o555, "sgid-dir": 0o2755}


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory nobody can reach (pytest's tmp_path is root's, 0700)."""
    d = Path(tempfile.mkdtemp(prefix="squall-modes-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(d)], check=False)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def probes(shared) -> dict[str, Path]:
    need_tool("setpriv", "util-linux")
    need_tool("mksquashfs", "squashfs-tools")
    need_tool("unsquashfs", "squashfs-tools")
    need_root("runs the probe as nobody: root switches to it")
    plain = build_cache_probe(shared / "cache_probe")
    cut = build_cache_probe(shared / "cache_probe_cut",
                      cflags=("-DSQ_TEST_CUT_BEFORE_PUBLISH",))
    for p in (plain, cut):
        p.chmod(0o755)
    return {"plain": plain, "cut": cut}


@pytest.fixture()
def cache(shared) -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(dir=shared))
    top.chmod(0o755)
    d = top / str(NOBODY)
    d.mkdir(mode=0o700)
    os.chown(d, NOBODY, NOBODY)
    yield d
    subprocess.run(["chmod", "-R", "u+rwx", str(top)], check=False)
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def image(shared) -> Path:
    """An image with the modes of SPECIAL and DIRS, and enough files to be cut mid-way:
    special ones at both ends of the listing (extracted before and after the cut)."""
    src = shared / "src"
    for top in ("a", "zz"):
        for d in range(10):
            (src / top / f"d{d}").mkdir(parents=True)
            for i in range(150):
                (src / top / f"d{d}" / f"f{i}").write_bytes(os.urandom(4096 + 37 * i))
    for name in DIRS:
        (src / name).mkdir(parents=True)
    for name, mode in SPECIAL.items():
        for top in ("", "a/", "zz/"):
            path = src / (top + name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(name.encode() * 500)
            path.chmod(mode)
    for top in ("", "a/", "zz/"):
        for name, mode in DIRS.items():
            (src / (top + name)).mkdir(exist_ok=True)
            (src / (top + name)).chmod(mode)
    t = 1_600_000_000
    for path in src.rglob("*"):
        os.utime(path, (t, t), follow_symlinks=False)
    out = shared / "img.sqsh"
    subprocess.run(["mksquashfs", str(src), str(out), "-quiet", "-no-progress", "-all-root"],
                   check=True, stdout=subprocess.DEVNULL, timeout=120)
    out.chmod(0o644)
    return out


def listed_modes(image: Path) -> dict[str, str]:
    """Every name of the image, as `unsquashfs -llnumeric` lists its type and mode."""
    out = subprocess.run(["unsquashfs", "-llnumeric", "-UTC", str(image)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    modes = {}
    for line in out.splitlines():
        if not line[:1] or line[0] not in "-dl":
            continue
        name = line.split(" squashfs-root", 1)[1].split(" -> ", 1)[0].lstrip("/")
        modes[name or "."] = line[:10]
    return modes


def tree_modes(root: Path) -> dict[str, str]:
    """Every name under root, its type and mode written as ls -l does."""
    out = {}
    for path in [root, *root.rglob("*")]:
        out[str(path.relative_to(root))] = stat.filemode(path.lstat().st_mode)
    return out


def wrong_modes(root: Path, image: Path) -> dict[str, tuple[str | None, str | None]]:
    """The names whose mode in the tree (first) is not the image's (second): {} when none."""
    have, want = tree_modes(root), listed_modes(image)
    return {n: (have.get(n), want.get(n)) for n in sorted(set(have) | set(want))
            if have.get(n) != want.get(n)}


def probe(exe: Path, cache: Path, image: Path, tool: str = "") -> list[str]:
    return [*AS_NOBODY, str(exe), "build", str(cache), KEY, str(image),
            tool or shutil.which("unsquashfs") or "unsquashfs", str(1 << 40)]


def build(exe: Path, cache: Path, image: Path, tool: str = "") -> str:
    res = subprocess.run(probe(exe, cache, image, tool), capture_output=True, text=True,
                         timeout=300, check=True, umask=0o077)
    return res.stdout.strip()


def start(exe: Path, cache: Path, image: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(probe(exe, cache, image), start_new_session=True,
                            stdout=subprocess.DEVNULL, umask=0o077)


def test_one_pass_gives_every_entry_the_images_mode(probes, cache, image):
    assert build(probes["plain"], cache, image) == "rc=0"
    tree = cache / KEY / "rootfs"
    assert wrong_modes(tree, image) == {}
    assert oct((tree / "usr/bin/passwd").stat().st_mode & 0o7777) == "0o4755"


def test_a_resumed_copy_gives_every_entry_the_images_mode(probes, cache, image):
    proc = start(probes["plain"], cache, image)
    rootfs = cache / f"{KEY}.part" / "rootfs"
    deadline = time.monotonic() + 60
    try:
        while sum(1 for p in rootfs.rglob("f*")
                  if p.is_file() and p.lstat().st_mtime < RECENT) < 300:
            assert proc.poll() is None, "the extraction ended before it was cut short"
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        kill_session(proc)
    assert rootfs.is_dir() and not (cache / KEY).exists()
    assert build(probes["plain"], cache, image) == "rc=0"
    assert wrong_modes(cache / KEY / "rootfs", image) == {}


def wait_stopped(proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 240
    while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert proc.poll() is None, "the extraction ended without stopping before the rename"
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_cut_just_before_publishing_is_resumed_and_published(probes, cache, image):
    proc = start(probes["cut"], cache, image)
    try:
        wait_stopped(proc)
    finally:
        kill_session(proc)
    part = cache / f"{KEY}.part"
    assert (part / "rootfs").is_dir() and not (cache / KEY).exists()
    written = inodes(part / "rootfs")
    assert len(written) >= 3000
    assert build(probes["plain"], cache, image) == "rc=0"
    tree = cache / KEY / "rootfs"
    assert not part.exists()
    # Resumed, not redone from scratch: every file is the one the cut run wrote.
    assert inodes(tree) == written
    assert wrong_modes(tree, image) == {}
    assert sorted(p.name for p in (cache / KEY).iterdir()) == ["rootfs"]


def test_a_complete_part_is_published_without_listing_or_extracting_again(probes, cache,
                                                                          image):
    """Issue 40: a complete `.part` needed a 5 s job to be published (listed, planned and
    extracted again). A run cut after its extraction leaves `extracted`: the next one
    gives the modes and publishes, running no unsquashfs at all (here: /bin/false)."""
    proc = start(probes["cut"], cache, image)
    try:
        wait_stopped(proc)
    finally:
        kill_session(proc)
    part = cache / f"{KEY}.part"
    assert (part / "extracted").is_file() and (part / "listed").is_file()
    written = inodes(part / "rootfs")
    assert build(probes["plain"], cache, image, tool=shutil.which("false") or "/bin/false") \
        == "rc=0"
    tree = cache / KEY / "rootfs"
    assert inodes(tree) == written
    assert wrong_modes(tree, image) == {}
    assert sorted(p.name for p in (cache / KEY).iterdir()) == ["rootfs"]
