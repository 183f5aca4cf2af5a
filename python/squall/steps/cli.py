"""``squall steps JOBID``: which rank, node and section slows the job (the click command,
registered by squall/cli.py)."""

from __future__ import annotations

from pathlib import Path

import click

from squall.cliutil import is_quiet, json_option, output_options, print_json
from squall.errors import SquallError, UsageError
from squall.steps import files
from squall.steps.follow import StepsWatch, fallback, follow
from squall.steps.verdict import Report, judge

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def table(report: Report) -> str:
    head = (f"{'rank':>4} {'node':<12} {'steps':>6} {'step_s':>8} {'data_s':>8} "
            f"{'allreduce_s':>11} {'compute_s':>9} {'relative':>8} {'individual':>10}")
    rows = [head] + [
        f"{f.rank:>4} {f.node:<12} {f.steps:>6} {f.step_s:>8.3f} {f.data_s:>8.3f} "
        f"{f.allreduce_s:>11.3f} {f.compute_s:>9.3f} {f.relative:>8.2f} {f.individual:>10.2f}"
        for f in report.ranks]
    dropped = sum(f.dropped for f in report.ranks)
    if dropped:
        rows.append(f"({dropped} step lines dropped by the writers: the file system was slow "
                    "or full)")
    return "\n".join(rows)


def parse_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    first, sep, last = text.partition(":")
    if not sep or not first.isdigit() or not last.isdigit() or int(first) > int(last):
        raise UsageError(f"--range {text}: give FIRST:LAST step numbers, e.g. --range 100:120")
    return int(first), int(last)


class _Job:
    def __init__(self, job: str, directory: str | None, scontrol: str) -> None:
        self.job, self.scontrol = job, scontrol
        self.fields: dict[str, str] = {}
        if directory is not None:
            self.path = Path(directory)
        else:
            self.fields = files.job_fields(job, scontrol)
            self.path = files.job_dir(job, self.fields)

    def running(self) -> bool:
        try:
            state = files.job_fields(self.job, self.scontrol).get("JobState", "")
        except SquallError:
            return False
        return state not in FINAL


def _plot(report: Report, path: Path, out: str, steps: tuple[int, int] | None) -> None:
    from squall.steps.plot import draw
    draw(files.read_dir(path), report, out, steps)
    if not is_quiet():
        click.echo(f"wrote {out}")


@click.command("steps")
@click.argument("job", metavar="JOBID")
@click.option("--dir", "directory", metavar="DIR", default=None,
              help="The job's step files [default: the failover's directory next to the "
              "job's log, or .squall-steps-JOBID there, from scontrol].")
@click.option("--follow", "live", is_flag=True,
              help="One line per interval (the slowest rank and node) until the job ends, "
              "then the verdict.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds between --follow lines.")
@click.option("--plot", "plot", metavar="FILE.png", default=None,
              help="Draw the heat map of step time per rank (matplotlib).")
@click.option("--range", "steps_range", metavar="FIRST:LAST", default=None,
              help="The steps whose sections the plot stacks [default: the last 20].")
@click.option("--scontrol", default="scontrol", show_default=True, metavar="PATH",
              help="scontrol executable.")
@json_option
@output_options
def steps(job: str, directory: str | None, live: bool, interval: float, plot: str | None,
          steps_range: str | None, scontrol: str, as_json: bool) -> None:
    """Which rank, node and section slows job JOBID: data loading, the all-reduce, a
    straggler node, or balanced (docs/why-is-my-job-slow.md). The program times its steps
    with squall_steps."""
    if not job.replace("_", "").isdigit():
        raise UsageError(f"JOBID {job!r}: give a Slurm job id, e.g. squall steps 1234")
    if live and as_json:
        raise UsageError("--json cannot be used with --follow: follow, then ask again "
                         "with --json")
    chosen = parse_range(steps_range)
    where = _Job(job, directory, scontrol)
    if live:
        follow(StepsWatch(job, [where.path]), click.echo, where.running, interval)
    ranks = files.read_dir(where.path)
    if not any(r.steps for r in ranks):
        text = fallback(where.path, job)
        if text is None:
            raise SquallError(f"job {job}: no step files in {where.path}: time the program "
                              "with squall_steps (docs/why-is-my-job-slow.md)")
        if as_json:
            print_json({"job": job, "verdict": {"kind": "unknown", "text": text}})
        else:
            click.echo(text)
        return
    report = judge(ranks, job)
    if plot is not None:
        _plot(report, where.path, plot, chosen)
    if as_json:
        print_json(report.to_json())
        return
    if not is_quiet():
        click.echo(table(report))
    click.echo(report.verdict.text)
