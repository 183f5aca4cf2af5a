"""The Slurm client layer: `client()` picks a backend (pyslurm when it matches, else the
commands); everything else talks to the `SlurmClient` interface in `base`."""

from __future__ import annotations

from squall.errors import SquallError
from squall.slurm.base import (
    FINAL_STATES,
    FINAL_UNLESS_REQUEUED,
    JobInfo,
    JobNotFound,
    SlurmClient,
    SlurmClientError,
    SlurmVersion,
)
from squall.slurm.cli_backend import CliSlurmClient

BACKENDS = ("auto", "cli", "pyslurm")

__all__ = [
    "BACKENDS", "FINAL_STATES", "FINAL_UNLESS_REQUEUED", "CliSlurmClient", "JobInfo",
    "JobNotFound", "SlurmClient", "SlurmClientError", "SlurmVersion", "client",
    "pyslurm_unusable_reason",
]


def pyslurm_unusable_reason(cli: CliSlurmClient) -> str:
    """Empty when pyslurm can be used with the Slurm installed here, else why not."""
    from squall.slurm.pyslurm_backend import import_pyslurm, pyslurm_version

    module, why = import_pyslurm()
    if module is None:
        return why
    theirs = pyslurm_version(module)
    if theirs is None:
        return "pyslurm does not report its version"
    ours = cli.version()
    if (theirs.major, theirs.minor) != (ours.major, ours.minor):
        return (f"pyslurm {theirs} is built for Slurm {theirs.release}, but Slurm here is "
                f"{ours}")
    return ""


def client(backend: str = "auto") -> SlurmClient:
    """A Slurm client: ``auto`` prefers pyslurm when usable, ``cli`` or ``pyslurm`` force one."""
    if backend not in BACKENDS:
        raise SquallError(f"unknown Slurm backend {backend!r}: use one of {', '.join(BACKENDS)}")
    cli = CliSlurmClient()
    if backend == "cli":
        return cli
    why = pyslurm_unusable_reason(cli)
    if not why:
        from squall.slurm.pyslurm_backend import PyslurmClient, import_pyslurm

        module, why = import_pyslurm()
        if module is not None:
            return PyslurmClient(module, cli.version())
    if backend == "pyslurm":
        raise SquallError(f"the pyslurm backend cannot be used: {why}; use --backend cli")
    return cli
