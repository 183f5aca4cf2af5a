"""One image cache for a site: an admin warms /fsx/squall/images as root, then two users
(squall and alice) with umask 077 build, hit root's images, never use each other's (they
build those again in their per-user caches: docs/security.md) and run registry
references through the plugin (docs/sqshbuild.md, "Permissions")."""

from __future__ import annotations

import stat
import uuid

import pytest

from .cluster import Cluster
from .test_sqshbuild_cluster import REGISTRY, push, sqshbuild, tools  # noqa: F401

pytestmark = pytest.mark.cluster

CACHE = "/fsx/squall/images"
USERS = ("squall", "alice")


def build_as(cluster: Cluster, user: str, ref: str, node: str = "login",
             other: str = "") -> str:
    """The image path; with ``other``, the cache holds that user's image of ``ref``, which
    this user must not use: one note naming it, a build in the per-user cache."""
    cmd = sqshbuild(CACHE, ref)
    if other:  # --quiet leaves notes out (docs/cli.md): this one must be seen
        assert " --quiet" in cmd, cmd
        cmd = cmd.replace(" --quiet", "")
    res = cluster.run(f"umask 077; {cmd}", node=node, user=user, timeout=300)
    if other:
        assert f"belongs to {other}, who is not root" in res.err, res
    else:
        assert "note:" not in res.err, res  # never the per-user fallback here
    return res.out.strip().splitlines()[-1]


def test_root_warms_the_cache_then_two_users_with_umask_077(cluster: Cluster,
                                                             tools: str):  # noqa: F811
    tag = uuid.uuid4().hex[:8]
    # big_mb=1: a random layer, so each image has its own digest
    images = {name: push(cluster, tools, f"test/shared-{name}-{tag}", big_mb=1)
              for name in ("warm", "squall", "alice", "plugin-squall", "plugin-alice")}
    ref = {name: f"{REGISTRY}/test/shared-{name}-{tag}:v1" for name in images}
    path = {name: f"{CACHE}/sha256-{pushed['digest'].split(':')[1]}.sqsh"
            for name, pushed in images.items()}
    host = cluster.fsx_host / CACHE[len("/fsx/"):]
    # What other users planted in the shared cache (test_hostile_cache_cluster's alice)
    # stays there: nobody but its owner or an admin removes it. This test's own builds
    # must leave nothing.
    before = {*host.glob(".building-*"), *host.glob("locks/*.lock")}
    # What an older sqshbuild run as root (make demo) left: its directories root's 0755.
    cluster.run(f"install -d -m 0755 {CACHE}/index {CACHE}/locks", user="root")
    # The admin warms the cache (and so repairs those directories).
    assert build_as(cluster, "root", ref["warm"]) == path["warm"]
    for user in USERS:
        assert build_as(cluster, user, ref["warm"], node="node1") == path["warm"]  # a hit
        assert build_as(cluster, user, ref[user], node="node2") == path[user]      # a build
    # another user's image is never used: built again in alice's own cache
    mine = build_as(cluster, "alice", ref["squall"], other="squall")
    assert mine.startswith("/fsx/home/alice/.cache/squall/images/"), mine
    # The plugin runs sqshbuild as the job's user (umask 077 travels with srun).
    for user in USERS:
        for name in (f"plugin-{user}", "alice" if user == "squall" else "squall", "warm"):
            res = cluster.run(f"umask 077; SQSHBUILD_INSECURE_REGISTRIES={REGISTRY} srun -N2 "
                              f"-w node1,node2 --container-image={ref[name]} printenv GREETING",
                              user=user, timeout=300)
            assert res.out.split() == ["from-the-image"] * 2, (user, name, res)
    for name, p in path.items():
        st = (host / p.rsplit("/", 1)[1]).stat()
        assert stat.S_IMODE(st.st_mode) == 0o644, name
    for sub in ("index", "locks", "layers", "layers/sha256"):  # sticky: nobody replaces
        assert stat.S_IMODE((host / sub).stat().st_mode) == 0o1777, sub  # another's entry
    left = {*host.glob(".building-*"), *host.glob("locks/*.lock")} - before
    assert not left, sorted(left)
    ours = {p.rsplit("/", 1)[1] for p in path.values()}  # other tests' images aside
    for user in USERS:  # each built only the other's image in a per-user cache
        own = cluster.fsx_host / "home" / user / ".cache" / "squall" / "images"
        other = "alice" if user == "squall" else "squall"
        mine = {p.name for p in own.glob("*.sqsh")} & ours
        assert mine == {path[other].rsplit("/", 1)[1]}, (user, sorted(mine))
