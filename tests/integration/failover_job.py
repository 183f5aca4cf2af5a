"""The failover tests' job on the mini cluster (docs/failover.md): the recipe that runs
sbatch/demo/allreduce.py on two nodes with one spare, the final state of an uninterrupted
run, and a run struck mid-way (run_with_failure) checked to go on in the same allocation
from the newest complete checkpoint, with nothing of the failed attempt left running.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from .cluster import Cluster
from .mksbatch_site import DEMO_DIR, DEMO_IMAGE, Site, job_log, use_container, wait_for

EVERY = 10
STEP_TIMEOUT = 600  # the failover must act long before the program's own timeout


def recipe(site: Site, steps: int, sleep: float, container: bool, **top: object) -> None:
    b = site.base
    site.cluster.put(f"{b}/allreduce.py", (DEMO_DIR / "allreduce.py").read_bytes(), mode=0o755)
    r: dict[str, object] = {
        "name": "failover", "nodes": 2, "spares": 1, "time": "00:15:00",
        "log_dir": f"{b}/logs", "launcher": "srun",
        "command": ["python3", f"{b}/allreduce.py", f"--steps={steps}",
                    f"--checkpoint-every={EVERY}", f"--sleep={sleep}",
                    f"--step-timeout={STEP_TIMEOUT}", f"--checkpoint-dir={b}/ckpt",
                    f"--final={b}/final.json", f"--log={b}/steps.log"],
        "checkpoint": {"dir": f"{b}/ckpt", "pattern": "ckpt-*",
                       "complete_marker": "COMPLETE", "newest_by": "name",
                       "resume": "--resume {checkpoint}"},
        "failover": {"detect_seconds": 10},
    }
    if container:
        r["container"] = {"image": DEMO_IMAGE, "mounts": ["/fsx:/fsx"], "workdir": b,
                          "efa": "off"}
    r.update(top)
    site.cluster.put(f"{b}/job.yaml", yaml.safe_dump(r, sort_keys=False))


def reference_final(tmp_path: Path, steps: int) -> str:
    """An uninterrupted two-rank run of the same program, here on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen(
        [sys.executable, str(DEMO_DIR / "allreduce.py"), f"--steps={steps}",
         f"--checkpoint-every={EVERY}", "--sleep=0", f"--checkpoint-dir={tmp_path}/ck",
         f"--final={tmp_path}/final.json", f"--rank={rank}", "--world=2",
         "--master-addr=127.0.0.1", f"--master-port={port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for rank in (0, 1)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    return (tmp_path / "final.json").read_text()


def supervisor_plan(site: Site, job_id: int) -> tuple[list[str], list[str]]:
    m = None

    def found() -> bool:
        nonlocal m
        m = re.search(r"failover: running on (\S+); spares: (\S+);", job_log(site, job_id))
        return m is not None

    wait_for(found, 90, "the supervisor's first line")
    assert m is not None
    return m.group(1).split(","), m.group(2).split(",")


def nothing_left(cluster: Cluster, nodes: list[str]) -> None:
    for node in nodes:
        res = cluster.run("pgrep -u squall -f allreduce.py || true", node=node, user="root")
        assert res.out.strip() == "", (node, res)


def steps_log(site: Site) -> list[int]:
    path = site.host / "steps.log"
    return [int(line.split()[1]) for line in path.read_text().splitlines()] \
        if path.exists() else []


def restart_once_down(cluster: Cluster, nodes: list[str]) -> None:
    """Boot the killed nodes again, marked DOWN first as an admin does (Cluster.bring_back):
    one booted while still completing (MIXED) the dead part of a job that ended first gets
    a requeue's queued kill for its job id, which then ends the requeued run there (Slurm's
    retry, not squall's; docs/failover.md)."""
    for v in nodes:
        cluster.bring_back(v)


def run_with_failure(cluster: Cluster, site: Site, tmp_path: Path, steps: int,
                     strike, container: bool | None = None,
                     **top: object) -> tuple[str, float, list[int]]:
    """Submit, wait for a complete checkpoint, ``strike(active, spares)``; returns the job
    log, the seconds from the strike to the first step past the resume point, steps."""
    recipe(site, steps, 0.3, use_container(cluster) if container is None else container,
           **top)
    job_id = int(site.mksbatch("job.yaml --submit").out.strip())
    active, spares = supervisor_plan(site, job_id)
    wait_for(lambda: (site.host / "ckpt" / f"ckpt-{2 * EVERY:06d}" / "COMPLETE").exists(),
             120, "the second complete checkpoint")
    executed = len(steps_log(site))
    struck = time.monotonic()
    victims = strike(active, spares)
    try:
        # every rank past its resume point: rank 0 logs a step of the new attempt
        wait_for(lambda: "attempt 1 on" in job_log(site, job_id), 60, "a relaunch")
        resume = re.search(r"attempt 1 on \S+ from \S+/ckpt-(\d+)", job_log(site, job_id))
        start = int(resume.group(1)) if resume else 0
        wait_for(lambda: [s for s in steps_log(site)[executed:] if s == start + 1], 60,
                 "a step past the resume point")
        back = time.monotonic() - struck
        info = cluster.wait_job(job_id, {"COMPLETED"}, timeout=300)
        assert info["Restarts"] == "0", info  # never requeued: the spare took over
    finally:
        restart_once_down(cluster, victims)
    log = job_log(site, job_id)
    assert (site.host / "final.json").read_text() == reference_final(tmp_path, steps), log
    nothing_left(cluster, [*active, *spares])
    for v in victims:  # whole again for the next test (Slurm's stale count: wait_rejoined)
        cluster.wait_rejoined(v)
    return log, back, steps_log(site)
