"""The client layer's parsers, against output recorded from the mini cluster's Slurm 24.11,
plus version parsing and backend selection. The commands themselves are exercised against
the real cluster in tests/integration/test_mksbatch_cluster.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.slurm import CliSlurmClient, SlurmClientError, SlurmVersion, client
from squall.slurm.cli_backend import (
    job_from_json,
    job_from_scontrol,
    parse_parsable,
    parse_scontrol_line,
)
from squall.slurm.pyslurm_backend import import_pyslurm

GOLDEN = Path(__file__).resolve().parent / "golden" / "slurm-24.11"


@pytest.mark.parametrize("text,expected", [
    ("slurm-wlm 24.11.5\n", SlurmVersion(24, 11, 5)),
    ("slurm 22.05.8", SlurmVersion(22, 5, 8)),
    ("25.11.0", SlurmVersion(25, 11, 0)),
    ("slurm 23.02", SlurmVersion(23, 2, 0)),
])
def test_version_parse(text: str, expected: SlurmVersion) -> None:
    assert SlurmVersion.parse(text) == expected


def test_version_json_support_and_release() -> None:
    assert SlurmVersion(21, 8).has_json and SlurmVersion(24, 11).has_json
    assert not SlurmVersion(20, 11).has_json
    assert SlurmVersion(22, 5, 8).release == "22.05" and str(SlurmVersion(22, 5, 8)) == "22.05.8"
    with pytest.raises(SlurmClientError) as info:
        SlurmVersion.parse("sinfo: command not found")
    assert str(info.value) == ("cannot read a Slurm version from 'sinfo: command not found': "
                               "expected something like 'slurm 24.11.5'")


def test_parsable() -> None:
    assert parse_parsable("1234\n") == 1234
    assert parse_parsable("77;cluster-a\n") == 77
    with pytest.raises(SlurmClientError) as info:
        parse_parsable("Submitted batch job 5\n")
    assert str(info.value) == ("sbatch --parsable printed 'Submitted batch job 5', not a job "
                               "id: check the sbatch on PATH")


def test_squeue_json_running_24_11() -> None:
    data = json.loads((GOLDEN / "squeue-json-running.json").read_text())
    info = job_from_json(data, 6)
    assert info is not None
    assert (info.job_id, info.name, info.state, info.reason, info.restarts, info.nodes,
            info.exit_code) == (6, "wrap", "RUNNING", "None", 0, "node[1-2]", "0:0")
    assert not info.final
    assert job_from_json(data, 7) is None


def test_squeue_json_drops_completed_jobs_24_11() -> None:
    data = json.loads((GOLDEN / "squeue-json-completed.json").read_text())
    assert job_from_json(data, 6) is None  # so the backend falls back to scontrol


def test_scontrol_oneliner_24_11() -> None:
    running = job_from_scontrol(parse_scontrol_line(
        (GOLDEN / "scontrol-oneliner-running.txt").read_text()))
    assert (running.state, running.restarts, running.nodes) == ("RUNNING", 0, "node[1-2]")
    done = job_from_scontrol(parse_scontrol_line(
        (GOLDEN / "scontrol-oneliner-completed.txt").read_text()))
    assert (done.job_id, done.name, done.state, done.exit_code) == (6, "wrap", "COMPLETED",
                                                                    "0:0")
    assert done.final


def test_scontrol_values_with_spaces() -> None:
    fields = parse_scontrol_line("JobId=9 JobName=a b JobState=PENDING Reason=BeginTime "
                                 "Restarts=2 NodeList=(null) AllocNode:Sid=login:1 "
                                 "WorkDir=/fsx/my dir")
    assert fields["JobName"] == "a b" and fields["WorkDir"] == "/fsx/my dir"
    assert fields["AllocNode:Sid"] == "login:1"
    info = job_from_scontrol(fields)
    assert (info.state, info.reason, info.restarts, info.nodes) == ("PENDING", "BeginTime", 2, "")


def test_json_plain_values_of_older_releases() -> None:
    # 21.08-22.05 give plain values where 23.02+ give {"set", "number"} objects and lists.
    data = {"jobs": [{"job_id": 5, "name": "n", "job_state": "PENDING",
                      "state_reason": "BeginTime", "restart_cnt": 1, "nodes": "",
                      "exit_code": 0}]}
    info = job_from_json(data, 5)
    assert info is not None
    assert (info.state, info.reason, info.restarts, info.exit_code) == ("PENDING", "BeginTime",
                                                                        1, "0")


def test_unknown_backend_and_unusable_pyslurm() -> None:
    with pytest.raises(SquallError) as info:
        client("slurmrestd")
    assert str(info.value) == "unknown Slurm backend 'slurmrestd': use one of auto, cli, pyslurm"
    assert isinstance(client("cli"), CliSlurmClient)
    module, why = import_pyslurm()
    if module is None:  # the usual case: pyslurm on PyPI only targets Slurm 25.11
        assert isinstance(client("auto"), CliSlurmClient)
        with pytest.raises(SquallError) as info:
            client("pyslurm")
        assert str(info.value).startswith("the pyslurm backend cannot be used: pyslurm does "
                                          "not import")


def test_cli_backend_missing_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmClientError) as info:
        CliSlurmClient().version()
    assert str(info.value) == ("sinfo not found on PATH: run this on a Slurm login node, or "
                               "install the Slurm client commands")
    assert os.environ["PATH"] == str(tmp_path)
