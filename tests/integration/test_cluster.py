"""The mini cluster itself (issue 2): several real hosts, and a job that survives a dead node."""

from __future__ import annotations

import time

from .cluster import Cluster


def test_srun_reaches_three_distinct_hosts(cluster: Cluster) -> None:
    res = cluster.run("srun -N3 hostname")
    hosts = res.out.split()
    assert len(hosts) == 3, res
    assert sorted(hosts) == ["node1", "node2", "node3"], res


def test_jobs_run_as_the_test_user_with_home_on_shared_storage(cluster: Cluster) -> None:
    res = cluster.run("srun -N1 bash -c 'id -u; echo $HOME; stat -c %U /fsx/home/squall'")
    assert res.out.split() == ["1000", "/fsx/home/squall", "squall"], res


def test_requeued_job_survives_a_killed_node(cluster: Cluster) -> None:
    name = f"requeue-{time.time_ns()}"
    out = f"/fsx/home/squall/jobs/{name}.out"
    # Each task says it started (a file per node and run) before its work.
    started = f"/fsx/home/squall/jobs/{name}.started"
    script = (
        "#!/bin/bash\n"
        "echo \"start restart=${SLURM_RESTART_COUNT:-0} nodes=$SLURM_JOB_NODELIST\"\n"
        f"mkdir -p {started}\n"
        f"srun bash -c 'touch {started}/$(hostname).${{SLURM_RESTART_COUNT:-0}}; "
        "sleep 25; echo done-$(hostname)'\n"
    )
    jobid = cluster.sbatch(script, f"-N2 --requeue --open-mode=append -o {out}")
    info = cluster.wait_job(jobid, {"RUNNING"}, timeout=60)
    first_nodes = cluster.run(f"scontrol show hostnames {info['NodeList']}").out.split()
    assert len(first_nodes) == 2
    # The step runs on both nodes before one is killed.
    marks = {f"{n}.0" for n in first_nodes}
    where = cluster.fsx_host / started[len("/fsx/"):]
    deadline = time.monotonic() + 60
    while not (where.is_dir() and marks <= {p.name for p in where.iterdir()}):
        assert time.monotonic() < deadline, f"the step did not start on {first_nodes}"
        time.sleep(0.2)
    victim = first_nodes[1]
    cluster.kill_node(victim)
    try:
        cluster.wait_node_state(victim, {"DOWN"}, timeout=60)
        info = cluster.wait_job(jobid, {"RUNNING"}, timeout=120,
                                where=lambda i: i.get("Restarts") == "1")
        second_nodes = cluster.run(f"scontrol show hostnames {info['NodeList']}").out.split()
        assert victim not in second_nodes, info
        info = cluster.wait_job(jobid, {"COMPLETED"}, timeout=120)
        assert info["Restarts"] == "1", info
        log = (cluster.fsx_host / out[len("/fsx/"):]).read_text()
        assert "start restart=0" in log and "start restart=1" in log, log
        second_run = log.split("start restart=1", 1)[1]
        assert sorted(w for w in second_run.split() if w.startswith("done-")) == sorted(
            f"done-{n}" for n in second_nodes), log
    finally:
        cluster.start_node(victim)
    cluster.wait_node_state(victim, {"IDLE"}, timeout=90)
