"""The Slurm client layer's data classes and interface, shared by every backend.

A backend is a thin layer over one way of talking to Slurm (the commands, or pyslurm);
callers only see `SlurmClient`, `JobInfo` and `SlurmVersion`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from squall.errors import SetupError, SquallError

# States after which a job will not run again by itself.
FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL",
    "DEADLINE", "SPECIAL_EXIT", "REVOKED",
})
# States that end a job unless it is requeued, which Slurm does right after for a
# --requeue job: a watcher treats them as final only when they last.
FINAL_UNLESS_REQUEUED = frozenset({"NODE_FAIL", "PREEMPTED"})


class SlurmClientError(SquallError):
    """A Slurm command or API call failed; the message names the call and Slurm's reason."""


class SlurmUnavailable(SlurmClientError, SetupError):
    """The Slurm commands (or slurmctld) cannot be reached from here (exit 2)."""


class JobNotFound(SlurmClientError):
    """Slurm no longer (or never) knew this job id."""


@dataclass(frozen=True, order=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int = 0

    @classmethod
    def parse(cls, text: str) -> SlurmVersion:
        """Parse ``slurm 24.11.5``, ``slurm-wlm 22.05.8`` or a bare ``25.11.0``."""
        match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
        if not match:
            raise SlurmClientError(f"cannot read a Slurm version from {text.strip()!r}: "
                                   "expected something like 'slurm 24.11.5'")
        major, minor, micro = match.groups()
        return cls(int(major), int(minor), int(micro or 0))

    @property
    def release(self) -> str:
        return f"{self.major}.{self.minor:02d}"

    @property
    def has_json(self) -> bool:
        """squeue/scontrol/sacct accept --json from Slurm 21.08 on."""
        return (self.major, self.minor) >= (21, 8)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


@dataclass(frozen=True)
class JobInfo:
    """What a watcher needs to know about a job, whatever the backend."""

    job_id: int
    name: str
    state: str
    reason: str
    restarts: int
    nodes: str
    exit_code: str

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


class SlurmClient(ABC):
    """One way of talking to Slurm. Every method raises SlurmClientError on failure."""

    backend: str = "abstract"

    @abstractmethod
    def version(self) -> SlurmVersion:
        """The Slurm release the client talks to."""

    @abstractmethod
    def submit(self, script: str, workdir: str | None = None) -> int:
        """Submit a batch script (its text); return the job id."""

    @abstractmethod
    def job(self, job_id: int) -> JobInfo:
        """The job's current state; JobNotFound when Slurm does not know it."""

    @abstractmethod
    def requeue(self, job_id: int) -> None:
        """Requeue a running or finished batch job."""

    @abstractmethod
    def cancel(self, job_id: int) -> None:
        """Cancel a job."""
