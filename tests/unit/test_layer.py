"""squall-layer (spank/hooks/squall-layer.c): a fresh layer per step on a kept container,
and a shared one (--share) on a container started for a step.

A container is started with the real Enroot on the host (tests/unit/enroot_host.py: real
namespaces, squashfuse, kernel overlayfs) and stopped as the plugin keeps it; squall-layer is
run the way the plugin runs it (fds 3-6), and processes then join its mount namespace as
tasks do. What one layer writes - in the root and in the runtime's tmpfs mounts - no other
layer and not the kept container sees; everything else (binds, /proc) is there as in the
container. Root only.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import enroot_host as rt
import pytest

from squall._core import ffi, lib

ROOT = Path(__file__).resolve().parents[2]
prerequisites, base_tree, env, image = rt.prerequisites, rt.base_tree, rt.env, rt.image
# Enroot mounts a tmpfs only on a directory that exists, unless told to create it.
SCRATCH = "tmpfs:/mnt/scratch:tmpfs:x-create=dir"


@pytest.fixture(scope="module")
def layer_bin(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("layer") / "squall-layer"
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2", "-o", str(out),
                    str(ROOT / "spank/hooks/squall-layer.c")], check=True)
    return out


class Kept:
    """A container started and stopped itself: the plugin's kept container."""

    def __init__(self, env: dict[str, str], image: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(rt.ENROOT), "start", *args, str(image), "sh", "-c",
             "cd /etc; kill -STOP $$; exit 0"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)
        _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            raise AssertionError(self.proc.stderr.read())

    def renew_list(self) -> list[str]:
        out = ffi.new("char[]", 1024)
        assert lib.sq_mountinfo_fresh_tmpfs(
            Path(f"/proc/{self.proc.pid}/mountinfo").read_bytes(),
            Path("/proc/self/mountinfo").read_bytes(), out, 1024) == 0
        return ffi.string(out).decode().split()

    def close(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.wait(timeout=30)
        self.proc.stdout.close(), self.proc.stderr.close()


class Layer:
    def __init__(self, layer_bin: Path, kept: Kept, share: bool = False) -> None:
        pid = kept.proc.pid
        userns = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
        mntns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
        ready_r, ready_w = os.pipe()
        rel_r, self.release = os.pipe()

        def place() -> None:
            for i, fd in enumerate((userns, mntns, ready_w, rel_r)):
                os.dup2(fd, 3 + i)

        args = [str(layer_bin), "--pid", str(pid)]
        for dev in [] if share else kept.renew_list():
            args += ["--renew", dev]
        args += ["--share"] if share else []
        self.proc = subprocess.Popen(args, preexec_fn=place, pass_fds=(3, 4, 5, 6),
                                     stderr=subprocess.PIPE)
        for fd in (userns, mntns, ready_w, rel_r):
            os.close(fd)
        with os.fdopen(ready_r) as f:
            line = f.readline()
        if line != f"ready {self.proc.pid}\n":
            raise AssertionError(line + self.proc.stderr.read().decode())

    def run(self, script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", "-t", str(self.proc.pid), "-U", "-m", "-w",
                               "--preserve-credentials", "sh", "-c", script],
                              capture_output=True, text=True, timeout=30)

    def close(self) -> None:
        os.close(self.release)
        assert self.proc.wait(timeout=10) == 0
        self.proc.stderr.close()


@pytest.fixture()
def kept_rw(env, image):
    k = Kept(dict(env, ENROOT_ROOTFS_WRITABLE="y"), image, "-m", SCRATCH)
    yield k
    k.close()


def test_each_layer_has_its_own_writable_root_and_tmpfs(layer_bin, kept_rw):
    a, b = Layer(layer_bin, kept_rw), Layer(layer_bin, kept_rw)
    try:
        assert a.run("echo A > /etc/written && echo A > /mnt/scratch/file").returncode == 0
        assert a.run("cat /etc/written /mnt/scratch/file").stdout == "A\nA\n"
        seen = b.run("cat /etc/written /mnt/scratch/file 2>&1; grep ^ID= /etc/os-release")
        assert "No such file" in seen.stdout and "ID=squalltest" in seen.stdout, seen
        # The kept container's own root never sees a layer's writes.
        assert not Path(f"/proc/{kept_rw.proc.pid}/root/etc/written").exists()
        # The step starts where the container's first process is; /proc works.
        cwd = b.run("pwd; grep -c ^Name: /proc/self/status")
        assert cwd.stdout.split() == ["/etc", "1"], cwd
    finally:
        a.close()
        b.close()
    # A new layer after those: nothing of theirs.
    c = Layer(layer_bin, kept_rw)
    try:
        assert c.run("ls /etc/written 2>&1").returncode != 0
    finally:
        c.close()


def test_read_only_container_gives_read_only_layers_with_fresh_tmpfs(layer_bin, env, image):
    k = Kept(dict(env, ENROOT_ROOTFS_WRITABLE="n"), image, "-m", SCRATCH)
    try:
        a, b = Layer(layer_bin, k), Layer(layer_bin, k)
        try:
            ro = a.run("touch /etc/x 2>&1; echo t > /mnt/scratch/t && cat /mnt/scratch/t")
            assert "Read-only file system" in ro.stdout and ro.stdout.endswith("t\n"), ro
            assert b.run("ls /mnt/scratch").stdout == ""
        finally:
            a.close()
            b.close()
    finally:
        k.close()


def test_binds_are_the_containers(layer_bin, env, image, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("host data\n")
    k = Kept(env, image, "-m", f"{data}:/mnt/data")
    try:
        a = Layer(layer_bin, k)
        try:
            assert a.run("cat /mnt/data/f").stdout == "host data\n"
            assert a.run("echo more > /mnt/data/g").returncode == 0
            assert (data / "g").read_text() == "more\n"   # a bind is shared, as in Pyxis
        finally:
            a.close()
    finally:
        k.close()


def test_a_shared_layer_is_the_container_seen_from_a_namespace_of_its_own(layer_bin, kept_rw):
    """--share: what the tasks write in the root and the runtime's tmpfs mounts is the
    container's; only the namespace is theirs (so that they, not the container's stopped
    first process, are what `enroot list -f` shows)."""
    a = Layer(layer_bin, kept_rw, share=True)
    try:
        assert a.run("echo A > /etc/shared && echo A > /mnt/scratch/shared").returncode == 0
        first = kept_rw.proc.pid
        assert Path(f"/proc/{first}/root/etc/shared").read_text() == "A\n"
        assert Path(f"/proc/{first}/root/mnt/scratch/shared").read_text() == "A\n"
        own, container = os.readlink(f"/proc/{a.proc.pid}/ns/mnt"), \
            os.readlink(f"/proc/{first}/ns/mnt")
        assert own != container
        cwd = a.run("pwd; grep -c ^Name: /proc/self/status")
        assert cwd.stdout.split() == ["/etc", "1"], cwd
        b = Layer(layer_bin, kept_rw, share=True)
        try:
            assert b.run("cat /etc/shared /mnt/scratch/shared").stdout == "A\nA\n"
        finally:
            b.close()
    finally:
        a.close()
