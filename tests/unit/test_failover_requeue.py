"""Before a requeue the supervisor waits for Slurm to settle each lost node: DOWN, or its
slurmd restarted since the loss. Slurm's answers come from a stand-in ``scontrol`` on PATH
(a test double of the Slurm command: only what these calls print)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from squall.failover.supervise import node_settled
from squall.slurm.control import SlurmControl

SCONTROL = """#!/bin/sh
case "$1 $2" in
"show config") printf 'MessageTimeout          = 5 sec\\nSlurmdTimeout           = 15 sec\\n';;
"show node") cat "$(dirname "$0")/node.$4";;
*) exit 1;;
esac
"""


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tool = tmp_path / "scontrol"
    tool.write_text(SCONTROL)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def node(slurm: Path, name: str, state: str, started: float) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started))
    (slurm / f"node.{name}").write_text(
        f"NodeName={name} Arch=x86_64 State={state} SlurmdStartTime={stamp} Reason=x\n")


def test_durations_from_the_config(slurm: Path) -> None:
    config = SlurmControl().config_seconds()
    assert config["SlurmdTimeout"] == 15 and config["MessageTimeout"] == 5
    assert "NoSuchTimeout" not in config


def test_a_node_still_counted_up_is_not_settled(slurm: Path) -> None:
    lost_at = time.time()
    node(slurm, "n1", "ALLOCATED+NOT_RESPONDING", lost_at - 3600)
    assert not node_settled(SlurmControl(), "n1", lost_at)


def test_down_or_restarted_is_settled(slurm: Path) -> None:
    lost_at = time.time() - 60
    node(slurm, "n2", "DOWN+NOT_RESPONDING", lost_at - 3600)
    node(slurm, "n3", "IDLE", lost_at + 30)
    assert node_settled(SlurmControl(), "n2", lost_at)
    assert node_settled(SlurmControl(), "n3", lost_at)


def test_an_unknown_node_is_not_settled(slurm: Path) -> None:
    assert not node_settled(SlurmControl(), "nowhere", time.time())
