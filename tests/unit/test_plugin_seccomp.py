"""The task seccomp filter (spank/plugin/seccomp.c), run outside Slurm by a small probe.

As an unprivileged user, chown of a root-owned file and setuid(0) fail; under the filter
they return 0 and change nothing (Pyxis and Enroot's behaviour), a setfsuid(-1) query still
answers, and /proc/self/status says `Seccomp: 2`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "spank" / "plugin"


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc not installed (apt-get install gcc)")
    out = tmp_path_factory.mktemp("seccomp") / "probe"
    res = subprocess.run([gcc, "-std=gnu11", "-Wall", "-Wextra", "-Werror", f"-I{PLUGIN}",
                          str(PLUGIN / "seccomp.c"), str(PLUGIN / "tests" / "seccomp_probe.c"),
                          "-o", str(out)], capture_output=True, text=True, check=False,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    out.chmod(0o755)
    out.parent.chmod(0o755)
    return out


def run(probe: Path, mode: str, target: Path) -> dict[str, str]:
    res = subprocess.run([str(probe), mode, str(target)], capture_output=True, text=True,
                         check=False, timeout=60)
    assert res.returncode == 0, res.stderr
    return dict(line.split("=", 1) for line in res.stdout.split())


@pytest.fixture
def root_file(tmp_path) -> Path:
    target = tmp_path / "owned"
    target.write_text("x")
    tmp_path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(target, 0, 0)
        target.chmod(0o644)
    return target


def test_without_the_filter_the_calls_fail(probe, root_file):
    got = run(probe, "none", root_file)
    assert got["chown"] == "-1" and got["setuid"] == "-1" and got["setgroups"] == "-1", got
    assert got["seccomp"] == "0", got


def test_under_the_filter_the_calls_succeed_and_change_nothing(probe, root_file):
    got = run(probe, "filter", root_file)
    assert got["seccomp"] == "2", got
    for call in ("chown", "lchown", "setuid", "setresgid", "setgroups"):
        assert got[call] == "0", (call, got)
    assert got["uid"] != "0", got                       # nothing changed
    assert got["fsuid_query"] == got["uid"], got        # setfsuid(-1) runs for real
    if os.geteuid() == 0:
        assert root_file.stat().st_uid == 0
