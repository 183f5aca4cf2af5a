"""What a container step leaves on a node (issue 3), and the wait until nothing is: the
user's processes (the container's main process, squashfuse, fuse-overlayfs), FUSE mounts in
the node's /proc/mounts, the user's runtime directory and the plugin's conf files.
"""

from __future__ import annotations

import time

from .cluster import Cluster

RUNTIME_DIR = "/run/squall/1000"


def leftovers(cluster: Cluster, node: str) -> str:
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


def wait_clean(cluster: Cluster, timeout: float = 30, *, node: str) -> str:
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(cluster, node)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)
