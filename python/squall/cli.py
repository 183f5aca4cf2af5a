"""The ``squall`` command: ``nccl-check`` (which transport NCCL used), ``doctor`` and
``steps`` (which rank, node and section slows a job: squall/steps/cli.py)."""

from __future__ import annotations

import sys

import click

from squall.cliutil import (
    CONTEXT_SETTINGS,
    is_quiet,
    json_option,
    log,
    output_options,
    print_json,
    run_cli,
    version_option,
)
from squall.efa import doctor as doctor_mod
from squall.efa import drain as drain_mod
from squall.efa import nccl_check
from squall.errors import SetupError, SquallError, UsageError
from squall.steps.cli import steps as steps_cmd


@click.group(help="squall node and NCCL diagnostics.", context_settings=CONTEXT_SETTINGS,
             no_args_is_help=False)
@version_option("squall")
@output_options
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
            raise SetupError(f"cannot read log {path}: {exc.strerror}: give an existing "
                             "file, or - for stdin") from None
    return lines


@cli.command("failover", hidden=True)
@click.argument("spec")
@json_option
@output_options
def failover_cmd(spec: str, as_json: bool) -> None:
    """Run a job's step with in-job failover on hot spares (written by mksbatch: SPEC is
    the JSON it puts in the script; see docs/failover.md). Its report is the job log's
    lines (--json changes nothing)."""
    from squall.failover.supervise import main as supervise
    sys.exit(supervise(spec))


@cli.command("nccl-check")
@click.argument("logs", nargs=-1, metavar="LOG...")
@json_option
@output_options
def nccl_check_cmd(logs: tuple[str, ...], as_json: bool) -> None:
    """Report the transport NCCL chose per host and rank (NCCL_DEBUG=INFO output).

    LOG files (or - / nothing for stdin) may hold many ranks mixed. Exits 1 when any
    process fell back to TCP sockets, naming the first host and the likely cause; 2 when
    the logs hold no NCCL INFO lines to judge by.
    """
    report = nccl_check.parse(_read_logs(logs))
    if as_json:
        print_json(report.to_json())
    elif report.processes and not is_quiet():
        click.echo(nccl_check.table(report))
    line = nccl_check.verdict(report)
    if line is not None:
        raise (UsageError if report.nccl_lines == 0 else SquallError)(line)


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
@click.option("--drain", is_flag=True,
              help="Record the verdict in Slurm (as HealthCheckProgram): drain this node when "
              "a check fails, resume it when all pass and squall doctor had drained it.")
@click.option("--node", metavar="NAME", default=None,
              help="This node's Slurm name for --drain [default: $SLURMD_NODENAME, else the "
              "short host name].")
@click.option("--scontrol", default="scontrol", show_default=True, metavar="PATH",
              help="scontrol executable for --drain.")
@json_option
@output_options
def doctor(sysfs_root: str, dev_root: str, opt_root: str, shared_fs: tuple[str, ...],
           enroot: str, efa: bool, drain: bool, node: str | None, scontrol: str,
           as_json: bool) -> None:
    """Check this node: EFA devices and libraries, memlock, the shared filesystem,
    Enroot and /dev/fuse. Exits 1 when a check fails, 2 when it cannot check.

    As Slurm's HealthCheckProgram (Slurm ignores the exit status), use --drain: see
    docs/efa.md. Other drains (an admin's) are never changed.
    """
    if node is not None and not drain:
        raise UsageError("--node names the node for --drain: add --drain")
    opts = doctor_mod.DoctorOptions(sysfs_root=sysfs_root, dev_root=dev_root,
                                    opt_root=opt_root, shared_fs=shared_fs, enroot=enroot,
                                    efa=efa)
    checks = doctor_mod.run_checks(opts)
    action = None
    if drain:
        failures = [(c.name, c.detail) for c in checks if not c.ok]
        action = drain_mod.apply(failures, drain_mod.node_name(node), scontrol)
    if as_json:
        report: dict[str, object] = {"ok": all(c.ok for c in checks),
                                     "checks": [c.to_json() for c in checks]}
        if action is not None:
            report["drain"] = action
        print_json(report)
    elif not is_quiet():
        click.echo(doctor_mod.table(checks))
    if action is not None:
        log.warning(action)
    doctor_mod.verdict(checks)


cli.add_command(steps_cmd)

main = run_cli(cli, "squall")
