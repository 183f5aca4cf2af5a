"""Submitting a recipe's script: the log directory first, then the Slurm client layer."""

from __future__ import annotations

import os
from pathlib import Path

from squall.errors import SetupError
from squall.mksbatch.recipe import Recipe
from squall.mksbatch.render import render
from squall.slurm import SlurmClient, client


def make_log_dir(path: str) -> None:
    """Slurm does not create the output directory; a job whose log cannot open fails silently."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"cannot create log_dir {path}: {exc.strerror}: create it on shared "
                         "storage the nodes see, or change log_dir in the recipe") from None


def submit(recipe: Recipe, backend: str = "auto", workdir: str | None = None,
           slurm: SlurmClient | None = None) -> int:
    """Render ``recipe``, create its log_dir and submit the script; return the job id.

    ``workdir`` is the job's working directory (default: the current one); ``slurm`` a
    client from ``squall.slurm.client()`` (default: one for ``backend``).
    """
    script = render(recipe)
    slurm = slurm or client(backend)
    make_log_dir(recipe.log_dir)
    return slurm.submit(script, workdir=workdir or os.getcwd())
