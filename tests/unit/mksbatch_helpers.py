"""Shared helpers for the mksbatch unit tests: write recipes, run scripts under the stubs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from gate import need_tool
from squall.mksbatch import load_recipe, render

REPO = Path(__file__).resolve().parents[2]
STUB = Path(__file__).resolve().parent / "stubs" / "stub_slurm_commands.py"
STUBBED = ("srun", "scontrol", "scancel", "mpirun")


def write_recipe(tmp: Path, text: str, name: str = "r.yaml") -> Path:
    path = tmp / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def script_for(tmp: Path, text: str) -> str:
    return render(load_recipe(write_recipe(tmp, text)))


def stub_bin(tmp: Path) -> Path:
    """A bin directory whose srun/scontrol/scancel/mpirun are the test stub."""
    bindir = tmp / "stubbin"
    bindir.mkdir(exist_ok=True)
    for name in STUBBED:
        link = bindir / name
        if not link.exists():
            link.symlink_to(STUB)
    return bindir


def run_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": f"{stub_bin(tmp)}:{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        "STUB_LOG": str(tmp / "calls.jsonl"),
        "STUB_DIR": str(tmp),
        "STUB_HOSTS": "node7 node8",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "node[7-8]",
        "SLURM_JOB_NUM_NODES": "2",
        "HOME": str(tmp),
    }
    env.update(extra)
    return env


def calls(tmp: Path) -> list[dict]:
    log = tmp / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def run_script(tmp: Path, script: str, timeout: float = 30, **env: str
               ) -> subprocess.CompletedProcess[str]:
    path = tmp / "job.sbatch"
    path.write_text(script)
    return subprocess.run(["bash", str(path)], cwd=tmp, env=run_env(tmp, **env),
                          capture_output=True, text=True, timeout=timeout)


def shellcheck() -> str:
    return need_tool("shellcheck", "shellcheck")
