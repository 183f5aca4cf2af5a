"""Containers started with the real NVIDIA Enroot installed on the host (.ci/install-deps.sh
builds it from its release source): tiny squashfs images of a few host binaries, and a private
Enroot configuration per test with Enroot's own system mounts (mounts.d/10-system.fstab:
/proc, /sys, /dev, /tmp). Root only."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gate import need_root, need_tool, skip_unless

ENROOT = Path("/usr/bin/enroot")
SYSTEM_FSTAB = Path("/etc/enroot/mounts.d/10-system.fstab")
IMAGE_BINARIES = ("sh", "cat", "echo", "env", "ls", "grep", "id", "touch", "mkdir", "sleep", "true",
                  "stat", "pwd")


@pytest.fixture(scope="module", autouse=True)
def prerequisites() -> None:
    # Enroot is in no package registry: .ci/install-deps.sh builds it from its source.
    skip_unless(ENROOT.is_file() and os.access(ENROOT, os.X_OK), f"{ENROOT} is not installed",
                "bash .ci/install-deps.sh (it builds Enroot from its release source, fetched "
                "and checked against deps/pins.txt; SQUALL_DEPS_MIRROR=DIR without internet)")
    need_tool("mksquashfs", "squashfs-tools")
    need_tool("squashfuse", "squashfuse")
    need_tool("fuse-overlayfs", "fuse-overlayfs")
    need_root("Enroot's containers here are started by root on the host")


def _copy_with_libs(binary: str, root: Path) -> None:
    path = Path(shutil.which(binary) or pytest.fail(f"{binary} not found"))
    libs = subprocess.run(["ldd", str(path)], capture_output=True, text=True).stdout
    for f in [path] + [Path(w) for w in libs.split() if w.startswith("/")]:
        dest = root / f.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            shutil.copy2(f.resolve(), dest)


@pytest.fixture(scope="module")
def base_tree(tmp_path_factory) -> Path:
    """A tiny root filesystem: a few host binaries with their libraries, plus /etc files."""
    root = tmp_path_factory.mktemp("tree") / "rootfs"
    for b in IMAGE_BINARIES:
        _copy_with_libs(b, root)
    # A merged-/usr tree as Debian's: Enroot runs /bin/sh.
    for top in ("bin", "lib", "lib64"):
        if (root / "usr" / top).is_dir() and not (root / top).exists():
            (root / top).symlink_to(f"usr/{top}")
    for d in ("etc", "proc", "sys", "dev", "tmp", "mnt"):
        (root / d).mkdir(exist_ok=True)
    (root / "etc/os-release").write_text("ID=squalltest\nVERSION_ID=1\n")
    return root


def make_image(tree: Path, dest: Path) -> Path:
    subprocess.run(["mksquashfs", str(tree), str(dest), "-noappend", "-quiet", "-no-progress",
                    "-comp", "lzo", "-noD"], check=True, stdout=subprocess.DEVNULL)
    return dest


@pytest.fixture()
def image(base_tree, tmp_path) -> Path:
    return make_image(base_tree, tmp_path / "base.sqsh")


@pytest.fixture()
def env(tmp_path) -> dict[str, str]:
    """A private Enroot configuration (sysconf with Enroot's system mounts, user config, data,
    runtime and temp directories), so that no test reads or writes the host's."""
    sysconf = tmp_path / "sysconf"
    for d in ("environ.d", "mounts.d", "hooks.d"):
        (sysconf / d).mkdir(parents=True)
    shutil.copy(SYSTEM_FSTAB, sysconf / "mounts.d")
    (sysconf / "enroot.conf").write_text(f"ENROOT_DATA_PATH {tmp_path}/data\n")
    (tmp_path / "temp").mkdir()
    e = {k: v for k, v in os.environ.items() if not k.startswith("ENROOT_")}
    e.update(ENROOT_SYSCONF_PATH=str(sysconf), ENROOT_CONFIG_PATH=str(tmp_path / "userconf"),
             ENROOT_RUNTIME_PATH=str(tmp_path / "runtime"), ENROOT_TEMP_PATH=str(tmp_path / "temp"))
    return e
