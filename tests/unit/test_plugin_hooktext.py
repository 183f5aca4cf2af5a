"""The hooks' text a kept container's key is computed from (spank/plugin/hooktext.c): the
executable *.sh files of the system's and the user's hooks.d, read as root in slurmstepd.

A user's own hooks.d lies in a home any of that user's programs can write: a FIFO, a device
or a dangling link planted there is never opened (a FIFO would hang slurmstepd) and is
skipped, as Enroot does not run it either; a hook that cannot be read whole leaves every
variable in the key (NULL)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from plugin_probe import build_probe


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    return build_probe(tmp_path_factory.mktemp("hooks") / "hooks_probe", "hooks_probe.c",
                       "hooktext.c")


def hook(d: Path, name: str, text: str, mode: int = 0o755) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)
    (d / name).chmod(mode)


def text(probe: Path, sysconf: Path, home: Path) -> str:
    return subprocess.run([str(probe), f"ENROOT_SYSCONF_PATH={sysconf}", f"HOME={home}"],
                          check=True, capture_output=True, text=True, timeout=10).stdout


def test_the_system_s_and_the_user_s_executable_hooks_are_read(probe, tmp_path):
    sysconf, home = tmp_path / "etc", tmp_path / "home"
    hook(sysconf / "hooks.d", "50-slurm-pmi.sh", "compgen -e SLURM_\n")
    hook(home / ".config/enroot/hooks.d", "90-mine.sh", "echo WORLD_SIZE=$SLURM_NTASKS\n")
    hook(sysconf / "hooks.d", "60-off.sh", "echo $SLURM_STEP_NUM_NODES\n", mode=0o644)
    hook(sysconf / "hooks.d", "README", "SLURM_NNODES\n")
    got = text(probe, sysconf, home)
    assert "compgen -e SLURM_" in got and "$SLURM_NTASKS" in got, got
    assert "SLURM_STEP_NUM_NODES" not in got and "SLURM_NNODES" not in got, got


def test_what_another_program_planted_in_the_user_s_hooks_d_never_blocks(probe, tmp_path):
    sysconf, home = tmp_path / "etc", tmp_path / "home"
    user = home / ".config/enroot/hooks.d"
    hook(user, "10-real.sh", "echo $SLURM_NTASKS\n")
    os.mkfifo(user / "20-fifo.sh", 0o755)
    (user / "30-dangling.sh").symlink_to(tmp_path / "nowhere")
    (user / "40-dev.sh").symlink_to("/dev/zero")
    got = text(probe, sysconf, home)        # a FIFO opened would hang past the timeout
    assert got.strip() == "echo $SLURM_NTASKS", got


def test_a_hook_that_cannot_be_read_keeps_everything_in_the_key(probe, tmp_path):
    sysconf, home = tmp_path / "etc", tmp_path / "home"
    hook(sysconf / "hooks.d", "50-big.sh", "#" * (2 << 20))
    assert text(probe, sysconf, home).strip() == "NULL"
    (sysconf / "hooks.d" / "50-big.sh").unlink()
    (sysconf / "enroot.conf").write_text("ENROOT_CONFIG_PATH /elsewhere\n")
    assert text(probe, sysconf, home).strip() == "NULL"
