"""The scale cluster's smoke test (issue 27, docs/cluster.md "Many nodes on one machine"):
16 light nodes beside the mini cluster, /fsx on GlusterFS with a client per node, so that
page caches, O_EXCL and the lock files are per node as on Lustre. `make scale-up NODES=128`
and bench/bench_scale.py go further; `make test` runs only this.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import Cluster
from .test_sqshbuild_cluster import log_mark, tools  # noqa: F401  (fixture)

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
NODES = 16
SCALE = "scale"
CACHE = "/fsx/squall/images"


@pytest.fixture(scope="module")
def scale(cluster: Cluster) -> Iterator[Cluster]:
    subprocess.run(["bash", str(ROOT / "docker/scale/scale.sh"), "up", str(NODES)],
                   check=True, timeout=600)
    try:
        yield cluster
    finally:
        subprocess.run(["bash", str(ROOT / "docker/scale/scale.sh"), "down"], check=False,
                       timeout=120)


def push(cluster: Cluster, tools: str, repo: str, mark: str, big_mb: int = 0) -> str:  # noqa: F811
    res = cluster.run(f"MARK={mark} python3 {tools}/push.py {repo} v1 {big_mb}", node="login",
                      timeout=300)
    return json.loads(res.out.strip().splitlines()[-1])["digest"]


def requests(cluster: Cluster, repo: str, since: int) -> tuple[int, int]:
    log = cluster.run(f"tail -c +{since + 1} /var/log/registry.log", node="login",
                      user="root").out
    return (log.count(f'"GET /v2/{repo}/manifests/'),
            len(re.findall(rf'"GET /v2/{re.escape(repo)}/blobs/sha256:', log)))


def on_node(cluster: Cluster, node: str, cmd: str, **kw: object):
    """Run cmd as root in node's namespaces (its /fsx client, its hostname)."""
    enter = f"nsenter -t $(pgrep -f 'slurmd -D -N {node}$' | head -1) -m -u --"
    return cluster.run(f"{enter} bash -c {shlex.quote(cmd)}", node=SCALE, user="root",
                       **kw)  # type: ignore[arg-type]


def test_sixteen_nodes_start_a_new_tag_with_one_pull(scale: Cluster,
                                                     tools: str) -> None:  # noqa: F811
    repo = f"scale/smoke-{uuid.uuid4().hex[:6]}"
    digest = push(scale, tools, repo, "smoke")
    mark = log_mark(scale)
    res = scale.run(f"srun -N{NODES} --container-image=login:5000/{repo}:v1 cat /etc/mark",
                    node=SCALE, timeout=600)
    assert res.out.split() == ["smoke"] * NODES, res
    manifests, blobs = requests(scale, repo, mark)
    assert manifests == 1 and blobs == 3, (manifests, blobs, res)  # 2 layers + config
    assert sum(" pinned " in ln for ln in res.err.splitlines()) == 1, res
    entries = scale.run(f"ls {CACHE}", node=SCALE).out.split()
    hexd = digest.split(":")[1]
    assert f"sha256-{hexd}.sqsh" in entries, entries
    assert not [e for e in entries if e.startswith(".building") and hexd in e], entries


def test_a_builders_dead_node_is_taken_over_within_the_bound(scale: Cluster,
                                                             tools: str) -> None:  # noqa: F811
    """The lock's holder on s1 dies (SIGKILL: no heartbeat, no release); s2 sees another
    host's lock on GlusterFS, takes it over after 60 s of an unchanged file (lock.py
    STALE_AFTER) and builds; one image, no leftovers. The dead build's layer locks go two
    heartbeats later as a rule (about 73 s in all, here and in one CI run); one CI run took
    121 s, a layer lock waited its own full bound, cause not found: the bound asserted is
    the one every lock keeps, STALE_AFTER per lock the dead build held (image, layer)."""
    repo = f"scale/lock-{uuid.uuid4().hex[:6]}"
    digest = push(scale, tools, repo, "lock", big_mb=64)
    ref = f"login:5000/{repo}:v1"
    build = f"sqshbuild build --quiet --cache-dir {CACHE} {ref}"
    on_node(scale, "s1", f"setsid {build} >/tmp/b.out 2>&1 < /dev/null &")
    deadline = time.monotonic() + 60
    while not scale.run(f"ls {CACHE}/locks", node=SCALE, check=False).out.strip():
        assert time.monotonic() < deadline, on_node(scale, "s1", "cat /tmp/b.out")
        time.sleep(0.1)
    # [s]: the pattern does not match the shell that runs pkill
    on_node(scale, "s1", "pkill -KILL -f '[s]qshbuild build --quiet'")
    start = time.monotonic()
    res = on_node(scale, "s2", build.replace("sqshbuild build --quiet", "sqshbuild -v build"),
                  timeout=300)
    took = time.monotonic() - start
    hexd = digest.split(":")[1]
    assert res.out.strip().splitlines()[-1] == f"{CACHE}/sha256-{hexd}.sqsh", res
    # -v: each lock taken over, whose, after how long (the 121 s run's cause, next time)
    assert 55 <= took <= 2 * 60 + 45, (took, res.err)
    assert "took over the stale lock" in res.err, res
    entries = scale.run(f"ls -a {CACHE} {CACHE}/locks", node=SCALE).out.split()
    assert not [e for e in entries if hexd in e and (".building" in e or e.endswith(".lock"))
                ], entries
