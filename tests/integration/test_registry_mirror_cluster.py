"""An air-gapped cluster behind a mirror: the nodes' /etc/containers/registries.conf
(docker/registries.conf) makes the login node's read-only registry (login:5002) a mirror of
Docker Hub, so `srun --container-image=ubuntu:24.04` resolves the short name through it,
with no Internet.

The image is built locally (the same test image as test_sqshbuild_cluster.py) and pushed
by root, through login:5003 (the mirror's one account, only root's), under Docker Hub's
name for it, library/ubuntu. A user cannot push there (issue 39: the mirror was login:5000,
where any user pushes, so a short name served everyone what any user pushed).
"""

from __future__ import annotations

import json
import uuid

import pytest

from .cluster import Cluster
from .registry_image import manifest_gets

pytestmark = pytest.mark.cluster
MIRROR_LOG = "/var/log/registry-mirror.log"
SEED = ("REGISTRY=login:5003 REGISTRY_USER=root "
        "REGISTRY_PASSWORD_FILE=/etc/squall/registry-mirror.password")


def push_as(cluster: Cluster, tools: str, repo: str, tag: str,
            user: str = "root", seed: str = SEED) -> dict:
    res = cluster.run(f"{seed} MARK={user} python3 {tools}/push.py {repo} {tag} 0",
                      node="login", user=user, timeout=300)
    return json.loads(res.out.strip().splitlines()[-1])


def mirror_mark(cluster: Cluster) -> int:
    return int(cluster.run(f"stat -c %s {MIRROR_LOG}", node="login", user="root").out)


@pytest.mark.parametrize("form", ["ubuntu:{tag}", "docker.io/library/ubuntu:{tag}",
                                  "library/ubuntu:{tag}"])
def test_short_name_through_the_nodes_docker_hub_mirror(cluster: Cluster, tools: str,
                                                        form: str) -> None:
    tag = f"24.04-{uuid.uuid4().hex[:6]}"   # a tag no earlier run cached
    pushed = push_as(cluster, tools, "library/ubuntu", tag)
    mark = mirror_mark(cluster)
    ref = form.format(tag=tag)
    res = cluster.run(f"srun -N1 -w node1 --container-image={ref} cat /etc/os-release",
                      timeout=300)
    assert "ID=sqshbuildtest" in res.out, res
    assert manifest_gets(cluster, "library/ubuntu", mark, MIRROR_LOG) >= 1, \
        "the mirror was not asked"
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
    assert len(lines) == 1 and "login:5002" in lines[0], res
    assert "Traceback" not in res.err, res


def test_a_user_cannot_put_an_image_behind_a_short_name(
        cluster: Cluster, tools: str) -> None:
    """alice pushes library/ubuntu:TAG where she can (login:5000) and tries the mirror
    itself; everyone's `ubuntu:TAG` still runs root's image."""
    tag = f"24.04-{uuid.uuid4().hex[:6]}"
    push_as(cluster, tools, "library/ubuntu", tag)  # root's
    push_as(cluster, tools, "library/ubuntu", tag, user="alice", seed="REGISTRY=login:5000")
    for seed in ("REGISTRY=login:5002", "REGISTRY=login:5003"):  # read-only; root's account
        res = cluster.run(f"{seed} MARK=alice python3 {tools}/push.py library/ubuntu {tag} 0",
                          node="login", user="alice", check=False, timeout=300)
        assert res.rc != 0, (seed, res)
    res = cluster.run(f"srun -N1 -w node1 --container-image=ubuntu:{tag} cat /etc/mark",
                      user="bob", timeout=300)
    assert res.out.split() == ["root"], res
