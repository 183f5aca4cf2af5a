"""The supervisor's Slurm client (squall/slurm/control.py): every call times out with one
line, failures are one line, one node parser."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from squall.slurm.base import SlurmClientError, SlurmUnavailable
from squall.slurm.control import SlurmControl, parse_config_seconds, parse_node


@pytest.fixture
def slurm_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def tool(where: Path, name: str, body: str) -> None:
    path = where / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_a_hung_slurmctld_is_one_line_after_the_timeout(slurm_bin: Path) -> None:
    tool(slurm_bin, "scontrol", "sleep 30")
    t = time.monotonic()
    with pytest.raises(SlurmUnavailable) as err:
        SlurmControl(timeout=0.5).node("node3")
    assert time.monotonic() - t < 5
    assert str(err.value) == ("scontrol show node did not answer within 0.5 s: check that "
                              "slurmctld is up (scontrol ping)")


def test_a_failure_is_slurm_s_last_line(slurm_bin: Path) -> None:
    tool(slurm_bin, "scontrol", 'echo "scontrol: error: Invalid user for SlurmUser" >&2; '
         'echo "Access/permission denied" >&2; exit 1')
    with pytest.raises(SlurmClientError, match=r"^scontrol update nodename=n1 failed: "
                       r"Access/permission denied$"):
        SlurmControl().drain("n1", "lost")


def test_the_failover_command_reports_a_hung_slurm_in_one_line(slurm_bin: Path) -> None:
    """No traceback: squall failover exits with the one line."""
    tool(slurm_bin, "scontrol", "sleep 30")
    spec = '{"nodes": 1, "spares": 0, "launcher": "srun", "command": ["true"]}'
    env = dict(os.environ, SLURM_JOB_ID="7", SLURM_JOB_NODELIST="n1",
               SQUALL_SLURM_TIMEOUT="0.5")
    code = ("import sys; from squall.cli import main; "
            "sys.argv = ['squall', 'failover', sys.argv[1]]; main()")
    proc = subprocess.run(["python3", "-c", code, spec], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "scontrol show hostnames did not answer within 0.5 s: check that slurmctld is up "
        "(scontrol ping)"), proc.stderr


def test_missing_commands_say_where_to_run(slurm_bin: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(slurm_bin))
    with pytest.raises(SlurmUnavailable, match="not found on PATH"):
        SlurmControl().requeue("7")


def test_steps_and_hostnames(slurm_bin: Path) -> None:
    tool(slurm_bin, "squeue", 'printf "7.0 squall-heartbeat-0\\n7.3 squall-main-1\\n\\n"')
    tool(slurm_bin, "scontrol", 'case "$2" in hostnames) echo "node1 node2";; '
         '*) echo "node[1-2]";; esac')
    c = SlurmControl()
    assert c.steps("7") == [("7.0", "squall-heartbeat-0"), ("7.3", "squall-main-1")]
    assert c.hostnames("node[1-2]") == ["node1", "node2"]


def test_the_one_node_parser() -> None:
    text = ("NodeName=node3 Arch=x86_64 CoresPerSocket=1 State=DOWN+NOT_RESPONDING "
            "SlurmdStartTime=2026-11-29T10:00:00 Reason=Not responding [slurm@2026-11-29]\n")
    info = parse_node(text)
    assert info is not None and info.name == "node3" and info.down
    assert info.slurmd_started == time.mktime(time.strptime("2026-11-29T10:00:00",
                                                            "%Y-%m-%dT%H:%M:%S"))
    alive = parse_node("NodeName=node1 State=ALLOCATED SlurmdStartTime=None\n")
    assert alive is not None and not alive.down and alive.slurmd_started is None
    assert parse_node("") is None


def test_config_seconds() -> None:
    found = parse_config_seconds("MessageTimeout          = 5 sec\nSlurmdTimeout = 15 sec\n"
                                 "ClusterName = sqfo\n")
    assert found == {"MessageTimeout": 5, "SlurmdTimeout": 15}


@pytest.mark.parametrize("value", ["ten", "0", "-1", "nan", "inf"])
def test_a_bad_slurm_timeout_is_one_line(value: str) -> None:
    spec = '{"nodes": 1, "spares": 0, "launcher": "srun", "command": ["true"]}'
    env = dict(os.environ, SLURM_JOB_ID="7", SLURM_JOB_NODELIST="n1",
               SQUALL_SLURM_TIMEOUT=value)
    code = ("import sys; from squall.cli import main; "
            "sys.argv = ['squall', 'failover', sys.argv[1]]; main()")
    proc = subprocess.run(["python3", "-c", code, spec], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"squall: error: SQUALL_SLURM_TIMEOUT={value!r} is not a number of seconds above 0: "
        "set it to e.g. 10, or unset it"], proc.stderr
