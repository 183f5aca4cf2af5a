"""--container-unshare=ipc's /dev stays private against a container root (issue 30).

spank/plugin/tests/ipcdev_probe.c sets a container up as Enroot does (a user namespace and a
mount namespace of its own, the node's /dev bound recursively on the rootfs's, /dev/shm bound
again, pivot_root), makes the namespace holder with SQ_NS_IPC as the step does after the start
(nsholder.c, ipcdev.c), then, as root of the container's user namespace (what
--container-remap-root gives), unmounts /dev, /dev/shm, /dev/pts and /dev/mqueue lazily
(`umount -l`) until nothing more comes off. Neither a file of the node's /dev/shm nor a node
device (/dev/kmsg, a block device) may ever show, nothing of the node's /dev may be mounted in
the container at all, and what is left at the end is the rootfs's own /dev directory.

Real namespaces, no Slurm and no Enroot: what Enroot itself puts in the container (its hooks'
binds) and the step's tasks joining are the mini cluster's to show
(tests/integration/test_pyxis_unshare.py).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from plugin_probe import build_probe

IMAGE_FILE = "from-the-image"

pytestmark = pytest.mark.needs_root("namespaces and mounts")


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    return build_probe(tmp_path_factory.mktemp("ipcdev") / "probe", "ipcdev_probe.c",
                       "nsholder.c", "ipcdev.c")


@pytest.fixture()
def marker():
    """A file in the node's /dev/shm, removed afterwards."""
    path = Path("/dev/shm") / f"squall-ipcdev-{os.getpid()}-{time.time_ns()}"
    path.write_text("node\n")
    yield path.name
    path.unlink(missing_ok=True)


def host_devs() -> tuple[str, set[str]]:
    """major:minor of the node's /dev, and of every /dev/shm mount (stacked ones too)."""
    dev, shm = "", set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if f[4] == "/dev":
            dev = f[2]
        elif f[4] == "/dev/shm":
            shm.add(f[2])
    return dev, shm


def run(probe: Path, root: Path, marker: str,
        *mode: str) -> tuple[dict[str, str], dict[str, list]]:
    res = subprocess.run([str(probe), str(root), marker, IMAGE_FILE, *mode],
                         capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == (4 if mode else 0), (res.stdout, res.stderr)
    keys: dict[str, str] = {}
    mounts: dict[str, list] = {"before": [], "after": []}
    section = None
    for line in res.stdout.splitlines():
        if line.startswith("--- mountinfo "):
            section = line.split()[-1]
        elif section is not None and line[:1].isdigit():
            mounts[section].append(line.split())
        elif "=" in line:
            k, v = line.split("=", 1)
            keys[k] = v
    return keys, mounts


def test_container_root_cannot_uncover_the_node_s_dev(probe: Path, tmp_path: Path,
                                                      marker: str) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    got, mounts = run(probe, root, marker)
    assert got["setup"] == "ok", got
    # What the container is given: Enroot's restricted /dev, none of the node's.
    before = set(got["before"].split(","))
    assert {"null", "zero", "urandom", "tty", "pts", "shm", "mqueue", "fd"} <= before, got
    assert got["before_marker"] == "absent" and got["before_node_dev"] == "absent", got
    # umount -l until nothing comes off: still nothing of the node's.
    assert int(got["umounts"]) >= 1, got
    assert got["marker"] == "absent", f"the node's /dev/shm came back: {got}"
    assert got["node_dev"] == "absent", f"a node device came back ({got['node_dev']}): {got}"
    assert got["left"] == IMAGE_FILE, f"not the rootfs's own /dev at the end: {got}"


def test_nothing_of_the_node_s_dev_stays_mounted_underneath(probe: Path, tmp_path: Path,
                                                            marker: str) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    got, mounts = run(probe, root, marker)
    assert got["setup"] == "ok", got
    dev, shm = host_devs()
    assert dev and shm, "no /dev or /dev/shm on this node"
    for m in mounts["before"]:
        # The device nodes are bound one by one (root /null, ...), never the whole devtmpfs,
        # and no /dev/shm of the node's is mounted anywhere, hidden or not.
        assert not (m[2] == dev and m[3] == "/"), f"the node's /dev is mounted: {m}"
        assert m[2] not in shm, f"the node's /dev/shm is mounted: {m}"
    assert not any(m[4].startswith("/dev") for m in mounts["after"]), mounts["after"]


def test_a_dev_that_cannot_be_detached_fails_the_holder(probe: Path, tmp_path: Path,
                                                        marker: str) -> None:
    """The container's /dev is the node's, locked (copied from the node's more privileged
    mount namespace, no rootfs of its own): the holder fails (EBUSY) instead of leaving it
    beneath the new /dev, and the step with it."""
    got, _ = run(probe, tmp_path, marker, "locked")
    assert "private /dev/shm and /dev/mqueue" in got["setup"], got
    assert "errno 16)" in got["setup"], got
