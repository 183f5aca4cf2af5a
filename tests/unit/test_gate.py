"""tests/gate.py, the one gate every test that needs something of the machine goes through:
a skip only with SQUALL_ALLOW_SKIP=1 outside CI, else a failure naming the fix; no skip
anywhere else; and every Debian package a need_tool() call names is one
.ci/apt-packages.txt installs."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gate

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Essential in Debian (always installed), so .ci/apt-packages.txt need not name them.
ESSENTIAL = {"perl-base", "coreutils", "bash"}


@pytest.fixture
def allow(monkeypatch):
    monkeypatch.setenv("SQUALL_ALLOW_SKIP", "1")
    monkeypatch.delenv("CI", raising=False)


def test_a_met_condition_does_nothing(monkeypatch):
    monkeypatch.setenv("CI", "true")
    gate.skip_unless(True, "x is not installed", "apt-get install x")
    assert gate.need_tool("sh", "dash") == shutil.which("sh")


def test_skips_with_the_variable_outside_ci(allow):
    with pytest.raises(pytest.skip.Exception, match=r"no-such-tool-4f1 is not installed "
                       r"\(apt-get install pkg-4f1\)"):
        gate.need_tool("no-such-tool-4f1", "pkg-4f1")


@pytest.mark.parametrize("env", [
    {"SQUALL_ALLOW_SKIP": "1", "CI": "true"},   # CI: never a skip, whatever the variable
    {"CI": "true"},
    {},                                          # a developer who did not ask for skips
    {"SQUALL_ALLOW_SKIP": "yes"},                # only "1" allows it
])
def test_fails_in_ci_or_without_the_variable(monkeypatch, env):
    monkeypatch.delenv("SQUALL_ALLOW_SKIP", raising=False)
    monkeypatch.delenv("CI", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(pytest.fail.Exception) as exc:
        gate.need_tool("no-such-tool-4f1", "pkg-4f1")
    msg = str(exc.value)
    assert msg.startswith("no-such-tool-4f1 is not installed: apt-get install pkg-4f1"), msg
    assert "SQUALL_ALLOW_SKIP=1" in msg and "\n" not in msg


def test_need_root_says_why(monkeypatch, allow):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match=r"not root \(chown\)"):
        gate.need_root("chown")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"not root \(chown\): run the tests as root"):
        gate.need_root("chown")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    gate.need_root("chown")


PROBE = '''
import os
import pytest

os.geteuid = lambda: 1000  # not root, whoever runs this


@pytest.mark.needs_root("probe")
def test_needs_root():
    pass
'''


@pytest.mark.parametrize("env, outcome", [({"SQUALL_ALLOW_SKIP": "1"}, "1 skipped"),
                                          ({"SQUALL_ALLOW_SKIP": "1", "CI": "true"}, "1 error"),
                                          ({}, "1 error")])
def test_the_needs_root_mark_goes_through_the_gate(tmp_path, env, outcome):
    """tests/conftest.py turns @pytest.mark.needs_root into need_root, before the test."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    run_env = {k: v for k, v in os.environ.items() if k not in ("CI", "SQUALL_ALLOW_SKIP")}
    run_env.update(env, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(TESTS)]))
    # this project's pytest settings and tests/conftest.py, on a test outside the tree
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
                           "-p", "conftest", str(probe)], cwd=tmp_path, env=run_env,
                          capture_output=True, text=True, timeout=120)
    assert outcome in proc.stdout, proc.stdout + proc.stderr
    assert "not root (probe)" in proc.stdout, proc.stdout
    if outcome == "1 skipped":  # reported at the test, not at tests/gate.py
        assert "SKIPPED [1] test_probe.py:" in proc.stdout, proc.stdout


def need_tool_calls() -> list[tuple[Path, int, str, str]]:
    """(file, line, tool, package) of every need_tool("tool", "package") under tests/."""
    calls = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
                    and getattr(node.func, "id", getattr(node.func, "attr", "")) == "need_tool"
                    and path.name != "test_gate.py"):
                # the package a literal (the tool may be a loop's name), so this can check it
                pkg = node.args[1] if len(node.args) == 2 else None
                assert isinstance(pkg, ast.Constant), f"{path}:{node.lineno}: name the package"
                tool = node.args[0]
                calls.append((path, node.lineno, getattr(tool, "value", ast.unparse(tool)),
                              pkg.value))
    return calls


def test_every_package_a_test_needs_is_one_ci_installs():
    listed = {line.strip() for line in (ROOT / ".ci" / "apt-packages.txt").read_text()
              .splitlines() if line.strip() and not line.startswith("#")}
    calls = need_tool_calls()
    assert len(calls) >= 10, calls  # the walk found them
    missing = [f"{p.relative_to(ROOT)}:{n}: {tool} from {pkg}" for p, n, tool, pkg in calls
               if pkg not in listed | ESSENTIAL]
    assert not missing, "not in .ci/apt-packages.txt: " + "; ".join(missing)


def test_no_skip_goes_around_the_gate():
    """pytest.skip / skipif / importorskip only in tests/gate.py: anything else would let a
    test pass as skipped in CI."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name in ("gate.py", "test_gate.py"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if any(w in line for w in ("pytest.skip", "skipif", "importorskip", "mark.skip")):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
