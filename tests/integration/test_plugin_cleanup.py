"""Nothing is left on a node after a container step ends: success, failure or scancel (issue 3).

"Nothing" is checked where it would show: processes of the user (the container's main
process, squashfuse, fuse-overlayfs), FUSE mounts in the node's /proc/mounts, the
runtime directory of the user and the plugin's conf files.
"""

from __future__ import annotations

import time

from .cluster import Cluster

NODE = "node3"
RUNTIME_DIR = "/run/squall/1000"



def leftovers(cluster: Cluster, node: str = NODE) -> str:
    """What the user left on the node; empty when nothing."""
    script = (
        "pgrep -a -u squall || true; "
        # FUSE mounts other than the node's own root (Docker's fuse-overlayfs driver)
        "awk '$3 ~ /fuse/ && $2 != \"/\"' /proc/mounts; "
        # files, or directories with something in them (empty mount points may stay)
        f"[ -d {RUNTIME_DIR}/enroot ] && find {RUNTIME_DIR}/enroot -mindepth 1 "
        "\\( -not -type d -o -not -empty \\) || true; "
        f"ls {RUNTIME_DIR}/step-*.conf 2>/dev/null || true")
    return cluster.run(script, node=node, user="root").out.strip()


def wait_clean(cluster: Cluster, timeout: float = 30, node: str = NODE) -> str:
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(cluster, node)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def test_nothing_left_after_success_and_after_failure(cluster: Cluster, image: str) -> None:
    cluster.run(f"srun -N1 -w {NODE} --container-image={image} true")
    assert wait_clean(cluster) == ""
    bad = cluster.run(f"srun -N1 -w {NODE} --container-image={image} "
                      "--container-mounts=/tmp:/etc/os-release true", check=False)
    assert bad.rc != 0
    assert wait_clean(cluster) == ""


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
    assert wait_clean(cluster) == ""
