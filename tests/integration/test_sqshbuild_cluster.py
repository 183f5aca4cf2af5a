"""sqshbuild on the mini cluster: the login node's registry, two nodes building at once, a
build killed with SIGKILL, and the built image started through the plugin.

The image is assembled on the login node from the node's own binaries (a shell and a few
tools with their libraries), pushed to ``login:5000`` (Debian's docker-registry, plain HTTP)
with the registry API, then built by ``sqshbuild`` as the test user.
"""

from __future__ import annotations

import json
import re
import threading
import uuid

import pytest

from .cluster import Cluster
from .registry_image import PUSH as PUSH  # bench/bench_scale.py imports it from here
from .registry_image import REGISTRY, WORK, blob_gets, log_mark, push, sqshbuild

pytestmark = pytest.mark.cluster


def test_two_nodes_build_at_once_one_download(cluster: Cluster, tools: str):
    repo = f"test/hello-{uuid.uuid4().hex[:8]}"
    pushed = push(cluster, tools, repo, big_mb=64)
    mark = log_mark(cluster)
    cache = f"{WORK}/cache-{uuid.uuid4().hex[:8]}"
    results = {}

    def build(node: str) -> None:
        results[node] = cluster.run(sqshbuild(cache, f"{REGISTRY}/{repo}:v1"), node=node,
                                    timeout=300, check=False)

    threads = [threading.Thread(target=build, args=(n,)) for n in ("node1", "node2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for node, res in results.items():
        assert res.rc == 0, f"{node}: {res}"
    paths = {res.out.strip().splitlines()[-1] for res in results.values()}
    assert paths == {f"{cache}/sha256-{pushed['digest'].split(':')[1]}.sqsh"}
    host_cache = cluster.fsx_host / cache[len("/fsx/"):]
    assert len(list(host_cache.glob("*.sqsh"))) == 1
    assert blob_gets(cluster, pushed["blobs"], mark) == {d: 1 for d in pushed["blobs"]}

    image = paths.pop()
    listing = cluster.run(f"unsquashfs -l {image}", node="node3").out
    assert "squashfs-root/opaque/new" in listing and "squashfs-root/opaque/old" not in listing
    assert "squashfs-root/gone" not in listing
    env = cluster.run(f"unsquashfs -cat {image} etc/environment", node="node3").out
    assert "GREETING=from-the-image" in env

    # The runtime runs the entrypoint (with CMD when no arguments) in WORKDIR ...
    enroot = "/usr/bin/enroot"
    out = cluster.run(f"{enroot} start {image}", node="node3").out
    assert out.strip().splitlines()[-1] == "hello from-the-image from /work/here args:default-arg"
    out = cluster.run(f"{enroot} start {image} one two", node="node3").out
    assert out.strip().splitlines()[-1] == "hello from-the-image from /work/here args:one two"
    # ... and so does the plugin, from the file and from the registry reference.
    res = cluster.run(f"srun -N1 -w node3 --container-image={image} printenv GREETING",
                      timeout=180)
    assert res.out.strip().splitlines()[-1] == "from-the-image"
    # This entrypoint prints and exits instead of exec'ing its arguments, so with
    # --container-entrypoint the container cannot be held (as with Pyxis): a clear error.
    res = cluster.run(f"srun -N1 -w node1 --container-image={image} --container-entrypoint "
                      "x y", timeout=180, check=False)
    assert res.rc != 0, res
    assert "container start failed" in res.err, res
    assert "hello from-the-image from /work/here" in res.err, res


def test_plugin_builds_a_registry_reference_once_for_two_nodes(cluster: Cluster, tools: str):
    """The plugin runs sqshbuild itself (image_cache=/fsx/squall/images), as the image
    builder, whose environment is built from nothing: plain HTTP to login:5000 is allowed by
    the nodes' registries.conf, not by the job's environment (which sets nothing here)."""
    repo = f"test/plugin-{uuid.uuid4().hex[:8]}"
    pushed = push(cluster, tools, repo)
    # The test images are deterministic: forget what an earlier run left in the shared
    # cache, so this run has to download every blob (once).
    shared = cluster.fsx_host / "squall/images"
    for digest in [pushed["digest"], *pushed["blobs"]]:
        hexd = digest.split(":")[1]
        for old in [*shared.glob(f"sha256-{hexd}.*"), *shared.glob(f"layers/sha256/{hexd}.*")]:
            old.unlink()
    mark = log_mark(cluster)
    res = cluster.run(f"srun -N2 -w node1,node2 --container-image={REGISTRY}/{repo}:v1 "
                      "printenv GREETING", timeout=300)
    assert res.out.split() == ["from-the-image", "from-the-image"], res
    assert blob_gets(cluster, pushed["blobs"], mark) == {d: 1 for d in pushed["blobs"]}
    cached = cluster.fsx_host / "squall/images" / f"sha256-{pushed['digest'].split(':')[1]}.sqsh"
    assert cached.is_file()


def test_sigkill_mid_build_leaves_nothing_complete_and_rerun_reuses_layers(
        cluster: Cluster, tools: str):
    repo = f"test/killed-{uuid.uuid4().hex[:8]}"
    pushed = push(cluster, tools, repo, big_mb=200)
    mark = log_mark(cluster)
    cache = f"{WORK}/cache-{uuid.uuid4().hex[:8]}"
    ref = f"{REGISTRY}/{repo}:v1"
    # Killed mid-squash, once every layer is durable (its .ok marker written after the
    # background fsync): a layer whose fsync had not finished is fetched again by design,
    # since a crash could have left it torn.
    layers = len(pushed["blobs"]) - 1  # the config is the other blob
    script = f"""
        {sqshbuild(cache, ref)} >/dev/null 2>&1 & pid=$!
        mid=0
        for i in $(seq 6000); do
            ls {cache}/.building-* >/dev/null 2>&1 &&
                [ "$(ls {cache}/layers/sha256/*.ok 2>/dev/null | wc -l)" -ge {layers} ] &&
                mid=1 && break
            sleep 0.01
        done
        kill -KILL $pid; wait $pid; echo "rc=$? mid=$mid"
        ls {cache}/*.sqsh 2>/dev/null | wc -l
    """
    res = cluster.run(script, node="node1", timeout=300)
    lines = res.out.split()
    # Seen mid-squash before the kill (the squasher, left without input, may delete its
    # .building output by itself afterwards), killed, and nothing looks complete.
    assert lines[:2] == ["rc=137", "mid=1"] and lines[-1] == "0", res
    host_cache = cluster.fsx_host / cache[len("/fsx/"):]
    again = cluster.run(sqshbuild(cache, ref), node="node1", timeout=300)
    assert again.out.strip().splitlines()[-1].endswith(".sqsh")
    assert len(list(host_cache.glob("*.sqsh"))) == 1
    assert not list(host_cache.glob(".building-*"))
    assert blob_gets(cluster, pushed["blobs"], mark) == {d: 1 for d in pushed["blobs"]}


# Run as the image builder on a node: hold.py DIGEST REF SECONDS holds the image's build lock
# in the shared cache as a pull that goes on would (its status says 1 MiB more every half
# second), so a step asking for that image waits for SECONDS, as behind another node's pull.
HOLD = r'''
import sys, time
from pathlib import Path
from squall.sqshbuild.cache.image_cache import open_shared

lock = open_shared(Path("/fsx/squall/images")).lock(sys.argv[1])
assert lock.try_acquire(), "the image's lock is taken"
start = time.monotonic()
def status():
    pulled = int((time.monotonic() - start) * 2) << 20
    return {"ref": sys.argv[2], "total": 64 << 20, "pulled": min(pulled, 64 << 20),
            "written": 0}
lock.status = status
print("held", flush=True)
time.sleep(float(sys.argv[3]))
lock.release()
'''


def test_a_step_waiting_for_a_pull_says_who_pulls_what_on_srun(cluster: Cluster, tools: str):
    """Issue 27: a node pulls, the others wait; srun's stderr says, every 5 s, whom the
    step waits for and how far that pull is, once per step (its first node), never a
    silent wait (the field's "pyxis: importing docker image" with nothing after it)."""
    repo = f"test/progress-{uuid.uuid4().hex[:8]}"
    # An image of its own (MARK): no cache, shared or a user's, may hold it already.
    res = cluster.run(f"MARK={repo} python3 {tools}/push.py {repo} v1 0", timeout=300)
    pushed = json.loads(res.out.strip().splitlines()[-1])
    shared = cluster.fsx_host / "squall/images"
    hexd = pushed["digest"].split(":")[1]
    ref = f"{REGISTRY}/{repo}:v1"
    cluster.put(f"{tools}/hold.py", HOLD)
    cluster.run(f"setsid runuser -u squall-builder -- python3 {tools}/hold.py "
                f"{pushed['digest']} {ref} 13 > /tmp/hold.out 2>&1 < /dev/null &",
                node="node3", user="root")
    for _ in range(100):
        if list((shared / "locks").glob(f"*{hexd}*.lock")):
            break
        threading.Event().wait(0.1)
    else:
        pytest.fail(cluster.run("cat /tmp/hold.out", node="node3", check=False).out)
    res = cluster.run(f"srun -N2 -w node1,node2 --container-image={ref} printenv GREETING",
                      timeout=120)
    assert res.out.split() == ["from-the-image", "from-the-image"], res
    said = [line for line in res.err.splitlines() if line.startswith("squall: progress: ")]
    assert len(said) >= 2, res
    assert all(re.fullmatch(rf"squall: progress: waiting for node3 \(pid \d+\), which pulls "
                            rf"{re.escape(ref)}: [\d.]+ MiB of 64.0 MiB(, [\d.]+ [KM]?i?B/s)?",
                            line) for line in said), res
    # one step, one line per tick: from its first node only, not from every node
    assert len(said) <= 4, res
