"""squall doctor on prepared trees (stand-ins for an EFA node) and stand-in tools."""

from __future__ import annotations

import dataclasses
import json
import os
import resource

import pytest
from squall_cli import run_squall

from fake_efa_tree import make_node
from squall.efa import detect as efa
from squall.efa import doctor


def run_main(monkeypatch, capsys, *args):
    return run_squall(monkeypatch, capsys, ["doctor", *args])


@pytest.fixture
def enroot_stand_in(tmp_path):
    """A stand-in for `enroot` (test double): answers `version` like Enroot 4.1.1."""
    path = tmp_path / "enroot-stand-in"
    path.write_text("#!/bin/sh\n[ \"$1\" = version ] && echo 4.1.1 && exit 0\nexit 2\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def p5(tmp_path):
    node = make_node(tmp_path / "node", "p5.48xlarge", 32)
    # /dev/fuse stand-in: a link to /dev/null, a character device anyone may open
    (node.dev / "fuse").symlink_to("/dev/null")
    return node


def roots(node):
    return ["--sysfs-root", str(node.sysfs), "--dev-root", str(node.dev),
            "--opt-root", str(node.opt)]


def memlock_ok() -> bool:
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return soft == resource.RLIM_INFINITY or soft >= 16 << 30


def test_efa_node_report(monkeypatch, capsys, p5, enroot_stand_in):
    rc, out, err = run_main(monkeypatch, capsys, *roots(p5), "--shared-fs", "/proc",
                            "--enroot", enroot_stand_in, "--json")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert list(checks) == ["efa-devices", "efa-libraries", "memlock", "shared-fs /proc",
                            "enroot", "/dev/fuse"]
    assert checks["efa-devices"]["ok"]
    assert checks["efa-devices"]["detail"] == "32 EFA device(s), 32 uverbs (p5.48xlarge)"
    assert checks["efa-libraries"]["ok"]
    assert checks["enroot"] == {"name": "enroot", "ok": True, "detail": "version 4.1.1",
                                "fix": ""}
    assert checks["/dev/fuse"]["ok"] and checks["shared-fs /proc"]["ok"]
    assert checks["memlock"]["ok"] is memlock_ok()
    assert rc == (0 if memlock_ok() else 1)
    if not memlock_ok():
        assert "memlock" in err and len(err.splitlines()) == 1


def test_all_pass_exits_zero(monkeypatch, capsys, p5, enroot_stand_in):
    rc, out, err = run_main(monkeypatch, capsys, *roots(p5), "--shared-fs", "/proc",
                            "--enroot", enroot_stand_in, "--no-efa")
    assert (rc, err) == (0, "")
    assert out.splitlines()[0].split() == ["CHECK", "RESULT", "DETAIL"]
    assert all(" pass " in line for line in out.splitlines()[1:])


def test_cpu_node_fails_with_fixes(monkeypatch, capsys, tmp_path):
    node = make_node(tmp_path / "node", "c5.xlarge", 0, libfabric=False, ofi_nccl=False)
    rc, out, err = run_main(monkeypatch, capsys, *roots(node), "--shared-fs",
                            str(tmp_path / "fsx"), "--enroot", str(tmp_path / "no-enroot"))
    assert rc == 1
    table = out.splitlines()
    failed = [line.split()[0] for line in table[1:] if " FAIL " in line]
    assert failed[:2] == ["efa-devices", "efa-libraries"]
    assert {"shared-fs", "enroot", "/dev/fuse"} <= set(failed)
    assert all("-- fix: " in line for line in table[1:] if " FAIL " in line)
    assert len(err.splitlines()) == 1
    assert err.startswith("squall: error: ")
    assert "checks failed (efa-devices, efa-libraries" in err


def test_quiet_prints_only_the_failure_line(monkeypatch, capsys, p5, tmp_path,
                                            enroot_stand_in):
    rc, out, err = run_main(monkeypatch, capsys, *roots(p5), "--no-efa", "--quiet",
                            "--shared-fs", str(tmp_path), "--enroot", enroot_stand_in)
    assert rc == 1 and out == ""
    assert "shared-fs" in err and "nothing is mounted there" in err


def test_bad_root_is_one_line(monkeypatch, capsys, tmp_path):
    rc, out, err = run_main(monkeypatch, capsys, "--sysfs-root", str(tmp_path / "x"))
    assert rc == 2 and out == ""  # could not check: a usage error, not a failed check
    assert err == f"squall: error: --sysfs-root {tmp_path / 'x'} does not exist: give the " \
                  "node's sysfs (default /sys)\n"


def _node(p5) -> efa.EfaNode:
    return efa.detect(str(p5.sysfs), str(p5.dev), str(p5.opt))


def test_degraded_node_fails(tmp_path):
    node = make_node(tmp_path / "n", "p5.48xlarge", 30)
    check = doctor.check_efa_devices(efa.detect(str(node.sysfs), str(node.dev), str(node.opt)))
    assert not check.ok and "has 32 EFA interfaces, found 30" in check.detail


def test_missing_uverbs_fails(tmp_path):
    node = make_node(tmp_path / "n", "g5.48xlarge", 1, uverbs=False)
    check = doctor.check_efa_devices(efa.detect(str(node.sysfs), str(node.dev), str(node.opt)))
    assert not check.ok and "ib_uverbs" in check.fix


@pytest.mark.parametrize("memlock,ok", [(-1, True), (16 << 30, True), (64 << 20, False)])
def test_memlock_threshold(p5, memlock, ok):
    check = doctor.check_memlock(dataclasses.replace(_node(p5), memlock=memlock))
    assert check.ok is ok
    if not ok:
        assert "65536 KiB, below 16 GiB" in check.detail and "LimitMEMLOCK" in check.fix


def test_missing_plugin_only(tmp_path):
    node = make_node(tmp_path / "n", "p5.48xlarge", 32, ofi_nccl=False)
    check = doctor.check_efa_libraries(efa.detect(str(node.sysfs), str(node.dev),
                                                  str(node.opt)))
    assert not check.ok and "aws-ofi-nccl" in check.detail and "libfabric" not in check.detail


def test_fuse_regular_file_fails(tmp_path):
    (tmp_path / "fuse").write_text("")
    check = doctor.check_fuse(str(tmp_path))
    assert not check.ok and "not a character device" in check.detail


def test_fuse_unopenable_fails(tmp_path):
    if os.geteuid() == 0:
        # root opens any mode; an absent device is the failure root can see
        check = doctor.check_fuse(str(tmp_path))
        assert not check.ok and "missing" in check.detail
        return
    (tmp_path / "fuse").symlink_to("/dev/mem")
    check = doctor.check_fuse(str(tmp_path))
    assert not check.ok and "not usable" in check.detail


def test_enroot_failing(tmp_path):
    bad = tmp_path / "enroot-stand-in"
    bad.write_text("#!/bin/sh\necho 'enroot: configuration broken' >&2\nexit 3\n")
    bad.chmod(0o755)
    check = doctor.check_enroot(str(bad))
    assert not check.ok and "exited 3: enroot: configuration broken" in check.detail
