"""The live side of ``squall steps``: one line per interval, and the verdict at the end;
shared by ``squall steps --follow`` and ``mksbatch --watch``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from squall.errors import SquallError
from squall.steps.files import progress, read_dir
from squall.steps.verdict import Report, judge


def line(report: Report) -> str:
    """One live line: the newest step judged, the step's length, the slowest rank."""
    s = report.slowest
    text = (f"step {report.steps[1]}: {report.mean_step_s:.2f} s a step; slowest rank "
            f"{s.rank} ({s.node})")
    if report.sections:
        text += f": data {s.data_s:.2f} s, compute {s.compute_s:.2f} s"
    return text


def fallback(directory: Path, job: str) -> str | None:
    """What the progress files alone tell (no squall_steps in the program), or None."""
    seen = progress(directory)
    if not seen:
        return None
    counts = sorted(c for c, _ in seen.values())
    lag = min(seen, key=lambda r: seen[r][0])
    return (f"job {job}: only step boundaries are known (progress files): {len(seen)} ranks "
            f"at steps {counts[0]}..{counts[-1]}, the furthest behind rank {lag}; time the "
            "sections with squall_steps to tell data loading from the all-reduce")


class StepsWatch:
    """Reads a job's step files on demand: the first of ``candidates`` that holds any."""

    def __init__(self, job: str, candidates: Sequence[Path]) -> None:
        self.job, self.candidates = job, list(candidates)

    def directory(self) -> Path | None:
        for path in self.candidates:
            if any(path.glob("steps.*")) or any(path.glob("progress.*")):
                return path
        return None

    def report(self) -> Report | None:
        """The verdict so far, or None when there is not enough to judge yet."""
        path = self.directory()
        if path is None:
            return None
        try:
            return judge(read_dir(path), self.job)
        except SquallError:
            return None

    def now(self) -> str | None:
        report = self.report()
        if report is not None:
            return line(report)
        path = self.directory()
        return fallback(path, self.job) if path is not None else None


def follow(watch: StepsWatch, emit: Callable[[str], None], running: Callable[[], bool],
           interval: float, sleep: Callable[[float], None] = time.sleep) -> None:
    """Emit a line per interval while ``running()``; a line only when it changed."""
    last = None
    while running():
        text = watch.now()
        if text is not None and text != last:
            emit(text)
            last = text
        sleep(interval)
