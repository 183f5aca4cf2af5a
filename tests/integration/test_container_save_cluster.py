"""--container-save with NVIDIA's Enroot on images as they come (issue 40).

The base test image carries var/lock and var/run; busybox, a distroless image or one
sqshbuild makes from a small Docker image do not. Enroot then makes those mount points at
the container's start, mode 000 (its mark for "leave out of an export"), and an
unprivileged `enroot export` could not read them: every save of such an image failed, and
the step still exited 0. Here: the save works (absolute and relative paths), the saved
image starts again with the container's state and the image's files unchanged, and a save
that fails after the tasks fails the step with one line.
"""

from __future__ import annotations

import time

import pytest

from .cluster import Cluster
from .images import IMAGE_DIR, MKIMAGE, build_image
from .pyxis_helpers import HOME, last_line, srun

# The test image without var/lock and var/run, as busybox and most small images come.
BARE_SCRIPT = f"{IMAGE_DIR}/mkimage-bare.sh"
BARE_TEXT = MKIMAGE.replace('mkdir -p "$root"/var/{tmp,lock,run}', 'mkdir -p "$root"/var/tmp')


@pytest.fixture(scope="module")
def bare(cluster: Cluster) -> str:
    assert BARE_TEXT != MKIMAGE, "images.py no longer makes var/lock and var/run that way"
    path = build_image(cluster, f"{IMAGE_DIR}/bare.sqsh", "squallbare",
                       script=(BARE_SCRIPT, BARE_TEXT))
    listing = cluster.run(f"unsquashfs -l {path}").out
    assert "squashfs-root/var/run" not in listing and "squashfs-root/var/lock" not in listing
    return path


def saved_once(res_err: str, path: str) -> None:
    said = [line for line in res_err.splitlines() if "exported the container" in line]
    assert said == [f"squall: exported the container to {path}"], res_err


def test_save_absolute_path_starts_again_equal(cluster: Cluster, bare: str) -> None:
    tag = time.time_ns()
    out, tree = f"{HOME}/saved-abs-{tag}.sqsh", f"/tmp/saved-abs-{tag}"
    try:
        res = srun(cluster, f"--container-image={bare} --container-writable "
                            f"--container-save={out}", "echo state-abs > /etc/marker",
                   check=False)
        assert res.rc == 0, res
        saved_once(res.err, out)
        again = srun(cluster, f"--container-image={out}", "cat /etc/marker")
        assert last_line(again) == "state-abs", again
        assert cluster.run(f"stat -c %u {out}").out.strip() == "1000"
        # Equal: every file of the image as it was, plus what the step wrote, plus what
        # Enroot's own start hooks write into a created container (the user's passwd and
        # group lines, localtime, ...). The mount points Enroot made at the start, mode
        # 000 (var/run, var/lock), are left out, as Enroot's export does.
        cluster.run(f"mkdir -p {tree} && "
                    f"unsquashfs -q -no-xattrs -d {tree}/a {bare} >/dev/null && "
                    f"unsquashfs -q -no-xattrs -d {tree}/b {out} >/dev/null")
        diff = cluster.run(f"diff -rq --no-dereference {tree}/a {tree}/b", check=False)
        lost = [line for line in diff.out.splitlines() if line.startswith(f"Only in {tree}/a")]
        changed = [line for line in diff.out.splitlines() if line.startswith("Files ")]
        assert lost == [], diff
        assert changed == [f"Files {tree}/a/etc/{f} and {tree}/b/etc/{f} differ"
                           for f in ("group", "passwd")], diff
        assert f"Only in {tree}/b/etc: marker" in diff.out, diff
        assert f"Only in {tree}/b/var" not in diff.out, diff
        for f in ("group", "passwd"):   # the image's lines kept, Enroot's added
            grown = cluster.run(f"grep -vxFf {tree}/b/etc/{f} {tree}/a/etc/{f}", check=False)
            assert grown.out == "", grown
    finally:
        cluster.run(f"rm -rf {out} {tree}")


def test_save_relative_path_remapped_root(cluster: Cluster, bare: str) -> None:
    name = f"saved-rel-{time.time_ns()}.sqsh"
    try:
        res = srun(cluster, f"--container-image={bare} --container-remap-root "
                            f"--container-writable --container-save=./{name}",
                   "echo state-rel > /marker && id -u", check=False)
        assert res.rc == 0, res
        assert last_line(res) == "0", res
        saved_once(res.err, f"{HOME}/{name}")
        again = srun(cluster, f"--container-image=./{name}", "cat /marker")
        assert last_line(again) == "state-rel", again
    finally:
        cluster.run(f"rm -f {name}")


def test_save_failing_after_the_tasks_fails_the_step(cluster: Cluster, bare: str) -> None:
    # The destination is fine at the start; the task puts a directory where the image
    # goes, so the export at the end cannot be put in place.
    where = f"{HOME}/save-ro-{time.time_ns()}"
    cluster.run(f"mkdir -p {where}")
    try:
        res = srun(cluster, f"--container-image={bare} --container-mounts={where}:/out "
                            f"--container-save={where}/img.sqsh",
                   "mkdir /out/img.sqsh && echo ran", check=False)
        assert "ran" in res.out, res
        assert res.rc != 0, res
        lines = [line for line in res.err.splitlines() if f"{where}/img.sqsh" in line]
        assert len(lines) == 1 and "squall: error:" in lines[0], res
        assert "exported the container" not in res.err, res
        assert cluster.run(f"ls -A {where}").out == "img.sqsh\n", "the save left files"
    finally:
        cluster.run(f"rm -rf {where}")
