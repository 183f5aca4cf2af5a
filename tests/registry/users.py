"""Acting as other users of one cache (real uids through setpriv, umask 077), for the
shared-cache and hostile-user tests; the ``place`` fixture (conftest) is where they meet."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import ROOT

from gate import need_tool
from squall.sqshbuild.cli import main

USERS = (1000, 1001)
ALL_USERS = (1000, 1001, 1002, 1003)  # the hostile-user tests' attacker and victims


def make_place() -> Path:
    """A directory every user can reach (pytest's tmp_path is root's 0700), with a home
    (0700) for each user."""
    d = Path(tempfile.mkdtemp(prefix="sqshbuild-users-test."))
    os.chmod(d, 0o755)
    for uid in ALL_USERS:
        home = d / f"home{uid}"
        home.mkdir()
        os.chown(home, uid, uid)
        os.chmod(home, 0o700)
    return d


def remove_place(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)


def known(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def as_user(uid: int, place: Path, *argv: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``sqshbuild ARGV`` as ``uid`` (same gid, no other groups), umask 077."""
    env = {"PATH": os.environ["PATH"], "HOME": str(place / f"home{uid}"),
           "PYTHONPATH": str(ROOT / "python"), "LANG": "C.UTF-8",
           **({"SQSHBUILD_BUILDER": os.environ["SQSHBUILD_BUILDER"]}
              if "SQSHBUILD_BUILDER" in os.environ else {}), **(env or {})}
    cmd = [need_tool("setpriv", "util-linux"), f"--reuid={uid}", f"--regid={uid}",
           "--clear-groups", sys.executable,
           "-c", "import os; os.umask(0o077); from squall.sqshbuild.cli import main; main()",
           *argv]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=place)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def as_root(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["sqshbuild", *argv])
    rc = 0
    old = os.umask(0o077)
    try:
        main()
    except SystemExit as exc:
        rc = int(exc.code or 0)
    finally:
        os.umask(old)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


def result(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
