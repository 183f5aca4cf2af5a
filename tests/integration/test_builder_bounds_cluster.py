"""The builder's work ends with the step that asked for it (issue 39): alice's registry
sends a layer that never ends; she cancels her job while the builder pulls it for her
step. The builder used to go on (it was not in the job's cgroup), writing the shared
cache, with the job and its node COMPLETING until it was killed by hand. Now it joins the
step's cgroup, so Slurm's kill of the step ends it, and the node is idle again within
seconds."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from .cache_model import CACHE, canary, images_in, plant_canary
from .cluster import Cluster

pytestmark = pytest.mark.cluster
PORT = 5099
DROPIN = "/etc/containers/registries.conf.d/90-squall-test-stall.conf"
HERE = Path(__file__).parent


def start_stalling_registry(cluster: Cluster, rate: int = 262144, layer: str = "") -> str:
    """alice's registry on the login node, plain HTTP (declared insecure on the nodes for
    the test, as the site's registries.conf would), sending its layer (``layer``: the
    digest it names it by) at ``rate`` bytes a second; its directory."""
    work = f"/fsx/home/alice/stall-{uuid.uuid4().hex[:8]}"
    cluster.put(f"{work}/stall_registry.py", (HERE / "stall_registry.py").read_text(),
                owner=_uid(cluster, "alice"))
    for node in ("node1", "node2", "node3"):
        cluster.run(f"mkdir -p $(dirname {DROPIN}) && printf '%s\\n' '[[registry]]' "
                    f"'location = \"login:{PORT}\"' 'insecure = true' > {DROPIN}",
                    node=node, user="root")
    cluster.run(f"nohup python3 {work}/stall_registry.py {PORT} {rate} {work}/requests.log "
                f"{layer} >/dev/null 2>&1 & echo $! > {work}/pid", user="alice")
    return work


def stop_stalling_registry(cluster: Cluster, work: str) -> None:
    cluster.run(f"kill $(cat {work}/pid)", user="alice", check=False)
    for node in ("node1", "node2", "node3"):
        cluster.run(f"rm -f {DROPIN}", node=node, user="root")


@pytest.fixture
def stalling_registry(cluster: Cluster):
    work = start_stalling_registry(cluster)
    try:
        yield work
    finally:
        stop_stalling_registry(cluster, work)


def _uid(cluster: Cluster, user: str) -> int:
    return int(cluster.run(f"id -u {user}", user="root").out)


def _builds_on(cluster: Cluster, node: str) -> str:
    return cluster.run("pgrep -a -f '[s]qshbuild build' || true", node=node, user="root").out


def cancel_a_build_in_flight(cluster: Cluster, work: str) -> tuple[float, str, str]:
    """alice's job pulls the endless layer on node2; scancel; (seconds until node2 has no
    build and is not COMPLETING, up to 30, the builds left, node2's state)."""
    ref = f"login:{PORT}/stall/app-{uuid.uuid4().hex[:6]}:v1"
    job = cluster.run(f"sbatch --parsable -N1 -w node2 -o /dev/null --wrap "
                      f"'srun --container-image={ref} true'", user="alice").out.strip()
    deadline = time.monotonic() + 120
    log = ""
    while time.monotonic() < deadline:  # the layer's endless body is being pulled
        log = cluster.run(f"cat {work}/requests.log 2>/dev/null || true", user="alice").out
        if f"/stall/app-{ref.split('app-')[1].split(':')[0]}/blobs/sha256:5555" in log \
                and _builds_on(cluster, "node2"):
            break
        time.sleep(1)
    else:
        pytest.fail(f"the build never started: {log!r} {_builds_on(cluster, 'node2')!r}")
    time.sleep(3)
    cancelled = time.monotonic()
    cluster.run(f"scancel {job}", user="alice")
    builds, state = "", ""
    while time.monotonic() - cancelled < 30:
        builds, state = _builds_on(cluster, "node2"), cluster.node_state("node2")
        if not builds and "COMP" not in state:
            break
        time.sleep(0.5)
    return time.monotonic() - cancelled, builds, state


def test_scancel_ends_the_build_and_the_node_is_idle_again(cluster: Cluster,
                                                          stalling_registry: str) -> None:
    before = plant_canary(cluster, "node2")
    took, builds, state = cancel_a_build_in_flight(cluster, stalling_registry)
    assert not builds, f"the build outlived the cancelled job: {builds}"
    # KillWait (5 s) until Slurm kills srun, at most 1 s until the watch sees it, then about
    # 5 s of slurmstepd's own tries to answer the dead srun: 12 s measured (was: never)
    assert took < 20, f"node2 was busy {took:.1f} s after scancel ({state})"
    assert canary(cluster, "node2") == before


HERS = 5098


