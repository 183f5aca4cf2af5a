"""The job epilog removes the job's copies of its images (spank/core/extracted_name.c, via
cffi; issue 27).

A step's first node sends the image to every node of the step (spank/keeper/shared_copy.h,
`LOCAL_CACHE/UID/copy-JOBID.STEP.*`); a node whose extraction does not take its copy (its
kept container started in an earlier step, a failover's survivor) would keep an image-sized
file for a day. The epilog, as root, removes this job's, only this job's, never following a
link and never a directory, in the user's directory as the plugin checks it.
"""

from __future__ import annotations

import os
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
