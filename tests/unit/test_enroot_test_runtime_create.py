"""`enroot create` of the Enroot TEST DOUBLE, as Enroot's (issue 22).

Facts (Enroot's runtime.sh and common.sh): create runs ``unsquashfs -user-xattrs -d ROOTFS
IMAGE`` (only user.* extended attributes come out) and then ``common::fixperms``, which
gives directories the owner cannot write u+w and files it cannot read u+r (within five
levels), in one find run. It must cost about what unsquashfs costs: a start of a created
container is what users pick to save time. Runs as root on the host.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import test_enroot_test_runtime as rt

# The runtime tests' fixtures, registered in this module by name.
prerequisites, base_tree, env, image = rt.prerequisites, rt.base_tree, rt.env, rt.image
enroot, make_image = rt.enroot, rt.make_image


def test_create_makes_the_tree_usable_by_its_owner(env, base_tree, tmp_path):
    tree = tmp_path / "t"
    shutil.copytree(base_tree, tree, symlinks=True)
    locked = tree / "usr/share/locked"
    locked.mkdir(parents=True)
    (locked / "secret").write_text("s\n")
    (tree / "etc/unreadable").write_text("u\n")
    os.chmod(locked / "secret", 0o200)
    os.chmod(tree / "etc/unreadable", 0o000)
    os.chmod(locked, 0o555)
    img = tmp_path / "perm.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(img), "-noappend", "-quiet", "-no-progress"],
                   check=True, stdout=subprocess.DEVNULL)
    os.chmod(locked, 0o755)
    enroot(env, "create", "-n", "perm", str(img))
    data = Path(env["SQUALL_T_BASE"]) / "data/perm"
    assert stat.S_IMODE((data / "usr/share/locked").stat().st_mode) == 0o755
    assert stat.S_IMODE((data / "usr/share/locked/secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((data / "etc/unreadable").stat().st_mode) == 0o400
    assert stat.S_IMODE((data / "etc/os-release").stat().st_mode) == 0o644   # untouched
    enroot(env, "remove", "-f", "perm")


def test_create_extracts_only_user_xattrs(env, base_tree, tmp_path):
    tree = tmp_path / "t"
    shutil.copytree(base_tree, tree, symlinks=True)
    f = tree / "etc/os-release"
    try:
        os.setxattr(f, "user.squall", b"kept")
        os.setxattr(f, "trusted.squall", b"dropped")
    except OSError as e:
        pytest.fail(f"{tmp_path} does not take user and trusted xattrs: {e}")
    img = tmp_path / "x.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(img), "-noappend", "-quiet", "-no-progress"],
                   check=True, stdout=subprocess.DEVNULL)
    enroot(env, "create", "-n", "xa", str(img))
    out = Path(env["SQUALL_T_BASE"]) / "data/xa/etc/os-release"
    assert os.getxattr(out, "user.squall") == b"kept"
    assert "trusted.squall" not in os.listxattr(out)


def many_files_tree(root: Path, dirs: int = 40, files: int = 100) -> Path:
    """About 4000 small files: a per-file step in create would show at once."""
    block = os.urandom(4096)
    for d in range(dirs):
        sub = root / f"d{d:02}"
        sub.mkdir(parents=True)
        for i in range(files):
            (sub / f"f{i:03}").write_bytes(block[i:] + block[:i])
    return root


def test_create_costs_what_unsquashfs_costs(env, base_tree, tmp_path):
    tree = tmp_path / "big"
    shutil.copytree(base_tree, tree, symlinks=True)
    many_files_tree(tree / "usr/share/many")
    img = tmp_path / "big.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(img), "-noappend", "-quiet", "-no-progress",
                    "-comp", "lzo", "-noD"], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(tree)
    # In memory when the host has it: disk write-back on a shared VM drowns the difference.
    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(dir=shm if os.access(shm, os.W_OK) else tmp_path))
    e = dict(env, ENROOT_DATA_PATH=str(work / "data"))
    plain, created = [], []
    try:
        for i in range(3):   # interleaved, the best of each: the host is shared
            t0 = time.perf_counter()
            subprocess.run(["unsquashfs", "-no-progress", "-quiet", "-user-xattrs", "-d",
                            str(work / f"plain{i}"), str(img)], check=True)
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            enroot(e, "create", "-n", f"c{i}", str(img))
            created.append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(work)
    assert min(created) <= 1.5 * min(plain) + 0.5, (plain, created)
