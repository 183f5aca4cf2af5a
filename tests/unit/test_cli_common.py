"""What the three commands share (docs/cli.md): -h/--help, --version, -v/-q, --json, one
error line ``PROG: error: ...`` and the exit status (0 ok, 1 a problem found, 2 could
not run as asked), and click's shell completion. Run in-process (the real ``main()``),
plus a few through a real interpreter where the process boundary matters."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path

import click
import pytest

import squall
from squall import cli as squall_cli
from squall.efa import doctor
from squall.mksbatch import cli as mksbatch_cli
from squall.sqshbuild import cli as sqshbuild_cli

COMMANDS: dict[str, tuple[Callable[[], None], click.Command]] = {
    "squall": (squall_cli.main, squall_cli.cli),
    "sqshbuild": (sqshbuild_cli.main, sqshbuild_cli.cli),
    "mksbatch": (mksbatch_cli.main, mksbatch_cli.command),
}
MODULES = {"squall": "squall.cli", "sqshbuild": "squall.sqshbuild.cli",
           "mksbatch": "squall.mksbatch.cli"}
# Leaf commands that print no result of their own to render as JSON (none today).
NO_JSON: set[str] = set()
RECIPE = "name: t\nnodes: 1\nlog_dir: /l\nlauncher: srun\ncommand: [x]\n"


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], prog: str,
        *argv: str, stdin: str | None = None, env: dict[str, str] | None = None
        ) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``PROG ARGV...`` run by its real main()."""
    monkeypatch.setattr(sys, "argv", [prog, *argv])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    rc = 0
    try:
        COMMANDS[prog][0]()
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err


