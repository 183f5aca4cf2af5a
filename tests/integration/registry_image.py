"""The sqshbuild test image pushed to the login node's registry, and what the registry's
access log says it served.

``push.py`` (PUSH) assembles the image on the login node from the node's own binaries (a
shell and a few tools with their libraries) and pushes it with the registry API
(tests/registry/imagekit.py); the ``tools`` fixture (conftest.py) puts both in WORK. The
same image serves test_sqshbuild_cluster.py and every cluster test that needs an image in
a registry.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from .cluster import Cluster

REGISTRY = "login:5000"
WORK = "/fsx/squall-tests/sqshbuild"
IMAGEKIT = Path(__file__).resolve().parents[1] / "registry" / "imagekit.py"

# Run with python3 on the login node: [MARK=TEXT] push.py REPO TAG BIG_MB -> prints the
# manifest digest (MARK: the image's /etc/mark).
PUSH = r'''
import io, json, os, subprocess, sys, tarfile
sys.path.insert(0, os.path.dirname(__file__))
from imagekit import Image, Pusher, layer

repo, tag, big_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = {}
def add(path):
    # under its real path, and under its name in the real directory (usr/bin/sh -> dash;
    # /lib64/ld-linux... reached through the lib64 symlink), never through a symlink
    real = os.path.realpath(path)
    data = open(real, "rb").read()
    files[real.lstrip("/")] = data
    named = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    files[named.lstrip("/")] = data
    return real
bins = []
for b in ("sh", "env", "cat", "pwd", "echo", "printenv", "ls", "true", "sleep"):
    p = subprocess.run(["sh", "-c", f"command -v {b}"], capture_output=True, text=True).stdout
    if p.strip().startswith("/"):
        bins.append(add(p.strip()))
for b in bins:
    out = subprocess.run(["ldd", b], capture_output=True, text=True).stdout
    for m in __import__("re").finditer(r"(/\S+) \(0x", out):
        add(m.group(1))
entries = [("dir", d) for d in ("usr", "usr/bin", "usr/lib", "etc", "proc", "sys", "dev",
                                "tmp", "run", "home", "root", "fsx", "work", "var",
                                "var/spool", "var/spool/slurmd", "gone", "opaque")]
for name in ("bin", "lib", "lib64", "sbin"):
    if os.path.islink("/" + name):
        entries.append(("symlink", name, os.readlink("/" + name)))
seen = set()
for path, data in sorted(files.items()):
    parts = path.split("/")
    for i in range(1, len(parts)):
        d = "/".join(parts[:i])
        if d not in seen and d not in {e[1] for e in entries}:
            entries.append(("dir", d)); seen.add(d)
    entries.append(("file", path, data, 0o755))
entries += [("file", "gone/file", "x"), ("file", "opaque/old", "old"),
            ("file", "etc/os-release", "ID=sqshbuildtest\n")]
if os.environ.get("MARK"):  # tells two images pushed under one tag apart
    entries.append(("file", "etc/mark", os.environ["MARK"] + "\n"))
hello = ('#!/bin/sh\necho "hello $GREETING from $(pwd) args:$*"\n')
middle = layer(("file", ".wh.gone", ""), ("dir", "opaque"), ("file", "opaque/.wh..wh..opq", ""),
               ("file", "opaque/new", "new"), ("dir", "usr/local"), ("dir", "usr/local/bin"),
               ("file", "usr/local/bin/hello", hello, 0o755))
layers = [layer(*entries), middle]
if big_mb:
    layers.append(layer(("dir", "big"), ("file", "big/blob", os.urandom(big_mb << 20))))
config = {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=from-the-image"],
          "Entrypoint": ["/usr/local/bin/hello"], "Cmd": ["default-arg"],
          "WorkingDir": "/work/here"}
auth = None  # a registry that wants credentials: REGISTRY_USER, REGISTRY_PASSWORD_FILE
if os.environ.get("REGISTRY_PASSWORD_FILE"):
    auth = (os.environ["REGISTRY_USER"], open(os.environ["REGISTRY_PASSWORD_FILE"]).read().strip())
digest = Pusher("http://" + os.environ.get("REGISTRY", "login:5000"), auth=auth).push(
    repo, tag, Image(layers, config))
print(json.dumps({"digest": digest, "blobs": sorted(Image(layers, config).blobs())}))
'''


def push(cluster: Cluster, tools: str, repo: str, big_mb: int = 0, mark: str = "") -> dict:
    """Push the test image as REPO:v1. Without ``mark`` every push is the same image (one
    digest, which an earlier test on the cluster may have cached); with it, an image of
    its own (MARK)."""
    env = f"MARK={shlex.quote(mark)} " if mark else ""
    res = cluster.run(f"{env}python3 {tools}/push.py {repo} v1 {big_mb}", node="login",
                      timeout=300)
    return json.loads(res.out.strip().splitlines()[-1])


def log_mark(cluster: Cluster) -> int:
    """Size of the registry's access log now: blob_gets counts only what comes after."""
    return int(cluster.run("stat -c %s /var/log/registry.log", node="login", user="root").out)


def blob_gets(cluster: Cluster, digests: list[str], since: int) -> dict[str, int]:
    # Tests share base layers (same content, same digest): count this test's GETs only.
    log = cluster.run(f"tail -c +{since + 1} /var/log/registry.log", node="login",
                      user="root").out
    counts = {d: 0 for d in digests}
    for m in re.finditer(r'"GET /v2/\S+/blobs/(sha256:[0-9a-f]{64}) HTTP', log):
        if m.group(1) in counts:
            counts[m.group(1)] += 1
    assert any(counts.values()), "the registry access log shows no blob GETs: is it enabled?"
    return counts


def sqshbuild(cache: str, ref: str, extra: str = "") -> str:
    return (f"SQSHBUILD_INSECURE_REGISTRIES={REGISTRY} sqshbuild build --quiet "
            f"--cache-dir {cache} {extra} {ref}")


def manifest_gets(cluster: Cluster, repo: str, since: int,
                  log_file: str = "/var/log/registry.log") -> int:
    log = cluster.run(f"tail -c +{since + 1} {log_file}", node="login", user="root").out
    return log.count(f'"GET /v2/{repo}/manifests/')
