"""In-job failover on hot spares on the mini cluster (issue 20, docs/failover.md).

The program is sbatch/demo/allreduce.py: every step an all-reduce over TCP, so a lost or
frozen peer stops every rank, as in data-parallel training. The recipe runs it on two
nodes with one spare (three nodes allocated). After each failure the job must go on in the
same allocation (no requeue), on the spare, from the newest complete checkpoint, and end
with the final state of an uninterrupted run; nothing of the failed attempt may be left
running on any node.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .cluster import Cluster
from .failover_job import (
    EVERY,
    STEP_TIMEOUT,
    nothing_left,
    recipe,
    reference_final,
    restart_once_down,
    run_with_failure,
    steps_log,
    supervisor_plan,
)
from .mksbatch_site import Site, job_log, use_container, wait_for

pytestmark = pytest.mark.cluster


def test_a_killed_node_is_replaced_by_the_spare(cluster: Cluster, site: Site,
                                                tmp_path: Path) -> None:
    def strike(active: list[str], spares: list[str]) -> list[str]:
        cluster.kill_node(active[1])
        return [active[1]]

    log, back, _ = run_with_failure(cluster, site, tmp_path, 60, strike)
    # the ranks report the lost peer: confirmed by 2 s of heartbeat silence, not 10
    assert back < 10, (back, log)
    assert re.search(r"node node\d lost: reported by the step; no heartbeat for \d\.\d s",
                     log), log
    assert "No command given" not in log, log
    assert "execve()" not in log, log  # the spares' warm-up runs in any image


def test_rank_0_node_killed(cluster: Cluster, site: Site, tmp_path: Path) -> None:
    def strike(active: list[str], spares: list[str]) -> list[str]:
        cluster.kill_node(active[0])
        return [active[0]]

    log, back, _ = run_with_failure(cluster, site, tmp_path, 60, strike)
    assert back < 10 + 15, (back, log)


def test_a_frozen_node_is_a_hang(cluster: Cluster, site: Site, tmp_path: Path) -> None:
    def strike(active: list[str], spares: list[str]) -> list[str]:
        cluster.run("pkill -STOP -u squall -f allreduce.py", node=active[1], user="root")
        return []

    log, _back, _ = run_with_failure(cluster, site, tmp_path, 60, strike,
                                     failover={"detect_seconds": 10, "hang_seconds": 12})
    assert "(hung); tasks stopped on" in log, log


def test_a_restart_storm_is_stopped(cluster: Cluster, site: Site) -> None:
    """A program that never reports progress: each attempt hangs, none moves the
    checkpoint: the job stops with one line instead of relaunching for ever."""
    b = site.base
    r = {"name": "storm", "nodes": 1, "spares": 1, "time": "00:05:00",
         "log_dir": f"{b}/logs", "launcher": "srun", "command": ["sleep", "600"],
         "checkpoint": {"dir": f"{b}/ckpt", "complete_marker": "COMPLETE",
                        "resume": "--resume {checkpoint}"},
         "failover": {"detect_seconds": 5, "hang_seconds": 8, "max_restarts": 10}}
    site.cluster.put(f"{b}/job.yaml", yaml.safe_dump(r, sort_keys=False))
    job_id = int(site.mksbatch("job.yaml --submit").out.strip())
    info = cluster.wait_job(job_id, {"FAILED", "COMPLETED"}, timeout=180)
    log = job_log(site, job_id)
    assert info["JobState"] == "FAILED" and info["Restarts"] == "0", (info, log)
    assert "never moved the checkpoint forward: stopping the job" in log, log
    assert log.count("(hung)") == 3, log
    res = cluster.run(f"squeue -h -s -j {job_id} || true")
    assert "squall-" not in res.out, res


def test_a_second_failure_without_a_spare_requeues(cluster: Cluster, site: Site,
                                                   tmp_path: Path) -> None:
    steps = 60
    recipe(site, steps, 0.3, use_container(cluster))
    job_id = int(site.mksbatch("job.yaml --submit").out.strip())
    active, spares = supervisor_plan(site, job_id)
    wait_for(lambda: (site.host / "ckpt" / f"ckpt-{EVERY:06d}" / "COMPLETE").exists(),
             120, "a complete checkpoint")
    killed = [active[1]]
    cluster.kill_node(active[1])
    try:
        wait_for(lambda: "attempt 1 on" in job_log(site, job_id), 60, "a relaunch")
        now = re.search(r"attempt 1 on (\S+) from", job_log(site, job_id))
        assert now is not None
        second = [n for n in now.group(1).split(",") if n != spares[-1]] or [spares[-1]]
        wait_for(lambda: len(steps_log(site)) > 2, 60, "progress after the relaunch")
        cluster.kill_node(second[0])
        killed.append(second[0])
        wait_for(lambda: "no spare left: job" in job_log(site, job_id), 60,
                 "the requeue with no spare left")
    finally:
        restart_once_down(cluster, killed)
    info = cluster.wait_job(job_id, {"COMPLETED"}, timeout=400)
    assert int(info["Restarts"]) >= 1, info
    log = job_log(site, job_id)
    assert (site.host / "final.json").read_text() == reference_final(tmp_path, steps), log
    nothing_left(cluster, [*active, *spares])


def test_a_report_about_a_node_that_goes_on_beating_is_not_acted_on(
        cluster: Cluster, site: Site, tmp_path: Path) -> None:
    """A rank that blames a peer that is only slow (its timeout too short, a busy file
    system) writes a report while every node beats: nothing is lost, nothing relaunched,
    the job ends as an uninterrupted run."""
    steps = 30
    b = site.base
    blame = ('[ "$SLURM_PROCID" = 1 ] && echo "rank 1: rank 0 on $MASTER_ADDR timed out" '
             '>> "$SQUALL_PEER_LOST_FILE"; exec python3 "$0" "$@"')
    recipe(site, steps, 0.3, use_container(cluster), command=[
        "sh", "-c", blame, f"{b}/allreduce.py", f"--steps={steps}",
        f"--checkpoint-every={EVERY}", "--sleep=0.3", f"--step-timeout={STEP_TIMEOUT}",
        f"--checkpoint-dir={b}/ckpt", f"--final={b}/final.json", f"--log={b}/steps.log"])
    job_id = int(site.mksbatch("job.yaml --submit").out.strip())
    info = cluster.wait_job(job_id, {"COMPLETED", "FAILED"}, timeout=300)
    log = job_log(site, job_id)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "0", (info, log)
    assert "a rank reports: rank 1: rank 0 on node" in log, log
    assert " lost: " not in log and "attempt 1 on" not in log, log
    assert (site.host / "final.json").read_text() == reference_final(tmp_path, steps), log
