"""The PyTorch image in the login node's registry (docs/cluster.md), for the cluster tests
that train: built once by docker/build-pytorch.sh (cached by content), pushed by
docker/push-image.py when the registry lacks it (a new cluster's registry is empty), the
way `make demo` gets it.
"""

from __future__ import annotations

import subprocess
import sys

from .cluster import LOGIN, ROOT, Cluster

TAG = "login:5000/squall/pytorch:2.6"
REPO = "squall/pytorch:2.6"


def ensure(cluster: Cluster) -> str:
    """The tag, once the registry serves the image (minutes the first time on a machine)."""
    subprocess.run(["bash", str(ROOT / "docker" / "build-pytorch.sh")], check=True,
                   stdout=subprocess.DEVNULL, timeout=1800)
    image = subprocess.run(["bash", str(ROOT / "docker" / "build-pytorch.sh"), "--name"],
                           check=True, capture_output=True, text=True).stdout.strip()
    networks = cluster.container(LOGIN).attrs["NetworkSettings"]["Networks"]
    address = next(n["IPAddress"] for n in networks.values() if n.get("IPAddress"))
    subprocess.run([sys.executable, str(ROOT / "docker" / "push-image.py"), image,
                    f"{address}:5000", REPO], check=True, timeout=600)
    return TAG
