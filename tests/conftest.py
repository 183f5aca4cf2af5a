"""Every tier tests this checkout's squall: an editable install of another clone (or a
site-packages copy) would test that code instead, and pass or fail for the wrong reason."""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture(autouse=True)
def squall_log_as_found() -> Iterator[None]:
    """A CLI run in the test process (click's CliRunner) configures squall's logger for a
    terminal (its own handler, no propagation, its level); the next test in that process
    would then see nothing in caplog. Each test leaves the logger as it found it, so that
    no test depends on which ran before it in its worker."""
    from squall.log import log

    saved = (list(log.handlers), log.propagate, log.level)
    yield
    log.handlers[:] = saved[0]
    log.propagate = saved[1]
    log.setLevel(saved[2])
