"""The Slurm client over the Slurm commands: sbatch --parsable, squeue/scontrol/sacct.

Job state comes from ``squeue --json`` on releases that have it (21.08 and later), from
``scontrol show job --oneliner`` otherwise or when the job has left squeue, and from
``sacct`` when the controller has forgotten the job (only with accounting configured).
The JSON layout changed between releases (plain values in 21.08-22.05; state lists and
``{"set", "number"}`` objects from 23.02), so the readers below accept both shapes.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from typing import Any

from squall.slurm import command
from squall.slurm.base import (
    JobInfo,
    JobNotFound,
    SlurmClient,
    SlurmClientError,
    SlurmVersion,
)

_NOT_FOUND = re.compile(r"invalid job id|does not exist|not found", re.IGNORECASE)
_NO_JSON = re.compile(r"json|serializer|data_parser|unrecognized option|invalid option",
                      re.IGNORECASE)


class CliSlurmClient(SlurmClient):
    """Talks to Slurm through its commands on PATH; no library needed."""

    backend = "cli"

    def __init__(self, timeout: float = 60.0, use_json: bool | None = None):
        self.timeout = timeout
        self._version: SlurmVersion | None = None
        self._use_json = use_json

    # -- plumbing -----------------------------------------------------------------------

    def _run(self, argv: Sequence[str], stdin: str | None = None,
             cwd: str | None = None) -> subprocess.CompletedProcess[str]:
        return command.run(argv, self.timeout, f"{argv[0]} not found on PATH: run this on a "
                           "Slurm login node, or install the Slurm client commands",
                           stdin=stdin, cwd=cwd)

    @staticmethod
    def _reason(proc: subprocess.CompletedProcess[str]) -> str:
        return command.reason(proc)

    def _check(self, argv: Sequence[str], proc: subprocess.CompletedProcess[str]) -> None:
        if proc.returncode != 0:
            raise SlurmClientError(f"{argv[0]} failed: {self._reason(proc)}")

    # -- interface ----------------------------------------------------------------------

    def version(self) -> SlurmVersion:
        if self._version is None:
            argv = ["sinfo", "--version"]
            proc = self._run(argv)
            self._check(argv, proc)
            self._version = SlurmVersion.parse(proc.stdout)
        return self._version

    @property
    def use_json(self) -> bool:
        if self._use_json is None:
            self._use_json = self.version().has_json
        return self._use_json

    def submit(self, script: str, workdir: str | None = None) -> int:
        argv = ["sbatch", "--parsable"]
        proc = self._run(argv, stdin=script, cwd=workdir)
        self._check(argv, proc)
        return parse_parsable(proc.stdout)

    def job(self, job_id: int) -> JobInfo:
        if self.use_json:
            info = self._job_squeue_json(job_id)
            if info is not None:
                return info
        info = self._job_scontrol(job_id)
        if info is not None:
            return info
        info = self._job_sacct(job_id)
        if info is not None:
            return info
        raise JobNotFound(f"job {job_id} is unknown to Slurm (finished jobs leave the "
                          "controller after MinJobAge; sacct needs accounting)")

    def requeue(self, job_id: int) -> None:
        argv = ["scontrol", "requeue", str(job_id)]
        self._check(argv, self._run(argv))

    def cancel(self, job_id: int) -> None:
        argv = ["scancel", str(job_id)]
        self._check(argv, self._run(argv))

    # -- state readers ------------------------------------------------------------------

    def _job_squeue_json(self, job_id: int) -> JobInfo | None:
        argv = ["squeue", "--json", f"--jobs={job_id}"]
        proc = self._run(argv)
        if proc.returncode != 0:
            reason = self._reason(proc)
            if _NOT_FOUND.search(reason):
                return None
            if _NO_JSON.search(reason):
                # A build without the JSON plugins: use plain output from now on.
                self._use_json = False
                return None
            raise SlurmClientError(f"squeue failed: {reason}")
        try:
            data = json.loads(proc.stdout)
        except json.JSONDecodeError:
            self._use_json = False
            return None
        return job_from_json(data, job_id)

    def _job_scontrol(self, job_id: int) -> JobInfo | None:
        argv = ["scontrol", "show", "job", "--oneliner", str(job_id)]
        proc = self._run(argv)
        if proc.returncode != 0:
            if _NOT_FOUND.search(self._reason(proc)):
                return None
            raise SlurmClientError(f"scontrol show job failed: {self._reason(proc)}")
        for line in proc.stdout.splitlines():
            fields = parse_scontrol_line(line)
            if fields.get("JobId") == str(job_id):
                return job_from_scontrol(fields)
        return None

    def _job_sacct(self, job_id: int) -> JobInfo | None:
        argv = ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job_id}",
                "--format=JobID,JobName,State,Reason,Restarts,NodeList,ExitCode"]
        proc = self._run(argv)
        if proc.returncode != 0:
            return None  # no accounting storage: nothing more to ask
        for line in proc.stdout.splitlines():
            parts = line.split("|")
            if len(parts) >= 7 and parts[0] == str(job_id):
                return JobInfo(job_id=job_id, name=parts[1], state=parts[2].split()[0],
                               reason=parts[3], restarts=_int(parts[4]), nodes=parts[5],
                               exit_code=parts[6])
        return None


# -- parsers (pure functions, tested against output recorded from real Slurm) ---------


def parse_parsable(stdout: str) -> int:
    """The job id from ``sbatch --parsable`` output: ``ID`` or ``ID;CLUSTER``."""
    text = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    head = text.split(";", 1)[0]
    if not head.isdigit():
        raise SlurmClientError(f"sbatch --parsable printed {stdout.strip()!r}, not a job "
                               "id: check the sbatch on PATH")
    return int(head)


_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_scontrol_line(line: str) -> dict[str, str]:
    """``Key=Value Key=Value ...`` of ``scontrol show job --oneliner`` into a dict.

    Values may hold spaces (Command, WorkDir, Reason texts): a value runs up to the next
    `` Key=``.
    """
    matches = list(_KEY.finditer(line))
    fields: dict[str, str] = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        fields.setdefault(match.group(1), line[match.end():end].strip())
    return fields


def job_from_scontrol(fields: dict[str, str]) -> JobInfo:
    return JobInfo(
        job_id=int(fields["JobId"]),
        name=fields.get("JobName", ""),
        state=fields.get("JobState", "UNKNOWN"),
        reason=fields.get("Reason", "None"),
        restarts=_int(fields.get("Restarts", "0")),
        nodes=_none_if_null(fields.get("NodeList", "")),
        exit_code=fields.get("ExitCode", ""),
    )


def job_from_json(data: dict[str, Any], job_id: int) -> JobInfo | None:
    """The job ``job_id`` from ``squeue --json`` / ``scontrol show job --json`` output."""
    for job in data.get("jobs", []):
        if _number(job.get("job_id")) != job_id:
            continue
        return JobInfo(
            job_id=job_id,
            name=str(job.get("name", "")),
            state=_state(job.get("job_state")),
            reason=str(job.get("state_reason", "None")),
            restarts=_number(job.get("restart_cnt")) or 0,
            nodes=str(job.get("nodes", "") or ""),
            exit_code=_exit_code(job.get("exit_code")),
        )
    return None


def _number(value: Any) -> int | None:
    """An integer given plainly (<= 22.05) or as ``{"set": .., "number": ..}`` (>= 23.02)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _state(value: Any) -> str:
    """A state given as a string (<= 23.02) or a list of base state + flags (>= 23.11)."""
    if isinstance(value, list):
        return str(value[0]) if value else "UNKNOWN"
    return str(value) if value else "UNKNOWN"


def _exit_code(value: Any) -> str:
    if isinstance(value, dict):
        code = _number(value.get("return_code"))
        signal = value.get("signal", {})
        sig = _number(signal.get("id")) if isinstance(signal, dict) else None
        return f"{code if code is not None else 0}:{sig or 0}"
    number = _number(value)
    return "" if number is None else str(number)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _none_if_null(text: str) -> str:
    return "" if text in ("(null)", "None") else text
