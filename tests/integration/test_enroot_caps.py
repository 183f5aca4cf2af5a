"""Enroot on the nodes as NVIDIA's `enroot` and `enroot+caps` packages lay it out (issue 42).

The `enroot+caps` package gives two helpers file capabilities (its postinst, and the
Makefile's `setcap` target): `enroot-mksquashovlfs` cap_sys_admin+pe and
`enroot-aufs2ovlfs` cap_sys_admin,cap_mknod+pe. With them a site's users run
`enroot import` beside squall, as Pyxis's tests do: here a plain user imports the test
image from the login node's registry (plain HTTP inside the cluster, no network beyond it;
its second layer has a whiteout and an opaque directory, which aufs2ovlfs turns into
overlay ones with mknod), then creates and starts a container of it.

Enroot's first request (HEAD, to learn whether it must authenticate) names no manifest
type, which Debian's docker-registry answers by converting the manifest to schema 1; that
needs the image config's history, which the sqshbuild test image lacks (400, "empty
history"). So the image pushed here is that one with a history, as any built image has.
"""

from __future__ import annotations

import time

import pytest

from .cluster import Cluster
from .pyxis_helpers import NODE
from .registry_image import REGISTRY

# On the login node: push.py (registry_image.py) with a history in the image's config, one
# entry a layer, as every image built by a real tool has (python3 history.py REPO TAG MB).
HISTORY = r'''
import json, os, runpy, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import imagekit
plain = imagekit.Image.config_blob
def with_history(self):
    doc = json.loads(plain(self))
    doc["history"] = [{"created_by": "layer %d" % i} for i in range(len(self.layers))]
    return json.dumps(doc, sort_keys=True).encode()
imagekit.Image.config_blob = with_history
sys.argv = [os.path.join(here, "push.py"), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
'''

CAPS = {
    "/usr/bin/enroot-mksquashovlfs": {"cap_sys_admin"},
    "/usr/bin/enroot-aufs2ovlfs": {"cap_sys_admin", "cap_mknod"},
}


@pytest.mark.parametrize("path", sorted(CAPS))
def test_the_helpers_carry_the_caps_packages_capabilities(cluster: Cluster, path: str) -> None:
    # getcap prints "PATH cap_a,cap_b=ep", in an order of its own
    out = cluster.run(f"/usr/sbin/getcap {path}", node=NODE).out.split()
    assert len(out) == 2 and out[0] == path, out
    caps, _, flags = out[1].partition("=")
    assert (set(caps.split(",")), flags) == (CAPS[path], "ep"), out


def test_a_plain_user_imports_an_image_and_runs_it(cluster: Cluster, tools: str) -> None:
    repo = f"enrootcaps{time.time_ns()}"
    cluster.put(f"{tools}/history.py", HISTORY)
    cluster.run(f"python3 {tools}/history.py {repo} v1 0", node="login", timeout=300)
    name = f"caps{time.time_ns()}"
    sqsh, rc = f"/tmp/{name}.sqsh", f"/tmp/{name}.rc"
    try:
        res = cluster.run(f"enroot import -o {sqsh} 'docker://{REGISTRY}#{repo}:v1'",
                          node=NODE, timeout=300, check=False)
        assert res.rc == 0, res
        listing = cluster.run(f"unsquashfs -l {sqsh}", node=NODE).out.split()
        # /gone was whited out, /opaque's old file hidden by the opaque directory
        assert "squashfs-root/gone" not in listing, listing
        assert "squashfs-root/opaque/old" not in listing, listing
        assert "squashfs-root/opaque/new" in listing, listing
        cluster.run(f"enroot create -n {name} {sqsh}", node=NODE, timeout=120)
        # --rc: the command itself, not the image's entrypoint
        cluster.run(f"printf 'exec \"$@\"\\n' > {rc}", node=NODE)
        out = cluster.run(f"enroot start --rc {rc} {name} "
                          "sh -c 'ls -A /opaque; cat /etc/os-release'", node=NODE, check=False)
        assert (out.rc, out.out.split()) == (0, ["new", "ID=sqshbuildtest"]), out
    finally:
        cluster.run(f"enroot remove -f {name}; rm -f {sqsh} {rc}", node=NODE, check=False)
