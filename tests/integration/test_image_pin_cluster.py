"""One registry request per job, and one image per job (issue 27, docs/images.md "One
image per job"), on the mini cluster with the login node's registry.

Before the job pin, every node resolved the tag for every step (a 3-node job of 2 steps
made 6 manifest requests) and a tag pushed between two steps of a job gave its later step
the new image. Now the first step's resolution is pinned for the job (cluster, user, job
id): later steps, other nodes, a failover's relaunch on a spare and a requeue of the job run
that digest and ask nothing.
"""

from __future__ import annotations

import json
import re
import shlex
import time
import uuid

import pytest
import yaml

from .cluster import Cluster
from .mksbatch_site import Site, job_log, wait_for
from .registry_image import REGISTRY, log_mark, manifest_gets

pytestmark = pytest.mark.cluster
JOBS = "/fsx/home/squall/jobs"


def push_marked(cluster: Cluster, tools: str, repo: str, mark: str) -> str:
    res = cluster.run(f"MARK={mark} python3 {tools}/push.py {repo} v1 0", node="login",
                      timeout=300)
    return json.loads(res.out.strip().splitlines()[-1])["digest"]


def wait_lines(cluster: Cluster, path: str, n: int, timeout: float = 180) -> list[str]:
    host = cluster.fsx_host / path[len("/fsx/"):]
    deadline = time.monotonic() + timeout
    while True:
        lines = host.read_text().split() if host.exists() else []
        if len(lines) >= n:
            return lines
        assert time.monotonic() < deadline, f"{path}: {lines}"
        time.sleep(0.3)


def test_a_cached_tag_on_three_nodes_in_two_steps_asks_the_registry_once(
        cluster: Cluster, tools: str) -> None:
    repo = f"pin/once-{uuid.uuid4().hex[:6]}"
    push_marked(cluster, tools, repo, "one")
    ref = f"{REGISTRY}/{repo}:v1"
    cluster.run(f"srun -N1 -w node1 --container-image={ref} cat /etc/mark",
                timeout=300)  # cached
    mark = log_mark(cluster)
    step = f"srun -N3 --container-image={ref} --container-log=verbose cat /etc/mark"
    res = cluster.run(f"salloc -N3 -Q bash -c {shlex.quote(f'{step}; {step}')}", timeout=300)
    assert res.out.split() == ["one"] * 6, res
    assert manifest_gets(cluster, repo, mark) <= 1, res
    pinned = [ln for ln in res.err.splitlines() if " pinned " in ln]
    assert len(pinned) == 1 and pinned[0].startswith("squall: job ") and ref in pinned[0], res


def test_the_pin_line_stands_only_where_pyxis_says_its_import_lines(
        cluster: Cluster, tools: str) -> None:
    """Pyxis prints its import lines for a step of one task and the batch step: a step of
    several tasks keeps srun's stderr as Pyxis's, unless --container-log=verbose."""
    repo = f"pin/line-{uuid.uuid4().hex[:6]}"
    push_marked(cluster, tools, repo, "line")
    ref = f"{REGISTRY}/{repo}:v1"
    many = cluster.run(f"srun -N3 --container-image={ref} cat /etc/mark", timeout=300)
    assert many.out.split() == ["line"] * 3 and " pinned " not in many.err, many
    one = cluster.run(f"srun -N1 --container-image={ref} cat /etc/mark", timeout=300)
    assert one.out.split() == ["line"], one
    assert sum(" pinned " in ln for ln in one.err.splitlines()) == 1, one


