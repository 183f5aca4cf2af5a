"""One Slurm command run from Python: every call has a timeout, and each way it can fail
is one line (the mksbatch client, the failover supervisor and ``squall doctor --drain``
all run their commands here)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from squall.slurm.base import SlurmUnavailable


def run(argv: Sequence[str], timeout: float, missing: str, stdin: str | None = None,
        cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (no shell); its result whatever the exit status. ``missing`` is the
    line for a command that is not there (where to run, what to install). Raises
    :class:`SlurmUnavailable` for that and for a command that did not answer in time."""
    try:
        return subprocess.run(list(argv), input=stdin, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise SlurmUnavailable(missing) from None
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"{' '.join(argv[:3])} did not answer within {timeout:g} s: "
                               "check that slurmctld is up (scontrol ping)") from None


def reason(proc: subprocess.CompletedProcess[str]) -> str:
    """Why a command failed: its last non-empty line of output (stderr first)."""
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines()
             if ln.strip()]
    return lines[-1] if lines else f"exit status {proc.returncode}"
