"""``mksbatch --watch`` with a job timed by squall_steps: the slowest rank while it runs,
the verdict at its end (squall/mksbatch/watch.py, squall/steps/follow.py)."""

from __future__ import annotations

from steps_sim import simulate, write_files

from squall.mksbatch.watch import watch
from squall.slurm import JobInfo
from squall.steps.follow import StepsWatch


class StubSlurmClient:
    """TEST STUB, not Slurm: the job's states in turn (the real client is run on the mini
    cluster, tests/integration/test_mksbatch_cluster.py)."""

    def __init__(self, states: list[str]) -> None:
        self.states = states

    def job(self, job_id: int) -> JobInfo:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return JobInfo(job_id=job_id, name="train", state=state, reason="None", restarts=0,
                       nodes="node[1-3]" if state == "RUNNING" else "", exit_code="0:0")


def test_watch_tells_the_slowest_rank_then_the_verdict(tmp_path):
    steps_dir = tmp_path / ".squall-failover-9"
    steps_dir.mkdir()
    write_files(steps_dir, simulate(slow_data=(2, 4, 0.7)))
    lines: list[str] = []
    watch(StubSlurmClient(["RUNNING"] * 4 + ["COMPLETED"]), 9, lines.append, poll=1.0,
          sleep=lambda s: None, steps=StepsWatch("9", [tmp_path / "none", steps_dir]),
          steps_every=2.0)
    live = [x for x in lines if x.startswith("job 9: steps: step ")]
    assert len(live) == 1, lines  # said once: it did not change
    assert "slowest rank 2 (node2)" in live[0]
    assert live[0].startswith("job 9: steps: step 39: 0.28 s a step;")  # the mean, not median
    assert lines[-1] == ("job 9: steps: data loading on rank 2 (node2): every 4th step waits "
                         "0.71 s for its batch")


def test_watch_without_step_files_says_nothing_of_steps(tmp_path):
    lines: list[str] = []
    watch(StubSlurmClient(["RUNNING", "COMPLETED"]), 9, lines.append, poll=1.0,
          sleep=lambda s: None, steps=StepsWatch("9", [tmp_path]), steps_every=1.0)
    assert not any("steps:" in x for x in lines), lines
