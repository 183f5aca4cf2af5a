"""Follow a job through the Slurm client layer until it ends, reporting what changes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from squall.errors import SquallError
from squall.slurm import (
    FINAL_UNLESS_REQUEUED,
    JobInfo,
    JobNotFound,
    SlurmClient,
    SlurmClientError,
)
from squall.steps.follow import StepsWatch

# Polls a NODE_FAIL/PREEMPTED state must last before it counts as the end (a --requeue
# job leaves it for PENDING within one controller pass).
CONFIRM_POLLS = 3
# A busy slurmctld (a node just died, a requeue in progress) can time out a query:
# keep polling through this many failures in a row before giving up.
MAX_FAILED_POLLS = 30


def describe(info: JobInfo) -> str:
    text = f"job {info.job_id}: {info.state}"
    if info.state == "RUNNING" and info.nodes:
        text += f" on {info.nodes}"
    elif info.reason and info.reason != "None":
        text += f" ({info.reason})"
    if info.final:
        text += f", exit code {info.exit_code}" if info.exit_code else ""
    return text


class FailoverLines:
    """The in-job failover lines of a job's log (``squall: failover: ...``, written by
    squall/failover/supervise.py), read as the log grows."""

    MARK = "squall: failover: "

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def new(self) -> list[str]:
        if self.path is None:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(1 << 20)
        except OSError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines, _, self.partial = data.rpartition(b"\n")
        return [line.split(self.MARK, 1)[1] for line in
                lines.decode(errors="replace").splitlines() if self.MARK in line]


class StepsLines:
    """``squall steps``' live line every ``every`` polls (when it changed), and its
    verdict at the end, from the job's step files (docs/why-is-my-job-slow.md)."""

    def __init__(self, steps: StepsWatch | None, every: int) -> None:
        self.steps, self.every = steps, max(1, every)
        self.polls = 0
        self.last: str | None = None

    def new(self) -> list[str]:
        self.polls += 1
        if self.steps is None or self.polls % self.every:
            return []
        text = self.steps.now()
        if text is None or text == self.last:
            return []
        self.last = text
        return [text]

    def end(self) -> list[str]:
        report = self.steps.report() if self.steps is not None else None
        return [report.verdict.text] if report is not None else []


def watch(
    client: SlurmClient,
    job_id: int,
    emit: Callable[[str], None],
    poll: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    log: Path | None = None,
    steps: StepsWatch | None = None,
    steps_every: float = 30.0,
) -> JobInfo:
    """Poll ``job_id`` until it ends; emit a line per state change, requeue and restart,
    and, with the job's ``log``, each in-job failover (node lost, relaunch, resume); with
    ``steps``, the slowest rank every ``steps_every`` seconds and the verdict at the end."""
    failover = FailoverLines(log)
    timing = StepsLines(steps, round(steps_every / poll))
    last: JobInfo | None = None
    unsure = 0
    failures = 0
    while True:
        try:
            info = client.job(job_id)
        except JobNotFound:
            if last is None:
                raise
            raise SquallError(f"job {job_id} left the controller before its end was seen "
                              f"(last state {last.state}): poll more often or check sacct"
                              ) from None
        except SlurmClientError as exc:
            failures += 1
            if failures > MAX_FAILED_POLLS:
                raise
            if failures == 1:
                emit(f"job {job_id}: Slurm did not answer ({exc}); still watching")
            sleep(poll)
            continue
        failures = 0
        for line in failover.new():
            emit(f"job {job_id}: failover: {line}")
        for line in timing.new():
            emit(f"job {job_id}: steps: {line}")
        if last is None or info.state != last.state or info.nodes != last.nodes:
            if last is not None and info.restarts > last.restarts:
                emit(f"job {job_id}: requeued, restart {info.restarts}")
            emit(describe(info))
        elif info.restarts > last.restarts:
            emit(f"job {job_id}: requeued, restart {info.restarts}")
        if info.final:
            for line in failover.new():
                emit(f"job {job_id}: failover: {line}")
            for line in timing.end():
                emit(f"job {job_id}: steps: {line}")
            return info
        if info.state in FINAL_UNLESS_REQUEUED:
            unsure += 1
            if unsure >= CONFIRM_POLLS:
                return info
        else:
            unsure = 0
        last = info
        sleep(poll)
