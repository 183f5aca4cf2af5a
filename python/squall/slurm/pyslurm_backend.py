"""The Slurm client over pyslurm, used only when pyslurm imports and matches the Slurm here.

pyslurm binds libslurm's C API, which changes with every Slurm release; a pyslurm built
for another release refuses to load ("Slurm version mismatch") or misreads structures.
pyslurm on PyPI targets Slurm 25.11 only, so on Debian's Slurm (22.05, 24.11) this backend
is never selected and the command backend (cli_backend) is used. See docs/mksbatch.md.
"""

from __future__ import annotations

import os
import tempfile
from types import ModuleType

from squall.slurm.base import JobInfo, JobNotFound, SlurmClient, SlurmClientError, SlurmVersion


def import_pyslurm() -> tuple[ModuleType | None, str]:
    """pyslurm, or None and the reason it cannot be used."""
    try:
        import pyslurm  # type: ignore[import-not-found]
    except ImportError as exc:
        return None, f"pyslurm does not import ({exc})"
    except Exception as exc:  # a mismatched build fails at import with its own error type
        return None, f"pyslurm fails to load ({exc})"
    return pyslurm, ""


def pyslurm_version(module: ModuleType) -> SlurmVersion | None:
    text = getattr(module, "__version__", None) or getattr(module, "VERSION", None)
    if not text:
        return None
    try:
        return SlurmVersion.parse(str(text))
    except SlurmClientError:
        return None


class PyslurmClient(SlurmClient):
    """Talks to slurmctld through pyslurm's API (pyslurm >= 23.2 object interface)."""

    backend = "pyslurm"

    def __init__(self, module: ModuleType, slurm_version: SlurmVersion):
        self.pyslurm = module
        self._version = slurm_version

    def version(self) -> SlurmVersion:
        return self._version

    def _call(self, what: str, fn, *args):  # type: ignore[no-untyped-def]
        try:
            return fn(*args)
        except self.pyslurm.RPCError as exc:
            text = str(exc)
            if "Invalid job id" in text:
                raise JobNotFound(f"{what}: {text}") from None
            raise SlurmClientError(f"{what} failed: {text}") from None

    def submit(self, script: str, workdir: str | None = None) -> int:
        # pyslurm parses #SBATCH lines from a script file (load_sbatch_options).
        with tempfile.NamedTemporaryFile("w", suffix=".sbatch", delete=False) as fh:
            fh.write(script)
            path = fh.name
        try:
            desc = self.pyslurm.JobSubmitDescription(
                script=path, working_directory=workdir or os.getcwd())
            desc.load_sbatch_options()
            return int(self._call("pyslurm submit", desc.submit))
        finally:
            os.unlink(path)

    def job(self, job_id: int) -> JobInfo:
        job = self._call(f"pyslurm Job.load({job_id})", self.pyslurm.Job.load, job_id)
        return JobInfo(
            job_id=job_id,
            name=job.name or "",
            state=job.state or "UNKNOWN",
            reason=job.state_reason or "None",
            restarts=job.requeue_count or 0,
            nodes=job.allocated_nodes or "",
            exit_code=f"{job.exit_code or 0}:{job.exit_code_signal or 0}",
        )

    def requeue(self, job_id: int) -> None:
        self._call(f"pyslurm requeue {job_id}", self.pyslurm.Job(job_id).requeue)

    def cancel(self, job_id: int) -> None:
        self._call(f"pyslurm cancel {job_id}", self.pyslurm.Job(job_id).cancel)
