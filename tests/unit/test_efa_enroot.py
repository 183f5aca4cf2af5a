"""enroot/: the hooks.d script run the way Enroot runs hooks (stand-in ENROOT_* files,
prepared sysfs and /opt trees standing in for an EFA node), and shellcheck."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fake_efa_tree import make_image, make_node
from gate import need_tool

ENROOT_DIR = Path(__file__).resolve().parents[2] / "enroot"
HOOK = ENROOT_DIR / "hooks.d" / "90-squall-efa.sh"


def run(node, rootfs, environ_text="", **extra):
    work = rootfs.parent
    (work / "environment").write_text(environ_text)
    (work / "fstab").write_text("")
    env = {"PATH": os.environ["PATH"], "ENROOT_ROOTFS": str(rootfs),
           "ENROOT_ENVIRON": str(work / "environment"), "ENROOT_MOUNTS": str(work / "fstab"),
           "SQUALL_EFA_SYSFS_ROOT": str(node.sysfs), "SQUALL_EFA_OPT_ROOT": str(node.opt),
           **extra}
    proc = subprocess.run([str(HOOK)], env=env, capture_output=True, text=True)
    return proc, (work / "environment").read_text(), (work / "fstab").read_text()


IMAGE_ENV = "PATH=/usr/bin:/bin\nLD_LIBRARY_PATH=/usr/local/cuda/lib64\n"


def test_shellcheck_clean():
    need_tool("shellcheck", "shellcheck")
    proc = subprocess.run(["shellcheck", str(HOOK)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_hook_is_executable():
    assert os.access(HOOK, os.X_OK)  # Enroot runs only executable hooks


def test_environ_d_has_only_safe_settings():
    text = (ENROOT_DIR / "environ.d" / "50-squall-efa.env").read_text()
    pairs = dict(line.split("=", 1) for line in text.splitlines()
                 if line and not line.startswith("#"))
    assert pairs == {"MELLANOX_VISIBLE_DEVICES": "void",
                     "NCCL_SOCKET_IFNAME": "^docker,lo,veth", "FI_EFA_USE_HUGE_PAGE": "0"}


def test_p5_image_without_libs(tmp_path):
    node = make_node(tmp_path / "n", "p5.48xlarge", 32)
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, fstab = run(node, rootfs, IMAGE_ENV)
    assert proc.returncode == 0, proc.stderr
    assert fstab.splitlines() == [
        f"{node.opt}/efa /opt/amazon/efa none x-create=dir,bind,ro,nosuid,nodev",
        f"{node.opt}/ofi-nccl /opt/amazon/ofi-nccl none x-create=dir,bind,ro,nosuid,nodev"]
    added = environ[len(IMAGE_ENV):].splitlines()
    assert added == [
        "LD_LIBRARY_PATH=/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/usr/local/cuda/lib64",
        "MELLANOX_VISIBLE_DEVICES=void", "NCCL_NET_PLUGIN=ofi",
        "NCCL_SOCKET_IFNAME=^docker,lo,veth", "FI_EFA_USE_HUGE_PAGE=0"]


def test_image_with_own_libs_gets_no_mounts(tmp_path):
    node = make_node(tmp_path / "n", "p5.48xlarge", 32)
    rootfs = make_image(tmp_path / "c" / "rootfs", libfabric=True, ofi_nccl=True)
    proc, environ, fstab = run(node, rootfs, IMAGE_ENV, SQUALL_EFA="require")
    assert proc.returncode == 0, proc.stderr
    assert fstab == ""
    assert "LD_LIBRARY_PATH=/opt" not in environ
    assert environ.endswith("NCCL_NET=Libfabric\n")


def test_require_old_plugin_name(tmp_path):
    node = make_node(tmp_path / "n", "p4d.24xlarge", 4, wording="old", ofi_dir="aws-ofi-nccl")
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, fstab = run(node, rootfs, "SQUALL_EFA=require\n")
    assert proc.returncode == 0, proc.stderr
    assert "NCCL_NET=AWS Libfabric\n" in environ
    assert "/opt/amazon/aws-ofi-nccl none" in fstab


def test_values_already_set_win(tmp_path):
    node = make_node(tmp_path / "n", "g5.48xlarge", 1)
    rootfs = make_image(tmp_path / "c" / "rootfs")
    before = "NCCL_SOCKET_IFNAME=ens5\nNCCL_NET_PLUGIN=mine\n"
    proc, environ, _ = run(node, rootfs, before)
    assert proc.returncode == 0, proc.stderr
    added = environ[len(before):]
    assert "NCCL_SOCKET_IFNAME" not in added and "NCCL_NET_PLUGIN" not in added
    assert "FI_PROVIDER" not in environ and "FI_EFA_USE_DEVICE_RDMA" not in environ


def test_cpu_node(tmp_path):
    node = make_node(tmp_path / "n", "c5.xlarge", 0, libfabric=False, ofi_nccl=False)
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, fstab = run(node, rootfs, IMAGE_ENV)
    assert (proc.returncode, proc.stderr, environ, fstab) == (0, "", IMAGE_ENV, "")
    proc, _, _ = run(node, rootfs, IMAGE_ENV, SQUALL_EFA="require")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and "no EFA device" in proc.stderr


def test_no_libraries(tmp_path):
    node = make_node(tmp_path / "n", "p5.48xlarge", 32, libfabric=False, ofi_nccl=False)
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, fstab = run(node, rootfs, IMAGE_ENV)
    assert proc.returncode == 0 and "TCP sockets" in proc.stderr
    assert (environ, fstab) == (IMAGE_ENV, "")
    proc, _, _ = run(node, rootfs, IMAGE_ENV, SQUALL_EFA="require")
    assert proc.returncode == 1 and "no aws-ofi-nccl" in proc.stderr


def test_off_and_bad_mode(tmp_path):
    node = make_node(tmp_path / "n", "p5.48xlarge", 32)
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, fstab = run(node, rootfs, "SQUALL_EFA=off\n")
    assert (proc.returncode, environ, fstab) == (0, "SQUALL_EFA=off\n", "")
    proc, _, _ = run(node, rootfs, "", SQUALL_EFA="maybe")
    assert proc.returncode == 1 and "use auto, require or off" in proc.stderr
