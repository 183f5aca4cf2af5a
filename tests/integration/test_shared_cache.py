"""One image cache for the cluster, written by the image builder alone (issue 26,
docs/security.md): a registry image asked for through the plugin by one user, then by three
others and root, is pulled once, by the builder, into /fsx/squall/images; nothing in that
cache is a user's or writable by anyone but the builder; a user's own `sqshbuild build`
reads it and writes only the user's ~/.cache/squall/images."""

from __future__ import annotations

import stat
import uuid

import pytest

from .cache_model import (
    BUILDER,
    CACHE,
    USERS,
    cache_problems,
    expected_pulls,
    host_path,
    images_in,
    served_blobs,
    uid_of,
)
from .cluster import Cluster
from .registry_image import REGISTRY, log_mark, push, sqshbuild

pytestmark = pytest.mark.cluster
LOG = "/var/log/registry.log"


def srun_image(cluster: Cluster, user: str, ref: str, nodes: str) -> None:
    """The step runs from the image (umask 077 travels with srun: the builder's files must
    not depend on the caller's umask). No SQSHBUILD_INSECURE_REGISTRIES: the builder's
    environment is built from nothing, registries.conf allows plain HTTP to login:5000."""
    n = len(nodes.split(","))
    res = cluster.run(f"umask 077; srun -N{n} -w {nodes} --container-image={ref} "
                      "printenv GREETING", user=user, timeout=300)
    assert res.out.split() == ["from-the-image"] * n, (user, res)
    assert "may not pull" not in res.err, (user, res)  # a public image: never the fallback


def test_a_public_image_is_pulled_once_for_four_users_and_root(cluster: Cluster,
                                                                tools: str):
    tag = uuid.uuid4().hex[:8]
    pushed = push(cluster, tools, f"test/shared-{tag}", big_mb=1)  # its own digest
    ref = f"{REGISTRY}/test/shared-{tag}:v1"
    want = expected_pulls(cluster, pushed["blobs"], CACHE)
    since = log_mark(cluster)
    srun_image(cluster, "squall", ref, "node1,node2")
    for user, nodes in (("alice", "node2"), ("bob", "node3"), ("carol", "node1,node3"),
                        ("root", "node2,node3")):
        srun_image(cluster, user, ref, nodes)
    assert served_blobs(cluster, LOG, since, pushed["blobs"]) == want

    entries = images_in(cluster, CACHE, pushed["digest"])
    image = [p for p in entries if p.name.endswith(".sqsh")]
    assert len(image) == 1, entries
    st = image[0].stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid_of(cluster, BUILDER), 0o644)
    assert cache_problems(cluster) == []
    for user in USERS:  # nobody built it in a cache of their own
        assert images_in(cluster, f"/fsx/home/{user}/.cache/squall/images",
                         pushed["digest"]) == [], user


def test_a_users_own_build_reads_the_shared_cache_and_writes_only_their_own(
        cluster: Cluster, tools: str):
    tag = uuid.uuid4().hex[:8]
    warm = push(cluster, tools, f"test/warm-{tag}", big_mb=1)
    cold = push(cluster, tools, f"test/cold-{tag}", big_mb=1)
    warm_ref, cold_ref = (f"{REGISTRY}/test/{n}-{tag}:v1" for n in ("warm", "cold"))
    # root warms the cache: root's build writes the shared cache (as the builder)
    res = cluster.run(sqshbuild(CACHE, warm_ref), user="root", timeout=300)
    shared = f"{CACHE}/sha256-{warm['digest'].split(':')[1]}.sqsh"
    assert res.out.strip().splitlines()[-1] == shared, res
    assert cache_problems(cluster) == []
    before = {p.name for p in host_path(cluster, CACHE).rglob("*")}
    # carol, umask 077: the warm image is a hit in the shared cache, the cold one is built
    # in her own cache, and the shared cache does not change
    res = cluster.run(f"umask 077; {sqshbuild(CACHE, warm_ref)}", user="carol", node="node1",
                      timeout=300)
    assert res.out.strip().splitlines()[-1] == shared, res
    res = cluster.run(f"umask 077; {sqshbuild(CACHE, cold_ref)}", user="carol", node="node1",
                      timeout=300)
    own = "/fsx/home/carol/.cache/squall/images"
    assert res.out.strip().splitlines()[-1] == \
        f"{own}/sha256-{cold['digest'].split(':')[1]}.sqsh", res
    st = host_path(cluster, own).stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid_of(cluster, "carol"), 0o700)
    assert {p.name for p in host_path(cluster, CACHE).rglob("*")} == before
    assert images_in(cluster, CACHE, cold["digest"]) == []
    assert cache_problems(cluster) == []


def test_users_cannot_write_the_shared_cache(cluster: Cluster, tools: str):
    """Not one name of theirs in it: no file, directory or link, at the top or below."""
    tag = uuid.uuid4().hex[:8]
    push(cluster, tools, f"test/nowrite-{tag}")
    cluster.run(sqshbuild(CACHE, f"{REGISTRY}/test/nowrite-{tag}:v1"), user="root",
                timeout=300)
    dirs = sorted({CACHE, *(f"{CACHE}/{p.relative_to(host_path(cluster, CACHE))}"
                            for p in host_path(cluster, CACHE).rglob("*") if p.is_dir())})
    for d in dirs:
        for attempt in (f"touch {d}/alice-{tag}", f"mkdir {d}/alice-{tag}",
                        f"ln -s /etc/passwd {d}/alice-{tag}"):
            res = cluster.run(attempt, user="alice", check=False)
            assert res.rc != 0 and "Permission denied" in res.err, (attempt, res)
    assert cache_problems(cluster) == []
