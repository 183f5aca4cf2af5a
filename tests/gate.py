"""The one gate for every test that needs something of the machine (a tool, root, a Docker
engine): when it is missing the test FAILS, with one line naming it and the fix, so that a
missing tool can never pass as "skipped". It skips only when SQUALL_ALLOW_SKIP=1 and CI is
not "true" (a developer's machine without, say, shellcheck); CI sets CI=true, so there a
skip is impossible. Every tool named here is in .ci/apt-packages.txt (tests/unit/test_gate.py
checks it).

Importable from every tier (pyproject.toml puts tests/ on sys.path): ``from gate import
need_tool``. A module or test that needs root says ``@pytest.mark.needs_root("why")``;
tests/conftest.py sends it through need_root."""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

SKIP_VARIABLE = "SQUALL_ALLOW_SKIP"


def skip_allowed() -> bool:
    """SQUALL_ALLOW_SKIP=1, outside CI."""
    return os.environ.get(SKIP_VARIABLE) == "1" and os.environ.get("CI") != "true"


def missing(what: str, fix: str) -> NoReturn:
    """WHAT is not there and FIX gets it: a skip where skip_allowed(), else a failure."""
    if skip_allowed():
        # reported at the test, as a skipif mark's is, not at this line
        try:
            skip = pytest.skip.Exception(f"{what} ({fix})", _use_item_location=True)
        except TypeError:  # a pytest without that keyword
            skip = pytest.skip.Exception(f"{what} ({fix})")
        raise skip
    pytest.fail(f"{what}: {fix} (or {SKIP_VARIABLE}=1 to skip it, outside CI only)",
                pytrace=False)


def skip_unless(condition: object, what: str, fix: str) -> None:
    """Nothing when CONDITION holds, else missing(WHAT, FIX)."""
    if not condition:
        missing(what, fix)


def need_tool(tool: str, package: str) -> str:
    """The path of TOOL, which Debian's PACKAGE installs (named in .ci/apt-packages.txt)."""
    path = shutil.which(tool)
    if path is None:
        missing(f"{tool} is not installed", f"apt-get install {package}")
    return path


def need_root(why: str) -> None:
    """This test runs as root, as CI does: WHY says what it does that needs root."""
    skip_unless(os.geteuid() == 0, f"not root ({why})", "run the tests as root, as CI does")
