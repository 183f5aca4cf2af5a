"""A hostile user of the cluster's shared cache (issue 19, docs/security.md): alice plants
links, look-alike images and lying locks in /fsx/squall/images; root's build and gc on the
login node and squall's srun through the plugin must neither follow them nor run her
bytes. A canary outside the cache (root's and squall's files) must not change."""

from __future__ import annotations

import time
import uuid

import pytest

from .cluster import Cluster
from .test_sqshbuild_cluster import REGISTRY, push, sqshbuild, tools  # noqa: F401

pytestmark = pytest.mark.cluster

CACHE = "/fsx/squall/images"
CANARY = ("/root/canary-secret", "/fsx/home/squall/canary")
SNAP = "stat -c '%n %a %U %s %Y' {p} && sha256sum {p}"


def snapshot(cluster: Cluster) -> str:
    return "".join(cluster.run(SNAP.format(p=p), user="root").out for p in CANARY)


@pytest.fixture
def canary(cluster: Cluster):
    cluster.run(f"umask 077; echo root-secret > {CANARY[0]}", user="root")
    cluster.run(f"umask 077; echo squall-file > {CANARY[1]}", user="squall")
    return snapshot(cluster)


def test_root_build_and_gc_follow_no_link_alice_planted(cluster: Cluster, tools: str,  # noqa: F811
                                                         canary: str):
    tag = uuid.uuid4().hex[:8]
    pushed = push(cluster, tools, f"sec/links-{tag}", big_mb=1)
    layers = f"{CACHE}/layers/sha256"
    plants = []
    for blob in pushed["blobs"]:
        h = blob.split(":")[1]
        plants += [f"ln -s {CANARY[0]} {layers}/{h}.ok",
                   f"ln -s {CANARY[1]} {layers}/{h}.partial"]
    entry = "sha256-" + pushed["digest"].split(":")[1]
    plants += [f"ln -s {CANARY[0]} {CACHE}/locks/{entry}.lock",
               f"ln -s {CANARY[0]} {CACHE}/{entry}.used"]
    cluster.run(f"sqshbuild gc --max-size 1T --cache-dir {CACHE}", user="root")  # the dirs
    cluster.run("; ".join(plants), user="alice")
    res = cluster.run(sqshbuild(CACHE, f"{REGISTRY}/sec/links-{tag}:v1"), user="root",
                      timeout=300)
    assert res.out.strip().endswith(f"{entry}.sqsh"), res  # (--quiet: no notes shown)
    assert snapshot(cluster) == canary
    cluster.run(f"sqshbuild gc --max-size 1 --cache-dir {CACHE}", user="root")
    assert snapshot(cluster) == canary
    # alice's links are hers: nobody removed them
    assert cluster.run(f"test -L {CACHE}/locks/{entry}.lock", user="alice", check=False).rc == 0


def test_squall_never_runs_a_look_alike_image_alice_planted(cluster: Cluster, tools: str,  # noqa: F811
                                                           canary: str):
    """alice copies an image of hers (with /marker) under the digest name of the image
    squall is about to run: squall's srun gets the registry's image (was: alice's marker)."""
    tag = uuid.uuid4().hex[:8]
    pushed = push(cluster, tools, f"sec/poison-{tag}", big_mb=1)  # its own digest
    entry = "sha256-" + pushed["digest"].split(":")[1]
    mine = push(cluster, tools, f"sec/alice-{tag}", big_mb=1)
    home = "/fsx/home/alice"
    cluster.run(f"umask 022; {sqshbuild(f'{home}/cache', f'{REGISTRY}/sec/alice-{tag}:v1')}"
                f" >/dev/null && rm -rf {home}/root-{tag} && "
                f"unsquashfs -q -d {home}/root-{tag} {home}/cache/sha256-"
                f"{mine['digest'].split(':')[1]}.sqsh >/dev/null && "
                f"echo alice-was-here > {home}/root-{tag}/marker && "
                f"mksquashfs {home}/root-{tag} {CACHE}/{entry}.sqsh -quiet -noappend "
                f">/dev/null && chmod 644 {CACHE}/{entry}.sqsh", user="alice", timeout=300)
    res = cluster.run(f"SQSHBUILD_INSECURE_REGISTRIES={REGISTRY} srun -N2 -w node1,node2 "
                      f"--container-image={REGISTRY}/sec/poison-{tag}:v1 "
                      "sh -c 'cat /marker 2>/dev/null || echo clean'", user="squall",
                      timeout=300)
    assert res.out.split() == ["clean", "clean"], res
    assert snapshot(cluster) == canary
    # alice's look-alike is hers to remove (nobody else did): leave no digest behind
    cluster.run(f"rm -rf {CACHE}/{entry}.sqsh {home}/root-{tag} {home}/cache", user="alice")


def test_a_lying_lock_alice_planted_does_not_hold_a_step(cluster: Cluster, tools: str,  # noqa: F811
                                                        canary: str):
    """A lock of alice's with a foreign host and an mtime a year ahead (was: the step
    stayed COMPLETING until she removed it): squall's step runs at once."""
    tag = uuid.uuid4().hex[:8]
    pushed = push(cluster, tools, f"sec/lock-{tag}", big_mb=1)
    entry = "sha256-" + pushed["digest"].split(":")[1]
    cluster.run(f"echo '{{\"host\": \"elsewhere\", \"pid\": 1}}' > {CACHE}/locks/{entry}.lock"
                f" && touch -d '+365 days' {CACHE}/locks/{entry}.lock", user="alice")
    started = time.monotonic()
    res = cluster.run(f"SQSHBUILD_INSECURE_REGISTRIES={REGISTRY} srun -N1 -w node1 "
                      f"--container-image={REGISTRY}/sec/lock-{tag}:v1 printenv GREETING",
                      user="squall", timeout=120)
    assert res.out.split() == ["from-the-image"], res
    assert time.monotonic() - started < 60, res
    assert snapshot(cluster) == canary
