"""The job epilog removes the job's copies of its images (spank/core/extracted_name.c, via
cffi; issue 27).

A step's first node sends the image to every node of the step (spank/keeper/shared_copy.h,
`LOCAL_CACHE/UID/copy-JOBID.STEP.*`); a node whose extraction does not take its copy (its
kept container started in an earlier step, a failover's survivor) would keep an image-sized
file for a day. The epilog, as root, removes this job's, only this job's, never following a
link and never a directory, in the user's directory as the plugin checks it.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from gate import need_root
from squall._core import lib

UID = 4321


@pytest.fixture()
def cache(tmp_path) -> Path:
    need_root("the epilog runs as root: the directories are root's and the user's")
    top = tmp_path / "cache"
    top.mkdir(mode=0o755)
    user = top / str(UID)
    user.mkdir(mode=0o700)
    os.chown(user, UID, UID)
    return top


def drop(top: Path, jobid: int) -> int:
    return int(lib.sq_extracted_drop_copies(str(top).encode(), UID, jobid))


def test_only_this_jobs_copies_go(cache, tmp_path):
    user = cache / str(UID)
    mine = ["copy-7.0.in", "copy-7.0.sum", "copy-7.12.in"]
    others = ["copy-77.0.in", "copy-8.0.in", "copy-7", "a" * 32 + ".lock", "notcopy-7.0.in"]
    for name in mine + others:
        (user / name).write_bytes(b"x")
    victim = tmp_path / "victim"
    victim.write_text("root's file")
    (user / "copy-7.1.in").symlink_to(victim)      # the link goes, never what it names
    (user / "copy-7.2.in").mkdir()                 # a directory stays
    assert drop(cache, 7) == 4
    assert sorted(p.name for p in user.iterdir()) == sorted(others + ["copy-7.2.in"])
    assert victim.read_text() == "root's file"


def test_a_directory_of_the_wrong_owner_is_refused(cache):
    user = cache / str(UID)
    (user / "copy-7.0.in").write_bytes(b"x")
    os.chown(user, UID + 1, UID + 1)
    assert drop(cache, 7) == -1
    assert (user / "copy-7.0.in").exists()


def test_no_directory_is_nothing_to_do(tmp_path):
    assert int(lib.sq_extracted_drop_copies(str(tmp_path / "none").encode(), UID, 7)) == -1


def test_other_jobs_copies_go_once_nobody_waits_for_them(cache):
    """Issue 40: slurmd wrote an ended job's late sbcast blocks after its epilog had removed
    its copies, and they stayed for a day. A later epilog removes a copy of another job
    once slurmd has not written it for a minute and no keeper holds its step's lock."""
    user = cache / str(UID)
    quiet = time.time() - 120
    late = ["copy-5.0.in", "copy-5.0.sum", "copy-5.0.lock"]
    waited = ["copy-6.0.in", "copy-6.0.lock"]
    fresh = ["copy-8.0.in"]
    for name in late + waited + fresh:
        (user / name).write_bytes(b"x")
    for name in late + waited:
        os.utime(user / name, (quiet, quiet))
    (user / "copy-9.0.lock").symlink_to("/etc/passwd")   # a link: no lock, never followed
    (user / "copy-9.0.in").write_bytes(b"x")
    os.utime(user / "copy-9.0.in", (quiet, quiet))
    with open(user / "copy-6.0.lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert drop(cache, 7) == 4
    assert sorted(p.name for p in user.iterdir()) == sorted(waited + fresh + ["copy-9.0.lock"])
    assert os.path.exists("/etc/passwd")


def test_a_later_epilog_sweeps_every_users_unused_copies(cache):
    """Whoever runs the node's next job: its epilog removes the unused copies of every user
    (each user's directory checked as the plugin makes it; one refused is left alone)."""
    other = cache / str(UID + 1)
    other.mkdir(mode=0o700)
    os.chown(other, UID + 1, UID + 1)
    wrong = cache / str(UID + 2)       # another user's: refused, left alone
    wrong.mkdir(mode=0o700)
    quiet = time.time() - 120
    for d in (cache / str(UID), other, wrong):
        for name in ("copy-5.0.in", "copy-5.0.sum"):
            (d / name).write_bytes(b"x")
            os.utime(d / name, (quiet, quiet))
        (d / "copy-6.0.in").write_bytes(b"x")      # being written: stays
    os.chown(wrong, UID + 3, UID + 3)
    (cache / "copy-5.0.in").write_bytes(b"x")      # the top directory is not a user's
    os.utime(cache / "copy-5.0.in", (quiet, quiet))
    assert int(lib.sq_extracted_sweep_copies(str(cache).encode())) == 4
    for d in (cache / str(UID), other):
        assert sorted(p.name for p in d.iterdir()) == ["copy-6.0.in"]
    assert sorted(p.name for p in wrong.iterdir()) == ["copy-5.0.in", "copy-5.0.sum",
                                                        "copy-6.0.in"]
    assert (cache / "copy-5.0.in").exists()
    assert int(lib.sq_extracted_sweep_copies(str(cache / "none").encode())) == -1
