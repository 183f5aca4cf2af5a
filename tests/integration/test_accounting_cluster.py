"""Accounting on the mini cluster, and the image each job ran where admins look (issue 41).

The login node runs slurmdbd over MariaDB (Debian's packages), as every production site
does, so ``sacct`` answers. The plugin records the image of every container a job starts
in the job's AdminComment (``squall-image=REF@sha256:DIGEST`` for a registry image, the
file's path with its size and mtime for a ``.sqsh``), once per image, keeping whatever
else the site wrote there; and each node's slurmd log says which image a step started
(docs/admin.md).
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from .cluster import Cluster
from .registry_image import REGISTRY

pytestmark = pytest.mark.cluster


def sacct(cluster: Cluster, jobid: str, fields: str, timeout: float = 60,
          want: str = "") -> str:
    """The job's allocation line of ``sacct -P`` once it shows ``want`` (slurmdbd is
    written asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        res = cluster.run(f"sacct -j {jobid} -X -n -P -o {fields}", user="root", check=False,
                          timeout=30)
        line = res.out.strip()
        if res.rc == 0 and line and want in line:
            return line
        assert time.monotonic() < deadline, f"sacct for job {jobid}: {res}"
        time.sleep(1)


def push(cluster: Cluster, tools: str, repo: str) -> str:
    res = cluster.run(f"MARK={repo} python3 {tools}/push.py {repo} v1 0", node="login",
                      timeout=300)
    return json.loads(res.out.strip().splitlines()[-1])["digest"]


def salloc(cluster: Cluster, nodes: int, script: str, timeout: float = 300) -> tuple[str, str]:
    """Run script under ``salloc -N nodes``; the job id and the output."""
    res = cluster.run(f"salloc -N{nodes} bash -c '{script}'", timeout=timeout)
    m = re.search(r"Granted job allocation (\d+)", res.err)
    assert m, res
    return m.group(1), res.out


def test_sacct_reports_a_finished_job(cluster: Cluster) -> None:
    jobid = cluster.sbatch("#!/bin/sh\ntrue\n", "-N1")
    line = sacct(cluster, jobid, "JobID,User,State", want="COMPLETED")
    assert line == f"{jobid}|squall|COMPLETED", line


def test_every_image_a_job_ran_is_in_its_admin_comment(
        cluster: Cluster, tools: str, image: str) -> None:
    repo = f"acct/img-{uuid.uuid4().hex[:6]}"
    digest = push(cluster, tools, repo)
    ref = f"{REGISTRY}/{repo}:v1"
    step = f"srun -N2 --container-image={ref} cat /etc/os-release"
    later = f"srun -N1 -w node2 --container-image={ref} cat /etc/os-release"
    from_file = f"srun -N1 --container-image={image} true"
    jobid, _ = salloc(cluster, 2, f"{step} && {later} && {from_file}")
    line = sacct(cluster, jobid, "AdminComment", want=image)
    entries = line.split()
    # first and later steps, both nodes: one entry for the tag, with the digest it pinned
    assert entries.count(f"squall-image={ref}@{digest}") == 1, line
    files = [e for e in entries if e.startswith(f"squall-image={image}@")]
    assert len(files) == 1, line
    assert re.fullmatch(r"squall-image=\S+@size=\d+,mtime=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
                        files[0]), line
    # one line per node in slurmd's log, naming the job, the step and the digest
    for node in ("node1", "node2"):
        log = cluster.run(f"grep -F 'squall: job {jobid}.' /var/log/slurm/slurmd.log",
                          node=node, user="root", check=False).out
        assert f"image {ref}@{digest}" in log, (node, log)


def test_the_sites_own_admin_comment_is_kept(cluster: Cluster, image: str) -> None:
    flag = f"/fsx/home/squall/jobs/acct-go-{uuid.uuid4().hex[:6]}"
    jobid = cluster.sbatch(
        f"#!/bin/sh\nwhile [ ! -e {flag} ]; do sleep 0.2; done\n"
        f"srun --container-image={image} true\n", "-N1")
    cluster.wait_job(jobid, {"RUNNING"})
    cluster.run(f"scontrol update JobId={jobid} AdminComment='site=gpu-burnin ok'",
                user="root")
    cluster.put(flag, "")
    cluster.wait_job(jobid, {"COMPLETED"})
    line = sacct(cluster, jobid, "AdminComment", want="squall-image=")
    assert line.startswith("site=gpu-burnin ok squall-image="), line


def test_a_job_without_containers_gets_no_record(cluster: Cluster) -> None:
    jobid, _ = salloc(cluster, 1, "srun true")
    line = sacct(cluster, jobid, "JobID,AdminComment", want=jobid)
    assert line == f"{jobid}|", line


def test_a_job_that_ended_before_its_record_still_gets_it(cluster: Cluster) -> None:
    """The recorder runs detached, so a short job can end before it writes; the
    controller then refuses to change the job ("Job has already finished") and the
    recorder changes the job's accounting record instead, keeping what was there."""
    jobid = cluster.sbatch("#!/bin/sh\ntrue\n", "-N1")
    cluster.wait_job(jobid, {"COMPLETED"})
    word = f"squall-image=/fsx/images/late-{uuid.uuid4().hex[:6]}.sqsh@size=1,mtime=x"
    res = cluster.run(f"/usr/libexec/squall/squall-jobrecord {jobid} {word}", node="node1",
                      user="root", check=False, timeout=60)
    assert res.rc == 0, res
    assert sacct(cluster, jobid, "AdminComment", want="squall-image=") == word
