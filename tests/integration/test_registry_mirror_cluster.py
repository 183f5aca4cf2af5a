"""An air-gapped cluster behind a mirror: the nodes' /etc/containers/registries.conf
(docker/registries.conf) makes the login node's registry a mirror of Docker Hub, so
`srun --container-image=ubuntu:24.04` resolves the short name through it, with no Internet.

The image is built locally (the same test image as test_sqshbuild_cluster.py) and pushed
to login:5000 under Docker Hub's name for it, library/ubuntu.
"""

from __future__ import annotations

import json
import uuid

import pytest

from .cluster import Cluster
from .test_sqshbuild_cluster import log_mark, tools  # noqa: F401  (fixture)

pytestmark = pytest.mark.cluster


def push_as(cluster: Cluster, tools: str, repo: str, tag: str) -> dict:  # noqa: F811
    res = cluster.run(f"python3 {tools}/push.py {repo} {tag} 0", node="login", timeout=300)
    return json.loads(res.out.strip().splitlines()[-1])


def manifest_gets(cluster: Cluster, repo: str, since: int) -> int:
    log = cluster.run(f"tail -c +{since + 1} /var/log/registry.log", node="login",
                      user="root").out
    return log.count(f'"GET /v2/{repo}/manifests/')


@pytest.mark.parametrize("form", ["ubuntu:{tag}", "docker.io/library/ubuntu:{tag}",
                                  "library/ubuntu:{tag}"])
def test_short_name_through_the_nodes_docker_hub_mirror(cluster: Cluster, tools: str,  # noqa: F811
                                                        form: str) -> None:
    tag = f"24.04-{uuid.uuid4().hex[:6]}"   # a tag no earlier run cached
    pushed = push_as(cluster, tools, "library/ubuntu", tag)
    mark = log_mark(cluster)
    ref = form.format(tag=tag)
    res = cluster.run(f"srun -N1 -w node1 --container-image={ref} cat /etc/os-release",
                      timeout=300)
    assert "ID=sqshbuildtest" in res.out, res
    assert manifest_gets(cluster, "library/ubuntu", mark) >= 1, "the mirror was not asked"
    # Another node: the image is in the shared cache (the tag is still resolved, tags move).
    res = cluster.run(f"srun -N1 -w node2 --container-image={ref} cat /etc/os-release",
                      timeout=300)
    assert "ID=sqshbuildtest" in res.out, res
    assert pushed["digest"].startswith("sha256:")


def test_a_name_no_mirror_has_fails_in_one_line(cluster: Cluster) -> None:
    missing = f"ubuntu:none-{uuid.uuid4().hex[:6]}"
    res = cluster.run(f"srun -N1 -w node1 --container-image={missing} true", check=False,
                      timeout=300)
    assert res.rc != 0
    lines = [ln for ln in res.err.splitlines() if ln.startswith("squall: error:")]
    assert len(lines) == 1 and "login:5000" in lines[0], res
    assert "Traceback" not in res.err, res
