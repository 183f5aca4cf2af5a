"""A node killed while its step was starting a container (issue 15's faults): the step was
building a registry image for the plugin (sqshbuild under the dead node's lock on the shared
cache). Nothing is lost: when the node is back, a step on it and another node builds the
image (a waiter takes the dead builder's lock over) and runs it; nothing half-built is
trusted or left behind."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from .cluster import Cluster, Result
from .registry_image import REGISTRY, push

pytestmark = pytest.mark.cluster
VICTIM = "node3"


def test_node_killed_while_its_step_starts_a_container(cluster: Cluster,
                                                       tools: str) -> None:
    repo = f"test/nodekill-{uuid.uuid4().hex[:8]}"
    pushed = push(cluster, tools, repo, big_mb=200)
    ref = f"{REGISTRY}/{repo}:v1"
    # No SQSHBUILD_INSECURE_REGISTRIES: the image builder the plugin runs never sees the
    # job's environment; the nodes' registries.conf allows plain HTTP to login:5000.
    done: dict[str, Result] = {}
    step = threading.Thread(target=lambda: done.setdefault("res", cluster.run(
        f"srun -N1 -w {VICTIM} --container-image={ref} true", check=False,
        timeout=300)))
    step.start()
    # Kill it in the middle of the download of the big layer (its .partial on /fsx).
    shared = cluster.fsx_host / "squall/images"
    hexd = pushed["digest"].split(":")[1]
    partials = [shared / "layers/sha256" / f"{b.split(':')[1]}.partial" for b in pushed["blobs"]]
    deadline = time.monotonic() + 120
    while not any(p.exists() for p in partials):
        assert time.monotonic() < deadline and step.is_alive(), "the step never downloaded"
        time.sleep(0.01)
    cluster.kill_node(VICTIM)
    try:
        assert not list(shared.glob(f"sha256-{hexd}*.sqsh")), "built before the kill: too fast"
        step.join(timeout=240)
        assert not step.is_alive()
        assert done["res"].rc != 0, done["res"]
    finally:
        # as an admin does after a dead node (Slurm did not always set it DOWN by itself:
        # MIXED* with no job for over 60 s under load); it rejoins by itself
        cluster.bring_back(VICTIM)
    cluster.wait_rejoined(VICTIM, timeout=120)

    assert not list(shared.glob(f"sha256-{hexd}*.sqsh")), "a half-built image was published"
    res = cluster.run(f"srun -N2 -w node1,{VICTIM} --container-image={ref} "
                      "printenv GREETING", timeout=400)
    assert res.out.split() == ["from-the-image", "from-the-image"], res
    assert len(list(shared.glob(f"sha256-{hexd}*.sqsh"))) == 1
    assert not list(shared.glob(".building-*"))
    for blob in pushed["blobs"]:
        assert not list(shared.glob(f"layers/sha256/{blob.split(':')[1]}.partial"))