def test_a_tag_moved_between_two_steps_changes_nothing_in_the_job(
        cluster: Cluster, tools: str) -> None:
    repo = f"pin/moved-{uuid.uuid4().hex[:6]}"
    old = push_marked(cluster, tools, repo, "old")
    ref = f"{REGISTRY}/{repo}:v1"
    base = f"{JOBS}/pin-moved-{time.time_ns()}"
    step = f"srun -N3 --container-image={ref} cat /etc/mark"
    jobid = cluster.sbatch(f"#!/bin/bash\n{step} > {base}.1\n"
                           f"while [ ! -e {base}.go ]; do sleep 0.2; done\n"
                           f"{step} > {base}.2\n", f"-N3 -o {base}.log")
    assert wait_lines(cluster, f"{base}.1", 3) == ["old"] * 3
    new = push_marked(cluster, tools, repo, "new")
    assert new != old
    cluster.put(f"{base}.go", "")
    info = cluster.wait_job(jobid, {"COMPLETED", "FAILED"}, timeout=300)
    log = (cluster.fsx_host / f"{base}.log"[len("/fsx/"):]).read_text()
    assert info["JobState"] == "COMPLETED", (info, log)
    assert wait_lines(cluster, f"{base}.2", 3) == ["old"] * 3, log
    res = cluster.run(f"srun -N3 --container-image={ref} cat /etc/mark", timeout=300)
    assert res.out.split() == ["new"] * 3, res  # the next job takes the tag as it is now


def test_a_requeued_job_runs_the_digest_it_pinned(cluster: Cluster,
                                                  tools: str) -> None:
    repo = f"pin/requeue-{uuid.uuid4().hex[:6]}"
    push_marked(cluster, tools, repo, "first")
    ref = f"{REGISTRY}/{repo}:v1"
    out = f"{JOBS}/pin-requeue-{time.time_ns()}.out"
    jobid = cluster.sbatch(
        f"#!/bin/bash\nsrun -N2 --container-image={ref} cat /etc/mark >> {out}\n"
        "[ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ] && exit 0\nsleep 600\n",
        f"-N2 --requeue -o {out}.log")
    try:
        assert wait_lines(cluster, out, 2) == ["first"] * 2
        push_marked(cluster, tools, repo, "second")
        cluster.run(f"scontrol requeue {jobid}", user="root")
        info = cluster.wait_job(jobid, {"COMPLETED"}, timeout=300,
                                where=lambda i: i.get("Restarts") == "1")
        assert wait_lines(cluster, out, 4) == ["first"] * 4, info
    finally:
        cluster.run(f"scancel {jobid}", user="root", check=False)


def test_a_failover_relaunch_runs_the_digest_the_job_pinned(
        cluster: Cluster, site: Site, tools: str) -> None:
    """A node dies after the tag moved: the relaunch on the spare (a new step of the same
    job, on a node that never ran the job's first step) runs the job's digest."""
    repo = f"pin/failover-{uuid.uuid4().hex[:6]}"
    old = push_marked(cluster, tools, repo, "before")
    ref = f"{REGISTRY}/{repo}:v1"
    b = site.base
    recipe = {"name": "pinfail", "nodes": 2, "spares": 1, "time": "00:10:00",
              "log_dir": f"{b}/logs", "launcher": "srun",
              "command": ["sh", "-c", f"cat /etc/mark >> {b}/marks; exec sleep 600"],
              "container": {"image": ref, "mounts": ["/fsx:/fsx"], "efa": "off"},
              "failover": {"detect_seconds": 10}}
    cluster.put(f"{b}/job.yaml", yaml.safe_dump(recipe, sort_keys=False))
    job_id = int(site.mksbatch("job.yaml --submit").out.strip())
    victim = ""
    try:
        assert wait_lines(cluster, f"{b}/marks", 2) == ["before"] * 2, job_log(site, job_id)
        assert push_marked(cluster, tools, repo, "after") != old
        m = re.search(r"failover: running on (\S+); spares: (\S+);", job_log(site, job_id))
        assert m, job_log(site, job_id)
        victim = m.group(1).split(",")[1]
        cluster.kill_node(victim)
        wait_for(lambda: "attempt 1 on" in job_log(site, job_id), 90, "a relaunch")
        marks = wait_lines(cluster, f"{b}/marks", 4)
        assert marks == ["before"] * 4, (marks, job_log(site, job_id))
        log = job_log(site, job_id)
        assert re.search(rf"attempt 1 on \S*{m.group(2)}", log), log  # on the spare
    finally:
        cluster.run(f"scancel {job_id}", user="root", check=False)
        if victim:
            cluster.bring_back(victim)
            cluster.wait_rejoined(victim)
