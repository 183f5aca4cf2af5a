"""An extraction cut short is resumed, and it yields to the work beside it (issue 22).

The node-local cache's extraction (spank/keeper/extracted.c, through
spank/keeper/tests/cache_probe.c) with the real unsquashfs and mksquashfs:

- a job's end kills the extraction (SIGKILL); the next extraction continues the partial tree
  `KEY.part` instead of starting over: the files already complete stay (same inodes), and
  the final tree is the one a one-shot extraction makes (types, modes, sizes, mtimes,
  symlink targets, hard links), including a 0555 directory and names with blanks, '#',
  backslashes and a newline (a listing that cannot be trusted: extracted from scratch);
- a partial tree counts toward the size limit and is evicted like a complete one, never
  as a dead extraction;
- while a CPU loop runs beside it, the extractor is stopped most of the time (the duty
  cycle's floor), and what it wrote leaves the page cache once it is on disk.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from extracted_cache import KEY, OLD, RECENT, Held, inodes, kill_session, make_image, run
from plugin_probe import build_cache_probe

from gate import need_tool


@pytest.fixture(scope="module")
def cache_probe(tmp_path_factory) -> Path:
    return build_cache_probe(tmp_path_factory.mktemp("resume") / "cache_probe")


@pytest.fixture()
def cache(tmp_path) -> Path:
    d = tmp_path / "cache" / "1000"
    d.mkdir(parents=True, mode=0o700)
    return d


def one_shot(tmp: Path, image: Path) -> Path:
    ref = tmp / "ref"
    ref.mkdir()
    subprocess.run(["unsquashfs", "-no-progress", "-no-xattrs", "-d", str(ref / "rootfs"),
                    str(image)], check=True, stdout=subprocess.DEVNULL, timeout=120)
    return ref / "rootfs"


def listing(root: Path) -> dict[str, tuple[object, ...]]:
    """Every name under root: type and mode, size, mtime, link target, hard-link group."""
    out: dict[str, tuple[object, ...]] = {}
    first_name: dict[int, str] = {}
    paths = [str(root)] + [os.path.join(dp, n) for dp, ds, fs in os.walk(root)
                           for n in ds + fs]
    for path in sorted(paths):
        st = os.lstat(path)
        rel = os.path.relpath(path, root)
        target = os.readlink(path) if os.path.islink(path) else ""
        group = ""
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            group = first_name.setdefault(st.st_ino, rel)
        out[rel] = (oct(st.st_mode), 0 if stat.S_ISDIR(st.st_mode) else st.st_size,
                    int(st.st_mtime), target, group)
    return out


def start_build(cache_probe: Path, cache: Path, image: Path, tool: str = "",
                max_bytes: int = 1 << 40) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(cache_probe), "build", str(cache), KEY, str(image),
                             tool or shutil.which("unsquashfs") or "unsquashfs",
                             str(max_bytes)], start_new_session=True,
                            stdout=subprocess.DEVNULL)


def cut_short(cache_probe: Path, cache: Path, image: Path, files: int) -> None:
    """Start the extraction and kill it once `files` regular files are complete (their
    mtime the image's, set once a file is written: counting the files that exist would
    count some still being written, more of them the busier the host)."""
    proc = start_build(cache_probe, cache, image)
    rootfs = cache / f"{KEY}.part" / "rootfs"
    deadline = time.monotonic() + 60
    try:
        while sum(1 for p in rootfs.rglob("f*")
                  if p.is_file() and p.lstat().st_mtime < RECENT) < files:
            assert proc.poll() is None, "the extraction ended before it was cut short"
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        kill_session(proc)


def test_an_extraction_cut_short_is_resumed_not_started_over(cache_probe, cache, tmp_path):
    image = make_image(tmp_path, 4000)
    ref = listing(one_shot(tmp_path, image))
    cut_short(cache_probe, cache, image, files=300)
    part = cache / f"{KEY}.part" / "rootfs"
    assert part.is_dir() and not (cache / KEY).exists()
    written = {n: i for n, i in inodes(part).items()
               if (part / n).lstat().st_mtime < RECENT}
    assert len(written) >= 300
    assert run(cache_probe, "build", cache, KEY, image, shutil.which("unsquashfs") or "",
               1 << 40) == {"rc": "0"}
    tree = cache / KEY / "rootfs"
    assert listing(tree) == ref
    assert sorted(p.name for p in (cache / KEY).iterdir()) == ["rootfs"]
    assert not (cache / f"{KEY}.part").exists()
    # Resumed: the files complete before the job ended were kept, not written again.
    now = inodes(tree)
    kept = [n for n, ino in written.items() if now.get(n) == ino]
    assert len(kept) >= 0.95 * len(written), (len(kept), len(written))


def test_a_second_resume_takes_the_listing_and_plan_as_they_are(cache_probe, cache,
                                                                 tmp_path):
    """Issue 40: each resume listed the whole image again (`unsquashfs -lln`) and planned
    against every file on disk before it extracted anything. The listing is kept in
    KEY.part (with `listed`, which says it is whole) and the next plan starts from the last
    one: the listing is never made again, and the tree is still the one-shot one."""
    image = make_image(tmp_path, 4000, odd=False)
    ref = listing(one_shot(tmp_path, image))
    part = cache / f"{KEY}.part"
    cut_short(cache_probe, cache, image, files=300)
    assert (part / "listed").is_file()
    first = (part / "list").stat()
    cut_short(cache_probe, cache, image, files=900)
    again = (part / "list").stat()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    plan = (part / "exclude").read_text().splitlines()
    assert len(plan) >= 250 and not (part / "exclude.tmp").exists()
    assert run(cache_probe, "build", cache, KEY, image, shutil.which("unsquashfs") or "",
               1 << 40) == {"rc": "0"}
    assert listing(cache / KEY / "rootfs") == ref
    assert sorted(p.name for p in (cache / KEY).iterdir()) == ["rootfs"]


def partial_from(tmp: Path, cache: Path, image: Path) -> Path:
    """A partial tree as a job's end may leave it: here, a whole one to take apart."""
    part = cache / f"{KEY}.part"
    part.mkdir()
    subprocess.run(["unsquashfs", "-no-progress", "-no-xattrs", "-d", str(part / "rootfs"),
                    str(image)], check=True, stdout=subprocess.DEVNULL, timeout=120)
    (part / "started").write_text(f"{int(time.time()) - 5}\n")
    return part / "rootfs"


