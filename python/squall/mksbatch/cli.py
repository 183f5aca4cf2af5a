"""``mksbatch``: turn a recipe into an sbatch script; optionally submit and follow it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from squall.cliutil import CONTEXT_SETTINGS, is_quiet, log, output_options, run_cli, version_option
from squall.errors import SetupError, SquallError
from squall.mksbatch.recipe import load_recipe
from squall.mksbatch.render import render
from squall.mksbatch.watch import watch
from squall.slurm import BACKENDS, client


def write_atomic(path: Path, text: str, mode: int = 0o755) -> None:
    """Write ``text`` to ``path`` so readers see the old file or the whole new one."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise SetupError(f"cannot write {path}: {exc.strerror}: check that the directory "
                         "exists and is writable") from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise SetupError(f"cannot write {path}: {exc.strerror}") from None


def make_log_dir(path: str) -> None:
    """Slurm does not create the output directory; a job whose log cannot open fails silently."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"cannot create log_dir {path}: {exc.strerror}: create it on shared "
                         "storage the nodes see, or change log_dir in the recipe") from None


@click.command(context_settings=CONTEXT_SETTINGS)
@version_option("mksbatch")
@output_options
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the script to this file (atomically) instead of printing it.")
@click.option("--submit", is_flag=True, help="Submit the script and print the job id.")
@click.option("--watch", "follow", is_flag=True,
              help="Submit, then follow the job until it ends (states, requeues, restarts).")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="Slurm client backend for --submit/--watch.")
@click.option("--poll", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
              help="Seconds between state polls with --watch.")
def command(recipe: str, output: str | None, submit: bool, follow: bool, backend: str,
            poll: float) -> None:
    """Render RECIPE (YAML) into an sbatch script that gang-allocates its nodes, survives
    node failure by requeueing, and resumes from the newest complete checkpoint."""
    parsed = load_recipe(recipe)
    script = render(parsed)
    if output:
        write_atomic(Path(output), script)
        log.info("wrote %s", output)
    elif not (submit or follow):
        click.echo(script, nl=False)
        return
    if not (submit or follow):
        return
    slurm = client(backend)
    make_log_dir(parsed.log_dir)
    job_id = slurm.submit(script, workdir=os.getcwd())
    click.echo(job_id)
    if follow:
        final = watch(slurm, job_id, lambda line: None if is_quiet() else click.echo(line),
                      poll=poll)
        if final.state != "COMPLETED":
            raise SquallError(f"job {job_id} ended {final.state} after {final.restarts} "
                              f"restart(s): see its log in the recipe's log_dir")


main = run_cli(command, "mksbatch")