@pytest.fixture
def alices_loopback_registry(cluster: Cluster):
    """alice's own docker-registry on node1's 127.0.0.1 (nothing listens there on node2)."""
    work = f"/fsx/home/alice/loop-{uuid.uuid4().hex[:8]}"
    alice = _uid(cluster, "alice")
    cluster.put(f"{work}/registry.yml",
                f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {work}/storage\n"
                f"http:\n  addr: 127.0.0.1:{HERS}\nlog:\n  level: warn\n", owner=alice)
    cluster.run(f"nohup /usr/bin/docker-registry serve {work}/registry.yml >{work}/log 2>&1 & "
                f"echo $! > {work}/pid; for i in $(seq 50); do curl -fs "
                f"http://127.0.0.1:{HERS}/v2/ >/dev/null && exit 0; sleep 0.2; done; exit 1",
                node="node1", user="alice")
    try:
        yield work
    finally:
        cluster.run(f"kill $(cat {work}/pid)", node="node1", user="alice", check=False)


def test_a_loopback_reference_is_never_one_image_for_two_nodes(
        cluster: Cluster, tools: str, alices_loopback_registry: str) -> None:
    """alice's registry on node1's loopback served the builder, and bob's step on node2,
    where nothing listens at that address, silently ran her image through the offline
    fallback. Now her image is built as her, in her own cache, and bob's step fails in one
    line."""
    before = plant_canary(cluster, "node1")
    tag = uuid.uuid4().hex[:8]
    ref = f"127.0.0.1:{HERS}/hers/app-{tag}:v1"
    res = cluster.run(f"REGISTRY=127.0.0.1:{HERS} MARK=alices python3 {tools}/push.py "
                      f"hers/app-{tag} v1 0", node="node1", user="alice", timeout=300)
    digest = json.loads(res.out.strip().splitlines()[-1])["digest"]
    res = cluster.run(f"srun -N1 -w node1 --container-image={ref} cat /etc/mark",
                      user="alice", timeout=300)
    assert res.out.split() == ["alices"], res
    assert "names a registry on this node only (127.0.0.1 is a loopback address)" in res.err
    assert images_in(cluster, CACHE, digest) == []
    res = cluster.run(f"srun -N1 -w node2 --container-image={ref} cat /etc/mark",
                      user="bob", check=False, timeout=300)
    assert res.rc != 0 and "alices" not in res.out, res
    errors = [ln for ln in res.err.splitlines() if ln.startswith("squall: error:")]
    assert len(errors) == 1 and "registry unreachable" in errors[0], res
    assert "using the cached image" not in res.err, res
    assert canary(cluster, "node1") == before


def test_a_slow_registry_holds_no_other_build_of_its_layer_hostage(
        cluster: Cluster, tools: str) -> None:
    """alice's manifest names bob's image's layer with no size and her registry sends it at
    4 KiB/s; her step's build holds that layer's lock. bob's step, which needs the layer,
    used to wait as long as hers took (up to 6 h, at "0 B/s"): it now pulls the layer itself
    once hers makes no progress, and says whom it waited for."""
    before = plant_canary(cluster, "node2")
    tag = uuid.uuid4().hex[:8]
    res = cluster.run(f"MARK=bobs python3 {tools}/push.py bob/app-{tag} v1 8", node="login",
                      user="bob", timeout=300)
    pushed = json.loads(res.out.strip().splitlines()[-1])
    sizes = cluster.run(f"cd /var/lib/docker-registry/docker/registry/v2/blobs/sha256 && "
                        f"for d in {' '.join(b.split(':')[1] for b in pushed['blobs'])}; do "
                        "echo $d $(stat -c %s ${d:0:2}/$d/data); done", node="login",
                        user="root").out.split()
    layer = "sha256:" + max(zip(sizes[::2], map(int, sizes[1::2]), strict=True),
                            key=lambda x: x[1])[0]
    work = start_stalling_registry(cluster, rate=4096, layer=layer)
    try:
        hers = cluster.run(f"sbatch --parsable -N1 -w node1 -o /dev/null --wrap 'srun "
                           f"--container-image=login:{PORT}/hers/base-{tag}:v1 true'",
                           user="alice").out.strip()
        deadline = time.monotonic() + 120
        while f"/blobs/{layer}" not in cluster.run(f"cat {work}/requests.log 2>/dev/null || "
                                                   "true", user="alice").out:
            assert time.monotonic() < deadline, "her build never asked for the layer"
            time.sleep(1)
        time.sleep(3)
        started = time.monotonic()
        res = cluster.run(f"srun -N1 -w node2 --container-image=login:5000/bob/app-{tag}:v1 "
                          "cat /etc/mark", user="bob", timeout=600)
        took = time.monotonic() - started
        cluster.run(f"scancel {hers}", user="alice", check=False)
    finally:
        stop_stalling_registry(cluster, work)
    assert res.out.split() == ["bobs"], res
    assert took < 150, f"bob's step waited {took:.0f} s for alice's trickle"
    assert canary(cluster, "node2") == before
