"""The mksbatch command: print, -o (atomic), and one-line errors without tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mksbatch_helpers import REPO

MAIN = "from squall.mksbatch.cli import main; main()"
GOOD = "name: t\nnodes: 1\nlog_dir: /l\nlauncher: srun\ncommand: [x]\n"


def mksbatch(*args: str, cwd: Path, path: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_prints_the_script(tmp_path: Path) -> None:
    proc = mksbatch("sbatch/demo/demo.yaml", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (REPO / "sbatch/demo/demo.sbatch").read_text()
    assert proc.stderr == ""


def test_output_file_written_whole_and_executable(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(GOOD)
    proc = mksbatch("r.yaml", "-o", "job.sbatch", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    text = (tmp_path / "job.sbatch").read_text()
    assert text.startswith("#!/bin/bash\n") and text.endswith("exit 0\n")
    assert os.stat(tmp_path / "job.sbatch").st_mode & 0o111
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sbatch", "r.yaml"]


def test_bad_recipe_leaves_the_output_untouched(tmp_path: Path) -> None:
    (tmp_path / "job.sbatch").write_text("previous\n")
    (tmp_path / "r.yaml").write_text(GOOD.replace("nodes: 1", "nodes: -4"))
    proc = mksbatch("r.yaml", "-o", "job.sbatch", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == "mksbatch: error: r.yaml:2: nodes: must be at least 1, got -4\n"
    assert (tmp_path / "job.sbatch").read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sbatch", "r.yaml"]


def test_unwritable_output_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(GOOD)
    proc = mksbatch("r.yaml", "-o", "no/such/dir/job.sbatch", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("mksbatch: error: cannot write no/such/dir/job.sbatch: No such file "
                           "or directory: check that the directory exists and is writable\n")


def test_submit_without_slurm_commands_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(GOOD.replace("/l", str(tmp_path / "logs")))
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    proc = mksbatch("r.yaml", "--submit", "--backend", "cli", cwd=tmp_path, path=str(empty))
    assert proc.returncode == 2  # the machine lacks the Slurm commands: not the recipe's fault
    assert proc.stderr == ("mksbatch: error: sbatch not found on PATH: run this on a Slurm "
                           "login node, or install the Slurm client commands\n")
    assert "Traceback" not in proc.stderr


def test_unknown_option_is_a_usage_error(tmp_path: Path) -> None:
    proc = mksbatch("r.yaml", "--frobnicate", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("mksbatch: error: No such option")
    assert "--frobnicate" in proc.stderr
    assert "Traceback" not in proc.stderr