def test_a_hard_link_cut_apart_is_linked_again(cache_probe, cache, tmp_path):
    image = make_image(tmp_path, 400, odd=False)
    ref = listing(one_shot(tmp_path, image))
    rootfs = partial_from(tmp_path, cache, image)
    (rootfs / "zz-link-of-big").unlink()            # its link, after it in the listing
    (rootfs / "d0/f0").write_bytes(b"cut")           # one written only in part
    before = inodes(rootfs)
    assert run(cache_probe, "build", cache, KEY, image, shutil.which("unsquashfs") or "",
               1 << 40) == {"rc": "0"}
    tree = cache / KEY / "rootfs"
    assert listing(tree) == ref
    assert (tree / "big").stat().st_ino == (tree / "zz-link-of-big").stat().st_ino
    after = inodes(tree)
    assert sum(after[n] == i for n, i in before.items() if n != "d0/f0") >= len(before) - 5


def test_a_read_only_directory_given_its_mode_early_gets_its_files(cache_probe, cache,
                                                                   tmp_path):
    image = make_image(tmp_path, 200, odd=False)
    ref = listing(one_shot(tmp_path, image))
    rootfs = partial_from(tmp_path, cache, image)
    (rootfs / "ro").chmod(0o755)
    (rootfs / "ro/inside").unlink()
    (rootfs / "ro").chmod(0o555)
    os.utime(rootfs / "ro", (OLD, OLD))
    assert run(cache_probe, "build", cache, KEY, image, shutil.which("unsquashfs") or "",
               1 << 40) == {"rc": "0"}
    assert listing(cache / KEY / "rootfs") == ref
    assert oct((cache / KEY / "rootfs/ro").stat().st_mode & 0o7777) == "0o555"


