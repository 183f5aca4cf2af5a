"""Run the `squall` command in-process for a test: argv, optional stdin, exit code captured."""

from __future__ import annotations

import io
import sys

from squall.cli import main


def run_squall(monkeypatch, capsys, argv: list[str], stdin: str | None = None):
    """``(exit code, stdout, stderr)`` of ``squall ARGV...``."""
    monkeypatch.setattr(sys, "argv", ["squall", *argv])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = 0
    try:
        main()
    except SystemExit as exc:
        rc = exc.code or 0
    out, err = capsys.readouterr()
    return rc, out, err
