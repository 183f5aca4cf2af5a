"""The library is usable without the command-line toolkit: importing any module that is not
a CLI (``cli.py``, ``cliutil.py``) leaves click unimported, and they all log through
:mod:`squall.log`."""

from __future__ import annotations

import logging
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import squall
from squall import log as squall_log

CLI_MODULES = ("cli", "cliutil", "__main__")


def library_modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(squall.__path__, "squall.")]
    return sorted(n for n in names if n.rsplit(".", 1)[-1] not in CLI_MODULES)


def test_there_are_library_modules_to_check():
    names = library_modules()
    assert "squall.sqshbuild.build" in names and "squall.mksbatch.render" in names
    assert not any(n.endswith(".cli") for n in names)


def sanitizer_env() -> dict[str, str]:
    """What `make asan` set: the sanitized core aborts in an interpreter without them."""
    keep = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "COVERAGE_PROCESS_START")
    return {k: v for k, v in os.environ.items() if k in keep}


def test_library_modules_do_not_import_click():
    # A fresh interpreter: this one has click loaded by other tests.
    code = ("import importlib, sys\n"
            f"for name in {library_modules()!r}:\n"
            "    importlib.import_module(name)\n"
            "    assert 'click' not in sys.modules, f'{name} imports click'\n")
    root = str(Path(squall.__file__).resolve().parents[1])  # the squall under test
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin", **sanitizer_env()})
    assert proc.returncode == 0, proc.stderr


def test_one_logger_for_library_and_clis():
    from squall import cliutil

    assert squall_log.log is logging.getLogger("squall")
    assert cliutil.log is squall_log.log