def test_a_listing_that_cannot_be_read_back_means_from_scratch(cache_probe, cache, tmp_path):
    image = make_image(tmp_path, 200, newline=True)
    ref = listing(one_shot(tmp_path, image))
    rootfs = partial_from(tmp_path, cache, image)
    (rootfs / "d0/f0").write_bytes(b"cut")
    assert run(cache_probe, "build", cache, KEY, image, shutil.which("unsquashfs") or "",
               1 << 40) == {"rc": "0"}
    assert listing(cache / KEY / "rootfs") == ref


def lock(cache: Path, key: str, last_use: float) -> None:
    path = cache / f"{key}.lock"
    path.write_text("")
    os.utime(path, (last_use, last_use))


def test_a_partial_tree_counts_and_is_evicted_like_a_complete_one(cache_probe, cache):
    now = time.time()
    part = cache / f"{KEY}.part" / "rootfs"
    part.mkdir(parents=True)
    (part / "data").write_bytes(os.urandom(1 << 20))
    (cache / f"{KEY}.part" / "started").write_text(f"{int(now) - 100}\n")
    lock(cache, KEY, now - 100)
    other = "f" * 32
    (cache / other / "rootfs").mkdir(parents=True)
    (cache / f"{other}.size").write_text("600000\n")
    lock(cache, other, now - 50)
    # Under the limit: the partial tree stays (resumable, not a dead extraction).
    assert run(cache_probe, "evict", cache, 4_000_000) == {}
    assert part.is_dir()
    # In use (its extraction runs: the lock held): it stays above the limit too.
    held = Held(cache, KEY)
    assert run(cache_probe, "evict", cache, 1_000_000) == {}
    held.release()
    assert part.is_dir() and (cache / other / "rootfs").is_dir() is False
    # ~1 MiB partial + nothing else > 0.5 MB: the least recently used goes.
    (cache / other / "rootfs").mkdir(parents=True)
    (cache / f"{other}.size").write_text("100000\n")
    lock(cache, other, now - 50)
    assert run(cache_probe, "evict", cache, 500_000) == {}
    assert not (cache / f"{KEY}.part").exists()
    assert (cache / other / "rootfs").is_dir()


BUSY = """#!{python}
import os, sys, time
args = sys.argv[1:]
if "-d" not in args:
    sys.exit(0)   # the listing: none
dest = args[args.index("-d") + 1]
end = time.process_time() + {cpu}
while time.process_time() < end:
    pass
os.makedirs(dest + "/etc")
"""


def test_the_extractor_is_stopped_while_work_runs_beside_it(cache_probe, cache, tmp_path):
    tool = tmp_path / "unsquashfs"
    tool.write_text(BUSY.format(python=sys.executable, cpu=3.0))
    tool.chmod(0o755)
    image = tmp_path / "img.sqsh"
    image.write_bytes(b"hsqs" + bytes(92))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        proc = start_build(cache_probe, cache, image, tool=str(tool))
        states = []
        # Enough samples, however slowly /proc is read on a loaded machine (96 in 6 s once,
        # under a make test): up to 20 s, stopping once there are 200.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None and len(states) < 200:
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or pid == str(proc.pid):
                    continue
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[3]) == proc.pid:          # the extractor, in its session
                    states.append(fields[0])
            time.sleep(0.013)
        kill_session(proc)
    finally:
        hog.kill()
        hog.wait()
    assert len(states) > 100
    stopped = states.count("T") / len(states)
    # The floor: it runs a tenth of each period while the loop runs beside it.
    assert stopped > 0.6, (stopped, len(states))


def test_what_it_wrote_leaves_the_page_cache(cache_probe, cache, tmp_path):
    need_tool("fincore", "util-linux")
    image = make_image(tmp_path, 400, odd=False)
    assert run(cache_probe, "build", cache, KEY, image, shutil.which("unsquashfs") or "",
               1 << 40) == {"rc": "0"}
    files = [str(p) for p in sorted((cache / KEY / "rootfs").rglob("f*"))[:50]]
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *files],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    resident = [int(x) for x in out.split()]
    assert len(resident) == len(files) and sum(resident) == 0, resident
