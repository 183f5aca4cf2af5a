"""Benchmark: bytes read from /fsx when a job fills its nodes' caches of extracted images
(issue 27, docs/plugin.md "What it costs the shared file system").

On the scale cluster (GlusterFS, a client per node), for each N a job of N nodes runs an
image until every node's tree is complete, twice, side by side in one run:

- shared: no node has the tree; the step's first node reads the image and sends it with
  sbcast, each node extracts from its copy (this round's way);
- each reads: the first node keeps its tree, the others' are removed; the first node then
  sends "none" and every other node reads the image from /fsx itself, which is what every
  node did before this round.

Bytes per node: its GlusterFS client's rchar over the job (bytes it took from the server's
socket), the host's page cache dropped before each job (the nodes share one kernel: what
one node read earlier would otherwise be served to it from its cache). Results:
bench/results/local-copy.md (and local-copy.json).

    python bench/bench_local_copy.py [--nodes 2,4,8,15] [--image-mb 64]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_scale import RESULTS, SCALE, push, sh, with_push_tools  # noqa: E402
from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.test_scale_smoke import fsx_reads  # noqa: E402

CACHE = "/var/lib/squall/cache/1000"
# A complete tree: KEY/rootfs, KEY 32 hex digits (KEY.part/rootfs is one being made).
KEY_GLOB = "????????????????????????????????"
IMAGES = "/fsx/squall/images"


def enter(node: str) -> str:
    return f"nsenter -t $(pgrep -f 'slurmd -D -N {node}$' | head -1) -m -u --"


def has_tree(cluster: Cluster, node: str) -> bool:
    return cluster.run(f"{enter(node)} sh -c {shlex.quote(f'ls -d {CACHE}/{KEY_GLOB}/rootfs')}",
                       node=SCALE, user="root", check=False).rc == 0


def clear(cluster: Cluster, nodes: list[str]) -> None:
    for n in nodes:
        cluster.run(f"{enter(n)} sh -c {shlex.quote(f'rm -rf {CACHE}/*')}", node=SCALE,
                    user="root")


def fill(cluster: Cluster, nodes: list[str], tag: str) -> dict[str, object]:
    """One job on nodes until each has its tree: bytes each read from /fsx, the time."""
    # Out of every node's page cache (one kernel, the host's: the bench runs as root there):
    # each read below reaches the server, as a node's first read of an image does.
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    before = fsx_reads(cluster, nodes)
    start = time.monotonic()
    job = threading.Thread(target=cluster.run, daemon=True, kwargs={
        "cmd": f"srun -N{len(nodes)} -w {','.join(nodes)} --container-image={tag} sleep 900",
        "node": SCALE, "timeout": 960, "check": False})
    job.start()
    done: set[str] = set()
    deadline = start + 900
    while len(done) < len(nodes) and time.monotonic() < deadline:
        time.sleep(2)
        done |= {n for n in nodes if n not in done and has_tree(cluster, n)}
    took = time.monotonic() - start
    cluster.run("scancel -u squall", node=SCALE, user="root", check=False)
    job.join(60)
    after = fsx_reads(cluster, nodes)
    read = [after[n] - before[n] for n in nodes]
    return {"complete": len(done), "to_all_trees_s": round(took, 1), "first_node": read[0],
            "others_mean": round(sum(read[1:]) / max(1, len(read) - 1)),
            "total": sum(read)}


def one_n(cluster: Cluster, n: int, tag: str, size: int) -> dict[str, object]:
    nodes = [f"s{i}" for i in range(1, n + 1)]
    clear(cluster, nodes)
    shared = fill(cluster, nodes, tag)
    clear(cluster, nodes[1:])
    each = fill(cluster, nodes, tag)
    # Every node has its tree now: a later job's start.
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    before = fsx_reads(cluster, nodes)
    cluster.run(f"srun -N{n} -w {','.join(nodes)} --container-image={tag} cat /etc/mark",
                node=SCALE, timeout=600)
    after = fsx_reads(cluster, nodes)
    later = [after[x] - before[x] for x in nodes]
    return {"nodes": n, "image_bytes": size, "shared": shared, "each_reads": each,
            "later_job_per_node_mean": round(sum(later) / n)}


def write(results: list[dict[str, object]], meta: dict[str, object]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "local-copy.json").write_text(json.dumps({"meta": meta, "results": results},
                                                        indent=2) + "\n")
    lines = ["# Bytes from /fsx to fill N nodes' caches of extracted images "
             "(bench/bench_local_copy.py)", "",
             f"{meta['when']}, {meta['machine']}; image {meta['image_mb']} MB of random data "
             "plus a small base; the scale cluster (docker/scale/), /fsx on GlusterFS with a "
             "client per node; bytes: each node's client's rchar over the job.", "",
             "| N | image (MB) | shared: first node (MB) | shared: other nodes, mean (MB) | "
             "shared: all (MB) | each reads: all (MB) | shared / each | to every tree, "
             "shared / each (s) | later job, per node (MB) |",
             "|---|---|---|---|---|---|---|---|---|"]
    mb = 1 << 20
    for r in results:
        s, e = r["shared"], r["each_reads"]
        assert isinstance(s, dict) and isinstance(e, dict)
        lines.append(f"| {r['nodes']} | {int(r['image_bytes']) / mb:.1f} | "  # type: ignore[call-overload]
                     f"{s['first_node'] / mb:.1f} | {s['others_mean'] / mb:.2f} | "
                     f"{s['total'] / mb:.1f} | {e['total'] / mb:.1f} | "
                     f"{s['total'] / max(1, e['total']):.2f} | "
                     f"{s['to_all_trees_s']} / {e['to_all_trees_s']} | "
                     f"{float(r.get('later_job_per_node_mean', 'nan')) / mb:.2f} |")  # type: ignore[arg-type]
    lines += ["", "- shared: no node had the tree; the step's first node read the image and "
              "sent it with sbcast, the others extracted from their copy (constant in N: "
              "one read of the image, plus each node's few lazy reads of the step's start).",
              "- each reads: the first node kept its tree (so it sent \"none\") and every "
              "other node read the image itself: what every node of such a job did before "
              "issue 27 (linear in N; before, the first node read it too: N x the image).",
              "- later job: a job's start (`cat /etc/mark`, the image a registry tag) once "
              "every node has its tree: the container starts from the tree, not from /fsx; "
              "what a node still reads is the image cache's lookup of the job's tag and the "
              "image's superblock for the key (not broken down further). Through "
              "squashfuse, as Pyxis reads, a start costs a node about what the shared "
              "column's other nodes read (1.7 MB here).",
              "- Both include each node's lazy reads of the step's start through squashfuse "
              "(about 1.7 MB a node here: Enroot's reads of the image's /etc, the task's "
              "files), linear in N and small.",
              "- The time to every tree is longer shared (the copy is sent and its digest "
              "checked on each node before the extraction starts; read from /fsx, the "
              "extraction starts at once): the extraction runs in the background while the "
              "job runs from the image, so no step waits for it.",
              "- Not measured here: sbcast's own network traffic (slurmd's tree, the image "
              "once per node) and its cost in time on a real network; all nodes here share "
              "one host's loopback and two CPUs."]
    (RESULTS / "local-copy.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="2,4,8,15")
    ap.add_argument("--image-mb", type=int, default=64)
    args = ap.parse_args()
    ns = [int(x) for x in args.nodes.split(",")]
    cluster = with_push_tools()
    sh(["bash", str(ROOT / "docker/scale/scale.sh"), "up", str(max(ns) + 1)], timeout=600)
    try:
        repo = f"scale/copy-bench-{uuid.uuid4().hex[:6]}"
        digest = push(cluster, repo, "copy", args.image_mb)
        tag = f"login:5000/{repo}:v1"
        # Built by a node outside the measured ones (its page cache holds what it wrote).
        cluster.run(f"srun -N1 -w s{max(ns) + 1} --container-image={tag} cat /etc/mark", node=SCALE,
                    timeout=600)
        size = int(cluster.run(f"stat -c %s {IMAGES}/sha256-{digest.split(':')[1]}.sqsh",
                               node=SCALE, user="root").out)
        results = []
        for n in ns:
            results.append(one_n(cluster, n, tag, size))
            print(json.dumps(results[-1]), flush=True)
    finally:
        subprocess.run(["bash", str(ROOT / "docker/scale/scale.sh"), "down"], check=False,
                       timeout=300)
    meta = {"when": time.strftime("%Y-%m-%d"), "image_mb": args.image_mb,
            "machine": f"{platform.node()}, {os.cpu_count()} CPUs"}
    write(results, meta)


if __name__ == "__main__":
    main()
