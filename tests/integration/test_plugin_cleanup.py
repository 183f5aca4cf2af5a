"""Nothing is left on a node after a container step ends: success, failure or scancel (issue 3).

"Nothing" is checked where it would show: processes of the user (the container's main
process, squashfuse, fuse-overlayfs), FUSE mounts in the node's /proc/mounts, the
runtime directory of the user and the plugin's conf files.
"""

from __future__ import annotations

import time

from .cluster import Cluster
from .leftovers import wait_clean

NODE = "node3"


def test_nothing_left_after_success_and_after_failure(cluster: Cluster, image: str) -> None:
    cluster.run(f"srun -N1 -w {NODE} --container-image={image} true")
    assert wait_clean(cluster, node=NODE) == ""
    bad = cluster.run(f"srun -N1 -w {NODE} --container-image={image} "
                      "--container-mounts=/tmp:/etc/os-release true", check=False)
    assert bad.rc != 0
    assert wait_clean(cluster, node=NODE) == ""


def test_nothing_left_after_scancel_of_a_running_container_step(cluster: Cluster,
                                                               image: str) -> None:
    script = ("#!/bin/sh\n"
              f"srun --container-image={image} sleep 300\n")
    jobid = cluster.sbatch(script, f"-N1 -w {NODE} -o /dev/null")
    try:
        cluster.wait_job(jobid, {"RUNNING"}, timeout=60)
        # The container is up: its command and the runtime (its keeper) run as the user.
        deadline = time.monotonic() + 30
        while not cluster.run("pgrep -u squall -x sleep", node=NODE, user="root",
                              check=False).out.strip():
            assert time.monotonic() < deadline, "the container step never started"
            time.sleep(0.5)
        procs = cluster.run("pgrep -a -u squall", node=NODE, user="root").out
        assert "squall-keeper" in procs, procs
    finally:
        cluster.run(f"scancel {jobid}")
    cluster.wait_job(jobid, {"CANCELLED"}, timeout=60)
    assert wait_clean(cluster, node=NODE) == ""
