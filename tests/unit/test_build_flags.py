"""Warnings are errors for us (make lint, make core, CI) and never for a site building
squall: a newer compiler must not fail `make -C spank install` or `pip install`."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def dry_run(*targets: str) -> str:
    proc = subprocess.run(["make", "-n", "-B", "-C", str(REPO / "spank"), *targets],
                          capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout


def test_install_builds_without_werror():
    out = dry_run("all", "install", "DESTDIR=/nonexistent")
    assert " -Wall -Wextra " in out and "-Werror" not in out


def test_check_build_uses_werror():
    out = dry_run("check-build")
    assert "-Werror" in out


@pytest.mark.parametrize("env,expect", [({}, []), ({"SQUALL_WERROR": "1"}, ["-Werror"])])
def test_cffi_core_werror_only_when_asked(monkeypatch, env, expect):
    monkeypatch.delenv("SQUALL_WERROR", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("cffi_build",
                                                  REPO / "spank" / "core" / "cffi_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.WERROR == expect
