"""Every tier tests this checkout's squall: an editable install of another clone (or a
site-packages copy) would test that code instead, and pass or fail for the wrong reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate import need_root

ROOT = Path(__file__).resolve().parents[1]
# python/: the sources (PYTHONPATH=python or the editable install); build/asan/: the copy
# `make asan` builds beside its sanitized core and puts first on PYTHONPATH.
CHECKOUT_DIRS = (ROOT / "python", ROOT / "build" / "asan")


def imported_from(module_file: str | None) -> Path | None:
    """The checkout directory MODULE_FILE lies under, or None."""
    if not module_file:
        return None
    path = Path(module_file).resolve()
    return next((d for d in CHECKOUT_DIRS if path.is_relative_to(d)), None)


def pytest_configure(config: pytest.Config) -> None:
    try:
        import squall
    except ImportError as exc:
        raise pytest.UsageError(
            f"squall is not importable ({exc}): run with PYTHONPATH={ROOT / 'python'} "
            "or run `bash .ci/install-deps.sh`") from None
    if imported_from(squall.__file__) is None:
        raise pytest.UsageError(
            f"squall is imported from {squall.__file__}, not from this checkout ({ROOT}): "
            f"run with PYTHONPATH={ROOT / 'python'} or run `bash .ci/install-deps.sh`")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """@pytest.mark.needs_root("why") goes through the one gate (tests/gate.py): not root is a
    failure, a skip only with SQUALL_ALLOW_SKIP=1 outside CI. Before the test's fixtures."""
    for mark in item.iter_markers("needs_root"):
        need_root(*mark.args)
