"""Later steps of a registry tag start without sqshbuild (issue 40, spank/plugin/pinmemo.h).

The job pins a tag's digest for all its steps, so a later step on a node where an earlier
step of the job resolved the same text runs the file that step got: no program start per
node per step (it cost 380-460 ms a step). The memo is root's and node-local, gone with
the job; a site image policy turns it off (each step checks the policy in force).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import pytest

from .cluster import Cluster
from .registry_image import REGISTRY

pytestmark = pytest.mark.cluster
SQSHBUILD = "/usr/bin/sqshbuild"
MEMO = "/run/squall/resolved"


@pytest.fixture
def ref(cluster: Cluster, tools: str) -> str:
    repo = f"memo/img-{uuid.uuid4().hex[:6]}"
    res = cluster.run(f"MARK={repo} python3 {tools}/push.py {repo} v1 0", node="login",
                      timeout=300)
    json.loads(res.out.strip().splitlines()[-1])
    return f"{REGISTRY}/{repo}:v1"


@pytest.fixture
def no_sqshbuild(cluster: Cluster) -> Iterator[None]:
    """sqshbuild not executable on node1 and node2 until the test ends."""
    yield
    for node in ("node1", "node2"):
        cluster.run(f"chmod 0755 {SQSHBUILD}", node=node, user="root")


def test_a_later_step_of_a_tag_runs_without_sqshbuild(
        cluster: Cluster, ref: str, no_sqshbuild: None) -> None:
    flag = f"/fsx/home/squall/jobs/memo-go-{uuid.uuid4().hex[:6]}"
    step = f"srun -N2 -w node1,node2 --container-image={ref} cat /etc/mark"
    jobid = cluster.sbatch(
        f"#!/bin/sh\n{step}\nwhile [ ! -e {flag} ]; do sleep 0.2; done\n{step}\n",
        "-N2 -w node1,node2 -o /fsx/home/squall/jobs/memo-%j.out")
    out = f"/fsx/home/squall/jobs/memo-{jobid}.out"
    host = cluster.fsx_host / out[len("/fsx/"):]
    cluster._wait(lambda: str(host.exists() and host.read_text().count("memo/") >= 2),
                  {"True"}, 300, "the first step")
    for node in ("node1", "node2"):
        memos = cluster.run(f"grep -l '^ref {ref}$' {MEMO}/{jobid}-*", node=node,
                            user="root").out.split()
        assert len(memos) == 1, (node, memos)
        mode = cluster.run(f"stat -c '%U %a' {MEMO} {memos[0]}", node=node, user="root").out
        assert mode.split("\n")[:2] == ["root 700", "root 600"], mode
        cluster.run(f"chmod 0000 {SQSHBUILD}", node=node, user="root")
    cluster.put(flag, "")
    info = cluster.wait_job(jobid, {"COMPLETED", "FAILED"}, timeout=120)
    text = host.read_text()
    assert info["JobState"] == "COMPLETED", text
    assert re.findall(r"^memo/\S+$", text, re.M) == [ref.split("/", 1)[1].split(":")[0]] * 4, \
        text
    # the epilog removed the job's memos
    for node in ("node1", "node2"):
        left = cluster.run(f"ls {MEMO} | grep -c '^{jobid}-' || true", node=node,
                           user="root").out.strip()
        assert left == "0", (node, left)


def test_a_new_job_resolves_again(cluster: Cluster, ref: str, no_sqshbuild: None) -> None:
    cluster.run(f"srun -N1 -w node1 --container-image={ref} cat /etc/mark", timeout=300)
    cluster.run(f"chmod 0000 {SQSHBUILD}", node="node1", user="root")
    res = cluster.run(f"srun -N1 -w node1 --container-image={ref} cat /etc/mark", check=False)
    assert res.rc != 0 and "sqshbuild" in res.err, res
