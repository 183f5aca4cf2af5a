"""What the supervisor reads from the ranks and from srun: the lines appended to
$SQUALL_PEER_LOST_FILE, and srun's line for a task that died."""

from __future__ import annotations

import io
from pathlib import Path

from squall.failover.decide import ANY
from squall.failover.supervise import Reports, named_nodes

STEP = ("node1", "node2")


def test_a_report_names_a_node_of_the_step_or_any() -> None:
    assert named_nodes("allreduce.py rank 0: rank 1 on node2 closed the connection",
                       STEP) == {"node2"}
    assert named_nodes("could not reach rank 0 at node1:29510", STEP) == {"node1"}
    assert named_nodes("a peer is gone", STEP) == {ANY}
    assert named_nodes("node12 closed", STEP) == {ANY}  # not a node of the step


def test_only_whole_lines_are_read_and_each_once(tmp_path: Path) -> None:
    path = tmp_path / "peer-lost.0"
    r = Reports(path)
    assert r.new() == []  # no file yet: no report
    path.write_text("node2 gone\nhalf a li")
    assert r.new() == ["node2 gone"]
    with open(path, "a") as f:
        f.write("ne\n\n")
    assert r.new() == ["half a line"] and r.new() == []


def test_srun_s_dead_task_line_is_a_report(capsys) -> None:  # type: ignore[no-untyped-def]
    r = Reports(Path("/nonexistent"))
    r.forward(io.BytesIO(b"srun: Job step aborted\n"))
    assert not r.task_died.is_set()
    r.forward(io.BytesIO(b"srun: error: node2: task 1: Exited with exit code 3\n"))
    assert r.task_died.is_set()
    assert "Exited with exit code 3" in capsys.readouterr().err  # still in the job log
    mpi = Reports(Path("/nonexistent"))
    mpi.forward(io.BytesIO(b"PRTE has lost communication with a remote daemon.\n"))
    assert mpi.task_died.is_set()


def test_srun_s_failure_to_start_the_step_is_not_a_dead_task(capsys) -> None:  # type: ignore[no-untyped-def]
    """On the scale cluster, slurmctld busy with a dead node: the relaunch's srun failed
    before starting any task. That is Slurm's failure, not the program's (below)."""
    r = Reports(Path("/nonexistent"))
    r.forward(io.BytesIO(b"srun: error: Unable to confirm allocation for job 1: Socket timed "
                         b"out on send/recv operation\nsrun: Check SLURM_JOB_ID environment "
                         b"variable. Expired or invalid job 1\n"))
    assert not r.task_died.is_set()
    assert r.launch_error.startswith("srun: error: Unable to confirm allocation for job 1")
    other = Reports(Path("/nonexistent"))
    other.forward(io.BytesIO(b"srun: error: Unable to create step for job 7: Job/step already "
                             b"completing or completed\n"))
    assert other.launch_error
    fine = Reports(Path("/nonexistent"))
    fine.forward(io.BytesIO(b"srun: error: node2: task 1: Exited with exit code 3\n"))
    assert fine.launch_error == ""
