"""Benchmark: later container steps of a registry tag, of a file image, and bare (issue 40).

On the mini cluster (after `make cluster-up`), 3 nodes: one allocation per case and round,
its first step untimed (it starts the kept container, resolves and pins the tag), then
--steps later steps timed on the login node around `srun -N3 ... cat /etc/os-release`.
Cases interleaved round by round, medians per case:

- bare steps (`srun -N3 true`);
- later steps from a `.sqsh` named by path;
- later steps from a registry tag (`login:5000/...:v1`), which now start from the node's
  memo of what the job's first step resolved (spank/plugin/pinmemo.h);
- the same tag with a site image policy in force (`/etc/containers/policy.json` accepting
  everything): the memo is off, every later step runs sqshbuild on every node as before.

    python bench/bench_tag_steps.py [--runs 5] [--steps 5]

Results: bench/results/tag-steps.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.images import IMAGE_DIR, build_image  # noqa: E402
from tests.integration.registry_image import IMAGEKIT, PUSH, REGISTRY, WORK  # noqa: E402

NODES = ("node1", "node2", "node3")
POLICY = "/etc/containers/policy.json"
ACCEPT = '{"default": [{"type": "insecureAcceptAnything"}]}'
# Times each later step inside the allocation, in ms, one per line.
TIMED = r"""
import subprocess, sys, time
first, steps = sys.argv[1], int(sys.argv[2])
cmd = sys.argv[3:]
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
for _ in range(steps):
    t = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(round((time.monotonic() - t) * 1000, 1))
"""


def policy(cluster: Cluster, on: bool) -> None:
    for node in NODES:
        cmd = (f"mkdir -p /etc/containers && echo '{ACCEPT}' > {POLICY}" if on
               else f"rm -f {POLICY}")
        cluster.run(cmd, node=node, user="root")


def later_steps(cluster: Cluster, image: str | None, steps: int) -> list[float]:
    flag = f"--container-image={image}" if image else ""
    res = cluster.run(f"salloc -N3 -Q python3 {WORK}/timed.py first {steps} "
                      f"srun -N3 {flag} cat /etc/os-release", timeout=600)
    return [float(x) for x in re.findall(r"^[0-9.]+$", res.out, re.M)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    cluster.put(f"{WORK}/imagekit.py", IMAGEKIT.read_text())
    cluster.put(f"{WORK}/push.py", PUSH)
    cluster.put(f"{WORK}/timed.py", TIMED)
    res = cluster.run(f"python3 {WORK}/push.py bench/tag-steps v1 0", node="login",
                      timeout=300)
    tag = f"{REGISTRY}/bench/tag-steps:v1"
    json.loads(res.out.strip().splitlines()[-1])
    sqsh = f"{IMAGE_DIR}/bench-tag-steps.sqsh"
    build_image(cluster, sqsh, "benchtag")
    cases = {"bare steps": None, "later steps, .sqsh file": sqsh,
             "later steps, registry tag": tag, "later steps, tag, site policy on": tag}
    got: dict[str, list[float]] = {c: [] for c in cases}
    try:
        for _ in range(args.runs):
            for case, image in cases.items():
                policy(cluster, on=case.endswith("policy on"))
                got[case] += later_steps(cluster, image, args.steps)
    finally:
        policy(cluster, on=False)
    load = os.getloadavg()[0]
    bare = statistics.median(got["bare steps"])
    lines = ["# Later container steps: a registry tag, a file, bare (issue 40)", "",
             "Mini cluster, 3 nodes (`bench/bench_tag_steps.py`), "
             f"{time.strftime('%Y-%m-%d %H:%M')}, "
             f"{args.runs} rounds x {args.steps} later steps per case, cases interleaved, "
             f"load {load:.1f}; NVIDIA Enroot 4.1.2. Medians of "
             "`srun -N3 ... cat /etc/os-release` timed on the login node inside one "
             "allocation, after the allocation's first step.", "",
             "| case | median ms | over bare ms | p90 ms |", "|---|---|---|---|"]
    for case, values in got.items():
        med = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else med
        lines.append(f"| {case} | {med:.0f} | {med - bare:+.0f} | {p90:.0f} |")
    out = ROOT / "bench" / "results" / "tag-steps.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
