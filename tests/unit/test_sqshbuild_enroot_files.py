"""/etc/rc, /etc/environment, /etc/fstab generated from an image config, and rc run by sh."""

from __future__ import annotations

import subprocess

import pytest

from squall.errors import SquallError
from squall.sqshbuild.enroot_files import generate


def run_rc(rc: str, tmp_path, *args: str) -> str:
    path = tmp_path / "rc"
    path.write_text(rc)
    return subprocess.run(["sh", str(path), *args], capture_output=True, text=True,
                          check=True, cwd="/").stdout


def test_entrypoint_and_cmd_semantics(tmp_path):
    wd = tmp_path / "wd"
    files = generate({"config": {"Entrypoint": ["sh", "-c", 'echo "$PWD|$0|$*"', "ep"],
                                 "Cmd": ["it's", "two words"], "WorkingDir": str(wd)}})
    assert run_rc(files.rc, tmp_path) == f"{wd}|ep|it's two words\n"
    assert run_rc(files.rc, tmp_path, "a", "b c") == f"{wd}|ep|a b c\n"
    assert wd.is_dir()  # rc creates the working directory


def test_cmd_only_is_replaced_by_arguments(tmp_path):
    files = generate({"config": {"Cmd": ["echo", "default"]}})
    assert run_rc(files.rc, tmp_path) == "default\n"
    assert run_rc(files.rc, tmp_path, "echo", "given") == "given\n"
    assert files.workdir == "/"


def test_neither_means_sh():
    files = generate({"config": {}})
    assert "exec /bin/sh" in files.rc
    assert 'exec "$@"' in files.rc


def test_environment_fstab_labels():
    files = generate({"config": {"Env": ["A=1", "B=x y=z"], "Volumes": {"/b": {}, "/a dir": {}},
                                 "Labels": {"k": "v\nw"}}})
    assert files.environment == "A=1\nB=x y=z\n"
    assert files.fstab.splitlines() == [
        "${ENROOT_ROOTFS}/a\\040dir /a\\040dir none x-create=dir,bind,rw,nosuid,nodev",
        "${ENROOT_ROOTFS}/b /b none x-create=dir,bind,rw,nosuid,nodev",
    ]
    assert files.rc.startswith("# k v w\n\n")
    assert set(files.as_synthetic()) == {"etc/rc", "etc/rc.local", "etc/environment",
                                         "etc/fstab"}


def test_docker_inspect_style_and_errors():
    assert generate({"Config": {"Env": ["X=1"]}}).environment == "X=1\n"
    with pytest.raises(SquallError, match="Env"):
        generate({"config": {"Env": [1, 2]}})
