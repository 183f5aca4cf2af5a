"""Smoke test for a second Slurm release (CI runs it on bookworm's Slurm 22.05): the node
image built the plugin against that release's headers, Slurm loads it, one container
step runs on two nodes, and its image is in the job's AdminComment in sacct (squall-jobrecord
built against that release's libslurm; docs/admin.md)."""

from __future__ import annotations

import os
import re
import time

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
    # any two nodes Slurm picks (an earlier test on this cluster may have left one busy
    # or rebooting): two distinct ones, each in the image
    lines = res.out.split("\n")[:-1]
    hosts = {line.split()[0] for line in lines}
    assert len(lines) == 2 and len(hosts) == 2 and hosts <= {"node1", "node2", "node3"}, res
    assert all(line.endswith(" squalltest") for line in lines), res


def test_the_image_is_in_the_jobs_admin_comment(cluster: Cluster, base_image: str) -> None:
    res = cluster.run(f"salloc -N1 srun --container-image={base_image} true")
    m = re.search(r"Granted job allocation (\d+)", res.err)
    assert m, res
    deadline = time.monotonic() + 60
    while True:
        line = cluster.run(f"sacct -j {m.group(1)} -X -n -P -o AdminComment", user="root",
                           check=False).out.strip()
        if f"squall-image={base_image}@size=" in line:
            break
        assert time.monotonic() < deadline, line
        time.sleep(1)
