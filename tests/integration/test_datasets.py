"""Datasets as squashfs (issue 40, enroot#180): a `.sqsh` of data given to Pyxis's
`--container-mounts=SRC:DST[:ro]` is mounted read-only at DST, told by its content (the
squashfs magic), not its name; other files bind as Pyxis binds them. Refused in one line:
a file the job user cannot read (also through a link), a dataset with `rw`. The mount is
the step's: no squashfuse and no mount of it left on the node after the job."""

from __future__ import annotations

import re

import pytest

from .cluster import USER, Cluster

D = "/fsx/squall-test/datasets"
MAKE = f"""set -e
mkdir -p {D}/tree/sub
echo hello >{D}/tree/a.txt; chmod 0644 {D}/tree/a.txt
echo secret >{D}/tree/own.txt; chmod 0600 {D}/tree/own.txt
printf '#!/bin/sh\\necho run\\n' >{D}/tree/sub/run.sh; chmod 0755 {D}/tree/sub/run.sh
mksquashfs {D}/tree {D}/data.img -noappend -quiet -no-progress >/dev/null
echo 'a plain file, whatever its name' >{D}/plain.sqsh
ln -s data.img {D}/link.sqsh
printf 'hsqs%0300d' 0 >{D}/damaged.img
"""
ROOT_ONLY = f"{D}/root-only/data.img"


@pytest.fixture(scope="module")
def datasets(cluster: Cluster) -> str:
    # the directory is root's to make (a fresh cluster's /fsx has no squall-test), the
    # test user's to fill
    parent = D.rsplit("/", 1)[0]
    cluster.run(f"[ -d {parent} ] || install -d -o {USER} -g {USER} {parent}; "
                f"rm -rf {D} && install -d -o {USER} -g {USER} {D}", user="root")
    cluster.run(MAKE)   # as the test user, with mksquashfs, on the login node
    cluster.run(f"mkdir -p {D}/root-only && cp {D}/data.img {ROOT_ONLY} && "
                f"chmod 0600 {ROOT_ONLY} && ln -sf {ROOT_ONLY} {D}/root-link.sqsh",
                user="root")
    return D


def srun(cluster: Cluster, image: str, mounts: str, cmd: str) -> tuple[int, str, str]:
    res = cluster.run(f"srun -N1 -w node1 --container-image={image} "
                      f"--container-mounts={mounts} sh -c '{cmd}'", timeout=120, check=False)
    return res.rc, res.out, res.err


def test_a_dataset_is_mounted_read_only_with_its_files_and_modes(
        cluster: Cluster, image: str, datasets: str) -> None:
    show = ("cat /data/a.txt /data/own.txt; /data/sub/run.sh; "
            "stat -c \"%a %U %n\" /data/a.txt /data/own.txt /data/sub/run.sh; "
            "touch /data/new 2>&1 || echo write refused; "
            "grep \" /data \" /proc/self/mountinfo")
    for mounts in (f"{D}/data.img:/data:ro", f"{D}/data.img:/data", f"{D}/link.sqsh:/data"):
        rc, out, err = srun(cluster, image, mounts, show)
        assert rc == 0, (mounts, out, err)
        assert out.startswith("hello\nsecret\nrun\n"), (mounts, out, err)
        assert "644 squall /data/a.txt\n600 squall /data/own.txt\n" \
               "755 squall /data/sub/run.sh\n" in out, (mounts, out, err)
        assert "Read-only file system" in out and "write refused" in out, (mounts, out)
        (line,) = [x for x in out.splitlines() if " /data " in x]
        source = mounts.split(":")[0]
        assert " ro," in line and f"fuse.squashfuse {source} ro," in line, line


def test_under_remap_root_the_files_are_roots_as_the_image_s(
        cluster: Cluster, image: str, datasets: str) -> None:
    res = cluster.run(f"srun -N1 -w node1 --container-image={image} --container-remap-root "
                      f"--container-mounts={D}/data.img:/new/deep/data sh -c 'id -u; "
                      f"cat /new/deep/data/own.txt; stat -c \"%a %U\" /new/deep/data/own.txt'",
                      timeout=120, check=False)
    assert (res.rc, res.out) == (0, "0\nsecret\n600 root\n"), res


def test_a_plain_file_is_bound_as_pyxis_binds_it(
        cluster: Cluster, image: str, datasets: str) -> None:
    rc, out, err = srun(cluster, image, f"{D}/plain.sqsh:/mnt/plain", "cat /mnt/plain")
    assert (rc, out) == (0, "a plain file, whatever its name\n"), err


@pytest.mark.parametrize("mounts, says", [
    (f"{ROOT_ONLY}:/data", f"cannot read {ROOT_ONLY}: Permission denied: make it "
                           "readable by the job's user"),
    (f"{D}/root-link.sqsh:/data:ro", f"cannot read {D}/root-link.sqsh (a link to "
                                     f"{ROOT_ONLY}): Permission denied"),
    (f"{D}/data.img:/data:rw", f"{D}/data.img is a squashfs dataset, mounted read-only: "
                               "drop the rw flag"),
    (f"{D}/damaged.img:/data", f"cannot mount the dataset {D}/damaged.img at /data: "
                               "squashfuse did not serve it"),
])
def test_refused_in_one_line(cluster: Cluster, image: str, datasets: str, mounts: str,
                             says: str) -> None:
    rc, out, err = srun(cluster, image, mounts, "echo ran")
    assert rc != 0 and "ran" not in out, (out, err)
    lines = [x for x in err.splitlines() if "squall: error:" in x]
    assert len(lines) == 1 and says in lines[0], err


def test_the_mount_ends_with_the_step_and_the_job(
        cluster: Cluster, image: str, datasets: str) -> None:
    res = cluster.run(f"salloc -N1 -w node1 bash -c 'srun --container-image={image} "
                      f"--container-mounts={D}/data.img:/data cat /data/a.txt; "
                      f"srun --container-image={image} sh -c \"ls /data | wc -l\"'",
                      timeout=120, check=False)
    # the later step of the job (the kept container) has no dataset: the mount was the step's
    assert res.out == "hello\n0\n", res
    left = ""
    for _ in range(20):
        left = cluster.run("pgrep -a -u squall squashfuse; "
                           f"grep -l {D}/data.img /proc/[0-9]*/mountinfo 2>/dev/null; true",
                           node="node1", user="root").out
        if not left:
            break
        cluster.run("sleep 0.5", node="node1")
    assert left == "", left
    assert not re.search(r"squashfuse", cluster.run("ps -eo user,args", node="node1").out)
