"""squall-efa-hook run the way Enroot runs it: ENROOT_ROOTFS / ENROOT_ENVIRON /
ENROOT_MOUNTS set, against prepared trees (stand-ins for an EFA node and images)."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

from fake_efa_tree import make_image, make_node
from gate import need_tool
from squall._core import ffi, lib

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "spank" / "core"


@pytest.fixture(scope="module")
def hook(tmp_path_factory) -> Path:
    """The hook built from the sources, as spank/Makefile builds it (core objects linked)."""
    need_tool("gcc", "gcc")
    out = tmp_path_factory.mktemp("hook") / "squall-efa-hook"
    # make asan sets SQUALL_TEST_CFLAGS: the hook is built with the sanitizers too
    cmd = ["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2", f"-I{CORE}",
           *os.environ.get("SQUALL_TEST_CFLAGS", "").split(),
           "-o", str(out), str(ROOT / "spank/hooks/squall-efa-hook.c"),
           *sorted(str(p) for p in CORE.glob("efa_*.c")), str(CORE / "strbuf.c")]
    subprocess.run(cmd, check=True)
    return out


def run_hook(hook, node, rootfs, *args, environ_text="", memlock=None):
    work = rootfs.parent
    environ, mounts = work / "environ", work / "mounts"
    environ.write_text(environ_text)
    mounts.write_text("")
    env = {"PATH": os.environ["PATH"], "ENROOT_ROOTFS": str(rootfs),
           "ENROOT_ENVIRON": str(environ), "ENROOT_MOUNTS": str(mounts), "ENROOT_PID": "1"}

    def limits() -> None:
        if memlock is not None:
            hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
            low = memlock if hard == resource.RLIM_INFINITY else min(memlock, hard)
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (low, low))

    argv = [str(hook), "--sysfs-root", str(node.sysfs), "--dev-root", str(node.dev),
            "--opt-root", str(node.opt), *args]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, preexec_fn=limits)
    return proc, environ.read_text(), mounts.read_text()


@pytest.fixture
def p5(tmp_path):
    return make_node(tmp_path / "node", "p5.48xlarge", 32)


def test_image_without_libs_gets_mounts_and_env(hook, p5, tmp_path):
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, mounts = run_hook(hook, p5, rootfs, "--mode", "require")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    opt = p5.opt.resolve()
    assert mounts.splitlines() == [
        f"{opt}/efa /opt/amazon/efa none x-create=dir,bind,ro,nosuid,nodev",
        f"{opt}/ofi-nccl /opt/amazon/ofi-nccl none x-create=dir,bind,ro,nosuid,nodev",
    ]
    assert environ.splitlines() == [
        "MELLANOX_VISIBLE_DEVICES=void",
        # the image's /etc/environment value stays behind the host dirs
        "LD_LIBRARY_PATH=/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/usr/local/cuda/lib64",
        "NCCL_NET_PLUGIN=ofi",
        "NCCL_SOCKET_IFNAME=^docker,lo,veth",
        "FI_EFA_USE_HUGE_PAGE=0",
        "NCCL_NET=Libfabric",
    ]


def test_environ_so_far_wins_over_image_environment(hook, p5, tmp_path):
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, _ = run_hook(hook, p5, rootfs, environ_text="A=1\nLD_LIBRARY_PATH=/x\n")
    assert proc.returncode == 0, proc.stderr
    assert environ.startswith("A=1\nLD_LIBRARY_PATH=/x\n")  # appended, not rewritten
    assert "LD_LIBRARY_PATH=/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/x\n" in environ


def test_image_with_own_plugin_gets_no_mounts(hook, p5, tmp_path):
    rootfs = make_image(tmp_path / "c" / "rootfs", libfabric=True, ofi_nccl=True)
    proc, environ, mounts = run_hook(hook, p5, rootfs)
    assert proc.returncode == 0, proc.stderr
    assert mounts == ""
    assert "LD_LIBRARY_PATH" not in environ
    assert "NCCL_NET_PLUGIN=ofi\n" in environ
    assert "NCCL_NET=" not in environ  # auto mode


def test_user_set_names_are_left_alone(hook, p5, tmp_path):
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, mounts = run_hook(hook, p5, rootfs, "--user-set",
                                     "NCCL_SOCKET_IFNAME,NCCL_NET_PLUGIN")
    assert proc.returncode == 0, proc.stderr
    assert "NCCL_SOCKET_IFNAME" not in environ and "NCCL_NET_PLUGIN" not in environ
    assert "FI_EFA_USE_HUGE_PAGE=0" in environ and mounts


def test_require_without_libraries_aborts_the_start(hook, tmp_path):
    node = make_node(tmp_path / "node", "p5.48xlarge", 32, libfabric=False, ofi_nccl=False)
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, mounts = run_hook(hook, node, rootfs, "--mode", "require")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "no aws-ofi-nccl" in lines[0]
    assert environ == "" and mounts == ""


def test_memlock_is_left_to_the_plugins_check(hook, p5, tmp_path):
    # The plugin refuses (require) or warns (auto) before the container starts; the
    # hook must not print the warning a second time per task.
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, _ = run_hook(hook, p5, rootfs, "--mode", "require", memlock=64 << 20)
    assert proc.returncode == 0 and proc.stderr == ""
    assert "NCCL_NET=Libfabric" in environ


def test_cpu_node_auto_writes_nothing(hook, tmp_path):
    node = make_node(tmp_path / "node", "c5.xlarge", 0, libfabric=False, ofi_nccl=False)
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, mounts = run_hook(hook, node, rootfs)
    assert (proc.returncode, proc.stderr, environ, mounts) == (0, "", "", "")


def test_off_writes_nothing(hook, p5, tmp_path):
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, mounts = run_hook(hook, p5, rootfs, "--mode", "off")
    assert (proc.returncode, environ, mounts) == (0, "", "")


def test_outside_enroot_is_a_clear_error(hook, p5, tmp_path):
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc = subprocess.run([str(hook), "--sysfs-root", str(p5.sysfs), "--dev-root",
                           str(p5.dev), "--opt-root", str(p5.opt)],
                          env={"ENROOT_ROOTFS": str(rootfs)}, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "ENROOT_ENVIRON is not set" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_bad_mode_is_a_clear_error(hook, p5, tmp_path):
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, _, _ = run_hook(hook, p5, rootfs, "--mode", "sometimes")
    assert proc.returncode == 1 and "auto, require or off" in proc.stderr


def test_hook_argv_from_the_core(tmp_path):
    keep = [ffi.new("char[]", s) for s in (b"/fsx/efa-fake/sys", b"", b"/o", b"NCCL_DEBUG",
                                         b"INFO")]
    roots = ffi.new("struct sq_efa_roots *", {"sysfs": keep[0], "dev": keep[1], "opt": keep[2]})
    req = ffi.new("struct sq_efa_request *", {"mode": lib.SQ_EFA_SETTING_REQUIRE,
                                              "user_set": keep[3], "nccl_debug": keep[4]})
    argv = lib.sq_efa_hook_argv(b"/usr/local/libexec/squall/squall-efa-hook", roots, req)
    out = []
    i = 0
    while argv[i] != ffi.NULL:
        out.append(ffi.string(argv[i]).decode())
        i += 1
    lib.sq_efa_argv_free(argv)
    assert out == ["/usr/local/libexec/squall/squall-efa-hook", "--mode", "require",
                   "--sysfs-root", "/fsx/efa-fake/sys", "--opt-root", "/o",
                   "--user-set", "NCCL_DEBUG", "--nccl-debug", "INFO"]


def test_unknown_option_is_one_line(hook, p5, tmp_path):
    rootfs = make_image(tmp_path / "c" / "rootfs")
    proc, environ, _ = run_hook(hook, p5, rootfs, "--bogus")
    assert proc.returncode == 1 and environ == ""
    assert proc.stderr.startswith("squall: squall-efa-hook: bad option '--bogus': use [--mode")
    assert len(proc.stderr.splitlines()) == 1