def leaves(cmd: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from leaves(sub, f"{path} {name}")
    else:
        yield path, cmd


ALL_LEAVES = [pair for prog, (_, cmd) in COMMANDS.items() for pair in leaves(cmd, prog)]


def one_error_line(err: str, prog: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


# --- --version and -h/--help ---------------------------------------------------------

@pytest.mark.parametrize("prog", COMMANDS)
def test_version(monkeypatch, capsys, prog):
    rc, out, err = run(monkeypatch, capsys, prog, "--version")
    assert (rc, out, err) == (0, f"{prog} {squall.__version__}\n", "")
    assert squall.__version__ == version("squall")   # one version, from the package


@pytest.mark.parametrize("prog", COMMANDS)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help(monkeypatch, capsys, prog, flag):
    rc, out, err = run(monkeypatch, capsys, prog, flag)
    assert rc == 0 and err == ""
    assert out.startswith(f"Usage: {prog} ")
    assert "-h, --help" in out and "--version" in out


@pytest.mark.parametrize("path", [p for p, _ in ALL_LEAVES if " " in p])
def test_every_subcommand_has_help(monkeypatch, capsys, path):
    prog, *sub = path.split()
    rc, out, err = run(monkeypatch, capsys, prog, *sub, "-h")
    assert rc == 0 and err == "" and out.startswith(f"Usage: {path} ")


@pytest.mark.parametrize("path,cmd", ALL_LEAVES, ids=[p for p, _ in ALL_LEAVES])
def test_every_command_has_the_common_options(path, cmd):
    flags = {opt for p in cmd.params for opt in p.opts}
    assert {"-v", "--verbose", "-q", "--quiet"} <= flags, path
    if path.split()[0] not in NO_JSON:
        assert "--json" in flags, path


# --- exit status 2: could not run as asked ---------------------------------------------

@pytest.mark.parametrize("prog,argv", [
    ("squall", ["doctor", "--frobnicate"]),
    ("sqshbuild", ["gc", "--frobnicate"]),
    ("mksbatch", ["--frobnicate", "r.yaml"]),
])
def test_unknown_option_is_one_line_and_2(monkeypatch, capsys, prog, argv):
    rc, out, err = run(monkeypatch, capsys, prog, *argv)
    line = one_error_line(err, prog)
    assert rc == 2 and out == ""
    assert "--frobnicate" in line and line.endswith(" --help')")


def test_missing_command_and_argument_are_2(monkeypatch, capsys):
    rc, _, err = run(monkeypatch, capsys, "squall")
    assert rc == 2 and one_error_line(err, "squall") == (
        "squall: error: Missing command (see 'squall --help')")
    rc, _, err = run(monkeypatch, capsys, "mksbatch")
    assert rc == 2 and "Missing argument" in one_error_line(err, "mksbatch")
    rc, _, err = run(monkeypatch, capsys, "sqshbuild")
    assert rc == 2 and "Missing command" in one_error_line(err, "sqshbuild")


@pytest.mark.parametrize("prog", COMMANDS)
def test_verbose_and_quiet_together_is_2(monkeypatch, capsys, prog, tmp_path):
    argv = {"squall": ["doctor", "-v", "-q"], "sqshbuild": ["gc", "-q", "-v"],
            "mksbatch": ["-v", "-q", str(tmp_path / "r.yaml")]}[prog]
    rc, _, err = run(monkeypatch, capsys, prog, *argv)
    assert rc == 2 and "-v/--verbose and -q/--quiet together" in one_error_line(err, prog)


def test_environment_errors_are_2(monkeypatch, capsys, tmp_path):
    rc, _, err = run(monkeypatch, capsys, "squall", "doctor", "--sysfs-root",
                     str(tmp_path / "none"))
    assert rc == 2 and "--sysfs-root" in one_error_line(err, "squall")
    rc, _, err = run(monkeypatch, capsys, "squall", "nccl-check", str(tmp_path / "none.log"))
    assert rc == 2 and "cannot read log" in one_error_line(err, "squall")
    rc, _, err = run(monkeypatch, capsys, "squall", "nccl-check", stdin="no nccl here\n")
    assert rc == 2 and "NCCL_DEBUG=INFO" in one_error_line(err, "squall")
    rc, _, err = run(monkeypatch, capsys, "sqshbuild", "build", "--jobs", "-1", "x:1")
    assert rc == 2 and "--jobs -1" in one_error_line(err, "sqshbuild")
    rc, _, err = run(monkeypatch, capsys, "sqshbuild", "inspect", str(tmp_path / "no.sqsh"))
    assert rc == 2 and "does not exist" in one_error_line(err, "sqshbuild")
    (tmp_path / "r.yaml").write_text(RECIPE)
    rc, _, err = run(monkeypatch, capsys, "mksbatch", str(tmp_path / "r.yaml"), "-o",
                     str(tmp_path / "no" / "dir" / "x.sbatch"))
    assert rc == 2 and "cannot write" in one_error_line(err, "mksbatch")
    rc, _, err = run(monkeypatch, capsys, "mksbatch", str(tmp_path / "none.yaml"))
    assert rc == 2 and "cannot read recipe" in one_error_line(err, "mksbatch")
    rc, _, err = run(monkeypatch, capsys, "squall", "doctor", "--node", "n1")
    assert rc == 2 and "--drain" in one_error_line(err, "squall")


# --- exit status 1: ran, and found a problem ---------------------------------------------

def test_problems_found_are_1(monkeypatch, capsys, tmp_path):
    rc, out, err = run(monkeypatch, capsys, "squall", "doctor", "--no-efa", "--shared-fs",
                       str(tmp_path / "nofs"), "--enroot", str(tmp_path / "no-enroot"), "-q")
    assert rc == 1 and out == "" and "checks failed" in one_error_line(err, "squall")
    log = ("ip-1:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1 - Init\n"
           "ip-1:10:10 [0] NCCL INFO Using network Socket\n")
    rc, out, err = run(monkeypatch, capsys, "squall", "nccl-check", "-q", stdin=log)
    assert rc == 1 and out == "" and "fell back to TCP" in one_error_line(err, "squall")
    notsqsh = tmp_path / "x.sqsh"
    notsqsh.write_bytes(b"not a squashfs image")
    rc, _, err = run(monkeypatch, capsys, "sqshbuild", "inspect", str(notsqsh))
    assert rc == 1 and "not a squashfs image" in one_error_line(err, "sqshbuild")
    (tmp_path / "bad.yaml").write_text(RECIPE.replace("nodes: 1", "nodes: 0"))
    rc, out, err = run(monkeypatch, capsys, "mksbatch", str(tmp_path / "bad.yaml"))
    assert rc == 1 and out == "" and "nodes" in one_error_line(err, "mksbatch")


def test_ok_is_0_and_json_parses(monkeypatch, capsys, tmp_path):
    (tmp_path / "fuse").symlink_to("/dev/null")
    enroot = tmp_path / "enroot"
    enroot.write_text("#!/bin/sh\necho 4.1.1\n")
    enroot.chmod(0o755)
    rc, out, err = run(monkeypatch, capsys, "squall", "doctor", "--no-efa", "--shared-fs",
                       "/proc", "--dev-root", str(tmp_path), "--enroot", str(enroot), "--json")
    assert (rc, err) == (0, "") and json.loads(out)["ok"] is True
    (tmp_path / "cache").mkdir()
    rc, out, err = run(monkeypatch, capsys, "sqshbuild", "gc", "--max-size", "1G",
                       "--cache-dir", str(tmp_path / "cache"), "--json")
    assert (rc, err) == (0, "") and json.loads(out) == {"removed": [], "dry_run": False}


# --- the error edge ----------------------------------------------------------------------

def test_a_bug_is_one_line_and_the_traceback_only_on_request(monkeypatch, capsys):
    def broken(_opts):
        raise KeyError("boom")

    monkeypatch.setattr(doctor, "run_checks", broken)
    rc, _, err = run(monkeypatch, capsys, "squall", "doctor")
    assert rc == 2 and "internal error: KeyError" in one_error_line(err, "squall")
    rc, _, err = run(monkeypatch, capsys, "squall", "doctor", "-vv")
    assert rc == 2 and err.startswith("squall: error: internal error") and "Traceback" in err


def test_verbose_names_the_cause(monkeypatch, capsys):
    from squall.errors import SquallError

    def failing(_opts):
        try:
            raise ConnectionResetError("peer went away")
        except OSError as exc:
            raise SquallError("could not check") from exc

    monkeypatch.setattr(doctor, "run_checks", failing)
    rc, _, err = run(monkeypatch, capsys, "squall", "doctor", "-v")
    assert rc == 1 and err.splitlines() == [
        "squall: error: could not check",
        "squall: cause: ConnectionResetError: peer went away"]


# --- shell completion (click's) ----------------------------------------------------------

@pytest.mark.parametrize("prog,words,cword,expect", [
    ("squall", "squall doc", 1, "plain,doctor"),
    ("sqshbuild", "sqshbuild insp", 1, "plain,inspect"),
    ("mksbatch", "mksbatch --vers", 1, "plain,--version"),
    ("squall", "squall doctor --dra", 2, "plain,--drain"),
])
def test_bash_completion(prog, words, cword, expect):
    env = dict(os.environ, COMP_WORDS=words, COMP_CWORD=str(cword),
               **{f"_{prog.upper()}_COMPLETE": "bash_complete"})
    proc = subprocess.run([sys.executable, "-c",
                           f"import sys; sys.argv[0] = {prog!r}; "
                           f"from {MODULES[prog]} import main; main()"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert expect in proc.stdout.splitlines()


def test_bash_completion_script(tmp_path: Path):
    env = dict(os.environ, _SQUALL_COMPLETE="bash_source")
    proc = subprocess.run([sys.executable, "-c", "from squall.cli import main; main()"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "complete -o nosort -F _squall_completion squall" in \
        proc.stdout
