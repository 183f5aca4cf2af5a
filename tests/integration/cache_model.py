"""The shared image cache's model on the mini cluster (issue 26, docs/security.md): only the
image builder (squall-builder, made by python3-squall) and root write /fsx/squall/images;
users read it and build what the builder may not pull in their own ~/.cache/squall/images.

Helpers for the tests of that model: who owns what in the cache, a canary tree outside
it, and a registry's log counted from a mark.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from .cluster import Cluster

CACHE = "/fsx/squall/images"
BUILDER = "squall-builder"
USERS = ("squall", "alice", "bob", "carol")
PRIVATE = "login:5001"          # the registry that requires credentials (bob's only)
PRIVATE_LOG = "/var/log/registry-private.log"
PRIVATE_PASSWORD = "/etc/squall/registry-private.password"  # root's copy, user bob


def uid_of(cluster: Cluster, user: str) -> int:
    return int(cluster.run(f"id -u {user}", user="root").out)


def host_path(cluster: Cluster, path: str) -> Path:
    assert path.startswith("/fsx/"), path
    return cluster.fsx_host / path[len("/fsx/"):]


def cache_problems(cluster: Cluster, cache: str = CACHE) -> list[str]:
    """What in ``cache`` breaks the model: an entry not owned by the builder or root, or
    that anyone else may write (group or others), or a link, FIFO, socket or device."""
    allowed = {0, uid_of(cluster, BUILDER)}
    root = host_path(cluster, cache)
    bad = []
    for dirpath, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = Path(dirpath) / name if name != "." else Path(dirpath)
            st = path.lstat()
            kind = stat.S_IFMT(st.st_mode)
            rel = f"{cache}/{path.relative_to(root)}"
            if st.st_uid not in allowed:
                bad.append(f"{rel}: owner uid {st.st_uid}")
            if st.st_mode & 0o022:
                bad.append(f"{rel}: mode {stat.S_IMODE(st.st_mode):o}")
            if kind not in (stat.S_IFDIR, stat.S_IFREG):
                bad.append(f"{rel}: a {stat.filemode(st.st_mode)[0]} entry")
    return bad


def images_in(cluster: Cluster, cache: str, digest: str) -> list[Path]:
    """Every entry of ``cache`` whose name holds the digest's hex (image, sidecars)."""
    hexd = digest.split(":")[1]
    root = host_path(cluster, cache)
    return [p for p in root.rglob("*") if hexd in p.name] if root.exists() else []


# -- a canary tree outside the cache: root's and bob's files --------------------------------
CANARY_ROOT = "/root/canary"
CANARY_BOB = "/fsx/home/bob/canary"
_TREE = ("umask 077 && rm -rf {d} && mkdir -p {d}/sub {d}/keep && echo {who}-secret > {d}/a && "
         "echo {who}-b > {d}/sub/b && chmod 0640 {d}/sub/b && ln -s a {d}/link && "
         "echo {who}-c > {d}/keep/c && chmod 0750 {d}/keep")


def plant_canary(cluster: Cluster, node: str = "login") -> str:
    cluster.run(_TREE.format(d=CANARY_ROOT, who="root"), node=node, user="root")
    cluster.run(_TREE.format(d=CANARY_BOB, who="bob"), node=node, user="bob")
    return canary(cluster, node)


def canary(cluster: Cluster, node: str = "login") -> str:
    """Modes, owners, kinds, link targets, sizes and contents of both canary trees (and the
    modes of their parents and of /tmp)."""
    out = []
    for d in (CANARY_ROOT, CANARY_BOB):
        out.append(cluster.run(
            f"stat -c '%n %a %U %G' {os.path.dirname(d)} /tmp && "
            f"find {d} -printf '%p %y %m %u %g %s %l\\n' | sort && "
            f"find {d} -type f -exec sha256sum {{}} + | sort", node=node, user="root").out)
    return "".join(out)


# -- the registries' logs ------------------------------------------------------------------
def mark(cluster: Cluster, log: str) -> int:
    return int(cluster.run(f"stat -c %s {log}", node="login", user="root").out)


def log_since(cluster: Cluster, log: str, since: int) -> str:
    return cluster.run(f"tail -c +{since + 1} {log}", node="login", user="root").out


def expected_pulls(cluster: Cluster, digests: list[str], *caches: str) -> dict[str, int]:
    """What one pull of an image costs now: each blob once, except those already in one of
    ``caches`` (the test images share their base layers; a user's build reads the shared
    cache's layers). At least the image's own random layer and config are pulled."""
    want = {d: 0 if any(images_in(cluster, c, d) for c in caches) else 1 for d in digests}
    assert sum(want.values()) >= 2, want
    return want


def served_blobs(cluster: Cluster, log: str, since: int, digests: list[str]) -> dict[str, int]:
    """How many times the registry answered a GET of each blob with its bytes (200, or 206
    for a resumed range): the access log's lines since ``since``."""
    counts = {d: 0 for d in digests}
    text = log_since(cluster, log, since)
    for m in re.finditer(r'"GET /v2/\S+/blobs/(sha256:[0-9a-f]{64}) HTTP/[\d.]+" (\d{3})', text):
        if m.group(1) in counts and m.group(2) in ("200", "206"):
            counts[m.group(1)] += 1
    return counts
