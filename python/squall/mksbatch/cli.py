"""``mksbatch``: turn a recipe into an sbatch script; optionally submit and follow it."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import click

from squall.atomic_write import write_atomic
from squall.cliutil import CONTEXT_SETTINGS, is_quiet, log, output_options, run_cli, version_option
from squall.errors import SetupError, SquallError
from squall.mksbatch.jobs import submit as submit_job
from squall.mksbatch.overrides import Override, OverrideError, parse_set
from squall.mksbatch.recipe import load_recipe, recipe_dict
from squall.mksbatch.render import render
from squall.mksbatch.schema import recipe_schema
from squall.mksbatch.watch import watch
from squall.slurm import BACKENDS, client
from squall.steps.follow import StepsWatch


def write_script(path: Path, text: str, mode: int = 0o755) -> None:
    """Write ``text`` to ``path`` so readers see the old file or the whole new one."""
    try:
        write_atomic(path, text, mode)
    except OSError as exc:
        raise SetupError(f"cannot write {path}: {exc.strerror}: check that the directory "
                         "exists and is writable") from None


def _parse_sets(_ctx: click.Context, _param: click.Parameter, values: Sequence[str]
                ) -> tuple[Override, ...]:
    try:
        return tuple(parse_set(value) for value in values)
    except OverrideError as exc:
        raise click.BadParameter(str(exc)) from None


SCHEMA = "schema"  # `mksbatch schema`: a recipe file of that name is given as ./schema


@click.command(context_settings=CONTEXT_SETTINGS)
@version_option("mksbatch")
@output_options
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", metavar="KEY=VALUE", multiple=True, callback=_parse_sets,
              help="Override a recipe field (dotted KEY, YAML VALUE), validated like the "
                   "file; repeatable, the last one wins. E.g. --set nodes=8 "
                   "--set environment.LR=3e-4")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the script to this file (atomically) instead of printing it.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON instead: the resolved recipe and the script (and the job id "
                   "with --submit, the file with -o).")
@click.option("--submit", is_flag=True, help="Submit the script and print the job id.")
@click.option("--watch", "follow", is_flag=True,
              help="Submit, then follow the job until it ends (states, requeues, restarts).")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="Slurm client backend for --submit/--watch.")
@click.option("--poll", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
              help="Seconds between state polls with --watch.")
@click.pass_context
def command(ctx: click.Context, recipe: str, overrides: tuple[Override, ...],
            output: str | None, as_json: bool, submit: bool, follow: bool, backend: str,
            poll: float) -> None:
    """Render RECIPE (YAML) into an sbatch script that gang-allocates its nodes, survives
    node failure by requeueing, and resumes from the newest complete checkpoint.

    `mksbatch schema` prints the recipe's JSON Schema instead (for editors; -o writes it
    to a file)."""
    if recipe == SCHEMA:
        if overrides or as_json or submit or follow:
            raise click.UsageError("schema takes no options but -o (a recipe file named "
                                   "schema: give it as ./schema)", ctx)
        text = json.dumps(recipe_schema(), indent=2) + "\n"
        if output:
            write_script(Path(output), text, mode=0o644)
        else:
            click.echo(text, nl=False)
        return
    if as_json and follow:
        raise click.UsageError("--json cannot be used with --watch (use --submit)", ctx)
    parsed = load_recipe(recipe, overrides=overrides)
    script = render(parsed)
    result: dict[str, object] = {"recipe": recipe_dict(parsed), "script": script}
    if output:
        write_script(Path(output), script)
        result["output"] = output
        log.info("wrote %s", output)
    if submit or follow:
        slurm = client(backend)
        job_id = submit_job(parsed, workdir=os.getcwd(), slurm=slurm)
        result["job_id"] = job_id
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    if not (output or submit or follow):
        click.echo(script, nl=False)
        return
    if "job_id" not in result:
        return
    click.echo(result["job_id"])
    if follow:
        job_id = int(str(result["job_id"]))
        job_log = Path(parsed.log_dir) / f"{parsed.name}-{job_id}.out"
        logs = Path(parsed.log_dir)
        steps = StepsWatch(str(job_id), [logs / f".squall-failover-{job_id}",
                                         logs / f".squall-steps-{job_id}"])
        final = watch(slurm, job_id, lambda line: None if is_quiet() else click.echo(line),
                      poll=poll, log=job_log if parsed.failover is not None else None,
                      steps=steps)
        if final.state != "COMPLETED":
            raise SquallError(f"job {job_id} ended {final.state} after {final.restarts} "
                              f"restart(s): see its log in the recipe's log_dir")


main = run_cli(command, "mksbatch")
