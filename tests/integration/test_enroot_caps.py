"""Enroot on the nodes as NVIDIA's `enroot` and `enroot+caps` packages lay it out (issue 42).

The `enroot+caps` package gives two helpers file capabilities (its postinst, and the
Makefile's `setcap` target): `enroot-mksquashovlfs` cap_sys_admin+pe and
`enroot-aufs2ovlfs` cap_sys_admin,cap_mknod+pe. With them a site's users run
`enroot import` beside squall, as Pyxis's tests do: here a plain user imports the test
image from the login node's registry (plain HTTP inside the cluster, no network beyond it;
its second layer has a whiteout and an opaque directory, which aufs2ovlfs turns into
overlay ones with mknod), then creates and starts a container of it.
"""

from __future__ import annotations

import time

import pytest

from .cluster import Cluster
from .pyxis_helpers import NODE
from .registry_image import REGISTRY, push

CAPS = {
    "/usr/bin/enroot-mksquashovlfs": "cap_sys_admin=ep",
    "/usr/bin/enroot-aufs2ovlfs": "cap_mknod,cap_sys_admin=ep",
}


@pytest.mark.parametrize("path", sorted(CAPS))
def test_the_helpers_carry_the_caps_packages_capabilities(cluster: Cluster, path: str) -> None:
    out = cluster.run(f"/usr/sbin/getcap {path}", node=NODE).out.split()
    assert out == [path, CAPS[path]], out


def test_a_plain_user_imports_an_image_and_runs_it(cluster: Cluster, tools: str) -> None:
    repo = f"enrootcaps{time.time_ns()}"
    push(cluster, tools, repo)
    name = f"caps{time.time_ns()}"
    sqsh = f"/tmp/{name}.sqsh"
    try:
        res = cluster.run(f"enroot import -o {sqsh} 'docker://{REGISTRY}#{repo}:v1'",
                          node=NODE, timeout=300, check=False)
        assert res.rc == 0, res
        cluster.run(f"enroot create -n {name} {sqsh}", node=NODE, timeout=120)
        # /gone was whited out, /opaque's old file hidden by the opaque directory
        out = cluster.run(f"enroot start {name} sh -c "
                          "'test ! -e /gone && ls -A /opaque && cat /opaque/new'",
                          node=NODE, check=False)
        assert (out.rc, out.out.split()) == (0, ["new", "new"]), out
    finally:
        cluster.run(f"enroot remove -f {name}; rm -f {sqsh}", node=NODE, check=False)
