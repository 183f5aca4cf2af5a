"""Smoke test for a second Slurm release (CI runs it on bookworm's Slurm 22.05): the node
image built the plugin against that release's headers, Slurm loads it, and one container
step runs on two nodes."""

from __future__ import annotations

import os

from .cluster import Cluster


def test_slurm_release_is_the_one_under_test(cluster: Cluster) -> None:
    expected = {"bookworm": "22.05", "trixie": "24.11", "sid": "26.05"}
    release = os.environ.get("SQUALL_RELEASE", "trixie")
    res = cluster.run("srun -N1 slurmd -V")
    assert res.out.split()[-1].startswith(expected[release]), res


def test_container_step_on_two_nodes(cluster: Cluster, base_image: str) -> None:
    res = cluster.run(
        f"srun -N2 --container-image={base_image} "
        "bash -c 'echo $(hostname) $(. /etc/os-release; echo $ID)'")
    lines = sorted(res.out.split("\n")[:-1])
    assert lines == ["node1 squalltest", "node2 squalltest"], res
