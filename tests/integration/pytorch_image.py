"""The PyTorch image in the login node's registry (docs/cluster.md), for the cluster tests
that train: built once by docker/build-pytorch.sh (cached by content), pushed by
docker/push-image.py when the registry lacks it (a new cluster's registry is empty), the
way `make demo` gets it.
"""

from __future__ import annotations

import subprocess
import sys

from gate import missing

from .cluster import LOGIN, ROOT, Cluster

REGISTRY = "login:5000"
TAG = f"{REGISTRY}/squall/pytorch:2.6"
# the same with NVIDIA's ft_launcher (nvidia-resiliency-ext from PyPI) beside Debian's torch
FT_TAG = f"{REGISTRY}/squall/pytorch-ft:2.6"


def ensure(cluster: Cluster, ft: bool = False) -> str:
    """The tag (FT_TAG with ``ft``), once the registry serves the image (minutes the first
    time on a machine; the ft image also needs PyPI then)."""
    script = str(ROOT / "docker" / ("build-pytorch-ft.sh" if ft else "build-pytorch.sh"))
    built = subprocess.run(["bash", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=1800)
    if ft and built.returncode == 3:  # no PyPI here: nvidia-resiliency-ext is only there
        # the one gate: a failure in CI, a skip only where SQUALL_ALLOW_SKIP=1 says so
        missing(built.stderr.strip().splitlines()[-1], "let this machine reach PyPI")
    assert built.returncode == 0, built.stderr
    image = subprocess.run(["bash", script, "--name"], check=True, capture_output=True,
                           text=True).stdout.strip()
    tag = FT_TAG if ft else TAG
    networks = cluster.container(LOGIN).attrs["NetworkSettings"]["Networks"]
    address = next(n["IPAddress"] for n in networks.values() if n.get("IPAddress"))
    subprocess.run([sys.executable, str(ROOT / "docker" / "push-image.py"), image,
                    f"{address}:5000", tag[len(REGISTRY) + 1:]], check=True, timeout=600)
    return tag
