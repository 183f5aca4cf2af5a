"""enroot/hooks.d/91-squall-steps.sh, run the way Enroot runs hooks (stand-in
ENROOT_ENVIRON / ENROOT_MOUNTS files), with this checkout's squall_steps as the host's
module; and shellcheck."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gate import need_tool

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "enroot" / "hooks.d" / "91-squall-steps.sh"
PYTHON = ROOT / "python"
DEST = "/var/run/squall/python"


def run(tmp_path: Path, environ_text: str = "", src: Path = PYTHON, **extra: str):
    (tmp_path / "environment").write_text(environ_text)
    (tmp_path / "fstab").write_text("")
    env = {"PATH": os.environ["PATH"], "ENROOT_ENVIRON": str(tmp_path / "environment"),
           "ENROOT_MOUNTS": str(tmp_path / "fstab"), "SQUALL_STEPS_PYTHON": str(src),
           **extra}
    proc = subprocess.run([str(HOOK)], env=env, capture_output=True, text=True)
    added = (tmp_path / "environment").read_text()[len(environ_text):]
    return proc, added, (tmp_path / "fstab").read_text()


def test_shellcheck_clean():
    need_tool("shellcheck", "shellcheck")
    proc = subprocess.run(["shellcheck", str(HOOK)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_hook_is_executable():
    assert os.access(HOOK, os.X_OK)


def test_binds_the_module_and_appends_to_the_jobs_pythonpath(tmp_path):
    proc, added, fstab = run(tmp_path, "PATH=/usr/bin\n", PYTHONPATH="/home/u/lib:/opt/x")
    assert proc.returncode == 0, proc.stderr
    assert fstab == (f"{PYTHON}/squall_steps {DEST}/squall_steps none "
                     "x-create=dir,bind,ro,nosuid,nodev\n")
    assert added == f"PYTHONPATH=/home/u/lib:/opt/x:{DEST}\n"


def test_the_images_pythonpath_stays_first(tmp_path):
    _, added, _ = run(tmp_path, "PYTHONPATH=/opt/app\n", PYTHONPATH="/home/u/lib")
    assert added == f"PYTHONPATH=/opt/app:{DEST}\n"


def test_no_pythonpath_at_all(tmp_path):
    _, added, _ = run(tmp_path)
    assert added == f"PYTHONPATH={DEST}\n"


def test_already_there_is_left_alone(tmp_path):
    _, added, fstab = run(tmp_path, f"PYTHONPATH={DEST}:/opt/app\n")
    assert added == "" and len(fstab.splitlines()) == 1  # the bind, no second path


def test_a_host_without_the_module_changes_nothing(tmp_path):
    proc, added, fstab = run(tmp_path, src=tmp_path / "none")
    assert proc.returncode == 0 and added == "" and fstab == ""


@pytest.mark.parametrize("where", ["caller", "image"])
def test_off(tmp_path, where):
    extra = {"SQUALL_STEPS": "off"} if where == "caller" else {}
    environ = "SQUALL_STEPS=off\n" if where == "image" else ""
    proc, added, fstab = run(tmp_path, environ, **extra)
    assert proc.returncode == 0 and added == "" and fstab == ""


def test_a_bad_mode_is_one_line(tmp_path):
    proc, _, _ = run(tmp_path, SQUALL_STEPS="yes")
    assert proc.returncode == 1
    assert proc.stderr == "squall-steps: SQUALL_STEPS=yes: use on or off\n"


def test_the_bound_module_imports_with_the_stdlib_alone(tmp_path):
    """What the container's python3 does with the appended path (the bind's source here)."""
    proc = subprocess.run(["python3", "-S", "-c", "import squall_steps, squall_steps.pytorch;"
                           " print(squall_steps.enabled())"], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(PYTHON)})
    assert proc.stdout.strip() == "False", proc.stderr
