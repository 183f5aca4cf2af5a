"""The ``squall`` command: ``nccl-check`` (which transport NCCL used) and ``doctor``."""

from __future__ import annotations

import json
import sys

import click

from squall.cliutil import run_cli
from squall.efa import doctor as doctor_mod
from squall.efa import nccl_check
from squall.errors import SquallError


@click.group(help="squall node and NCCL diagnostics.")
def cli() -> None:
    pass


def _read_logs(paths: tuple[str, ...]) -> list[str]:
    lines: list[str] = []
    for path in paths or ("-",):
        if path == "-":
            lines += sys.stdin.read().splitlines()
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines += f.read().splitlines()
        except OSError as exc:
            raise SquallError(f"cannot read log {path}: {exc.strerror}: give an existing "
                              "file, or - for stdin") from None
    return lines


@cli.command("nccl-check")
@click.argument("logs", nargs=-1, metavar="LOG...")
@click.option("--json", "as_json", is_flag=True, help="JSON report on stdout.")
def nccl_check_cmd(logs: tuple[str, ...], as_json: bool) -> None:
    """Report the transport NCCL chose per host and rank (NCCL_DEBUG=INFO output).

    LOG files (or - / nothing for stdin) may hold many ranks mixed. Exits 1 when any
    process fell back to TCP sockets, naming the first host and the likely cause.
    """
    report = nccl_check.parse(_read_logs(logs))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    elif report.processes:
        click.echo(nccl_check.table(report))
    line = nccl_check.verdict(report)
    if line is not None:
        raise SquallError(line)


@cli.command()
@click.option("--sysfs-root", default="/sys", show_default=True, help="sysfs to read.")
@click.option("--dev-root", default="/dev", show_default=True, help="/dev to read.")
@click.option("--opt-root", default="/opt/amazon", show_default=True,
              help="Where the EFA installer put libfabric and aws-ofi-nccl.")
@click.option("--shared-fs", multiple=True, default=("/fsx",), show_default=True,
              help="Shared filesystem mount point to check (repeatable).")
@click.option("--enroot", default="enroot", show_default=True, help="Enroot executable.")
@click.option("--efa/--no-efa", default=True, show_default=True,
              help="Check EFA devices, libraries and memlock.")
@click.option("--json", "as_json", is_flag=True, help="JSON report on stdout.")
@click.option("--quiet", is_flag=True, help="No table; only the failure line on stderr.")
def doctor(sysfs_root: str, dev_root: str, opt_root: str, shared_fs: tuple[str, ...],
           enroot: str, efa: bool, as_json: bool, quiet: bool) -> None:
    """Check this node: EFA devices and libraries, memlock, the shared filesystem,
    Enroot and /dev/fuse. Exits 1 on any failure (usable as HealthCheckProgram or prolog).
    """
    opts = doctor_mod.DoctorOptions(sysfs_root=sysfs_root, dev_root=dev_root,
                                    opt_root=opt_root, shared_fs=shared_fs, enroot=enroot,
                                    efa=efa)
    checks = doctor_mod.run_checks(opts)
    if as_json:
        click.echo(json.dumps({"ok": all(c.ok for c in checks),
                               "checks": [c.to_json() for c in checks]}, indent=2))
    elif not quiet:
        click.echo(doctor_mod.table(checks))
    doctor_mod.verdict(checks)


main = run_cli(cli, "squall")
