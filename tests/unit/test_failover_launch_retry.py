"""A relaunch whose srun cannot start the step (slurmctld too busy to confirm the
allocation, a step it cannot create yet) is tried again, a bounded number of times, before
the job counts it as the program's exit: on the scale cluster, with slurmctld busy after a
node died, one such srun ended a failover job that had a spare ready
(bench/bench_failover_scale.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from squall.failover import supervise
from squall.failover.decide import Verdict
from squall.failover.spec import Spec

BUSY = ("srun: error: Unable to confirm allocation for job 1: Socket timed out on "
        "send/recv operation")


def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               outcomes: list[tuple[str, int]]) -> tuple[supervise.Supervisor, list[int]]:
    spec = Spec(nodes=2, spares=1, launcher="srun", command=("true",),
                heartbeat_dir=str(tmp_path / "hb"))
    sup = supervise.Supervisor(spec, "1", ["n1", "n2", "n3"], "n1")
    for name in ("start_agent", "warm_spares", "kill_steps"):
        monkeypatch.setattr(sup, name, lambda *a, **k: None)
    monkeypatch.setattr(supervise, "LAUNCH_RETRY_S", 0.01)
    runs: list[int] = []

    def run_attempt(resume: str | None) -> Verdict:
        error, rc = outcomes[len(runs)]
        runs.append(sup.attempt)
        sup.launch_error = error
        return Verdict("exit", rc=rc)

    monkeypatch.setattr(sup, "run_attempt", run_attempt)
    return sup, runs


def test_a_step_srun_could_not_start_is_started_again(tmp_path, monkeypatch, capsys):
    sup, runs = supervisor(tmp_path, monkeypatch, [(BUSY, 1), (BUSY, 1), ("", 0)])
    assert sup.run() == 0
    assert runs == [0, 0, 0]  # the same attempt, not a failover's restart
    err = capsys.readouterr().out  # the job log
    assert err.count("could not start the step") == 2, err
    assert "Socket timed out" in err and "trying again in" in err, err


def test_tries_are_bounded_then_it_is_the_exit_it_was(tmp_path, monkeypatch, capsys):
    sup, runs = supervisor(tmp_path, monkeypatch, [(BUSY, 1)] * 10)
    assert sup.run() == 1
    assert len(runs) == supervise.LAUNCH_TRIES + 1
    assert "gave up after" in capsys.readouterr().out


def test_a_program_that_fails_is_not_started_again(tmp_path, monkeypatch):
    sup, runs = supervisor(tmp_path, monkeypatch, [("", 3), ("", 0)])
    assert sup.run() == 3 and runs == [0]
