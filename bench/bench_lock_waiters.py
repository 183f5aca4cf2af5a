"""Benchmark: what the nodes waiting for another node's pull cost /fsx (issue 27).

On the scale cluster (docker/scale/, /fsx on GlusterFS with a client per node and no
client-side metadata cache, as a Lustre client asks its MDS), for each N: node s1 holds an
image's build lock as a long pull would (tests/integration/test_sqshbuild_cluster.py HOLD:
its status rewritten every second), and a job of N nodes asks for that image. One of its
nodes takes the job's pin and waits for the image's lock; the N-1 others wait for the pin.
GlusterFS's own profile (`gluster volume profile fsx info incremental`) counts every file
operation the server received during WINDOW seconds of that wait: operations per second in
all and per waiting node, by kind. Then the holder lets go: the seconds from its release to
every task done (a waiter takes the lock, pulls the small image, every node starts it) is
the lock's wake-up, against the same step with the image cached.

Results: bench/results/lock-waiters.md (and lock-waiters.json).

    python bench/bench_lock_waiters.py [--nodes 16,64,128] [--hold 60] [--window 20]
        [--compare EARLIER.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_scale import SCALE, push, sh, with_push_tools  # noqa: E402
from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.test_sqshbuild_cluster import HOLD  # noqa: E402

RESULTS = ROOT / "bench" / "results"
CACHE = "/fsx/squall/images"


def on_node(cluster: Cluster, node: str, cmd: str, **kw: object) -> str:
    enter = f"nsenter -t $(pgrep -f 'slurmd -D -N {node}$' | head -1) -m -u --"
    return cluster.run(f"{enter} bash -c {shlex.quote(cmd)}", node=SCALE, user="root",
                       **kw).out  # type: ignore[arg-type]


def profile(cluster: Cluster) -> dict[str, int]:
    """Calls per file operation since the last call (the server's interval counters)."""
    out = cluster.run("gluster --mode=script volume profile fsx info incremental",
                      node=SCALE, user="root").out
    calls: dict[str, int] = {}
    for m in re.finditer(r"^\s*[\d.]+\s+[\d.]+ \w+\s+[\d.]+ \w+\s+[\d.]+ \w+\s+(\d+)\s+(\w+)\s*$",
                         out, re.M):
        calls[m.group(2)] = calls.get(m.group(2), 0) + int(m.group(1))
    return calls


def one_n(cluster: Cluster, n: int, hold: float, window: float) -> dict[str, object]:
    sh(["bash", str(ROOT / "docker/scale/scale.sh"), "up", str(n)], timeout=600)
    cluster.run("gluster --mode=script volume profile fsx start", node=SCALE, user="root")
    repo = f"scale/wait-{n}-{uuid.uuid4().hex[:6]}"
    digest = push(cluster, repo, f"w{n}", 0)
    ref = f"login:5000/{repo}:v1"
    step = f"srun -N{n} --container-image={ref} cat /etc/mark"
    # the same step with the image cached, for the wake-up's comparison (another image)
    other = f"scale/cached-{n}-{uuid.uuid4().hex[:6]}"
    push(cluster, other, f"c{n}", 0)
    cached_step = step.replace(repo, other)
    cluster.run(cached_step + " >/dev/null", node=SCALE, timeout=900)
    start = time.monotonic()
    cluster.run(cached_step + " >/dev/null", node=SCALE, timeout=900)
    cached_s = time.monotonic() - start
    on_node(cluster, "s1", f"cat > /tmp/hold.py <<'EOF'\n{HOLD}\nEOF")
    on_node(cluster, "s1", f"setsid runuser -u squall-builder -- python3 /tmp/hold.py "
            f"{digest} {ref} {hold} > /tmp/hold.out 2>&1 < /dev/null &")
    deadline = time.monotonic() + 30
    while "held" not in on_node(cluster, "s1", "cat /tmp/hold.out", check=False):
        assert time.monotonic() < deadline, on_node(cluster, "s1", "cat /tmp/hold.out")
        time.sleep(0.2)
    released = time.monotonic() + hold  # within the holder's own start (about 0.1 s)
    done: dict[str, float] = {}

    def run_step() -> None:
        cluster.run(step + " >/dev/null", node=SCALE, timeout=900)
        done["at"] = time.monotonic()

    th = threading.Thread(target=run_step)
    th.start()
    # the waits begin once every node's sqshbuild runs: leave the starts out of the window
    time.sleep(max(5.0, hold - window - 10))
    profile(cluster)
    time.sleep(window)
    calls = profile(cluster)
    th.join(timeout=900)
    total = sum(calls.values())
    sh(["bash", str(ROOT / "docker/scale/scale.sh"), "down"])
    return {"nodes": n, "window_s": window, "fops": calls,
            "fops_per_s": round(total / window, 1),
            "fops_per_s_per_node": round(total / window / n, 2),
            "wake_s": round(done.get("at", float("nan")) - released, 2),
            "cached_step_s": round(cached_s, 2)}


def write(results: list[dict[str, object]], meta: dict[str, object]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "lock-waiters.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    ns = [int(r["nodes"]) for r in results]  # type: ignore[call-overload]
    kinds = sorted({k for r in results for k in r["fops"]},  # type: ignore[attr-defined]
                   key=lambda k: -sum(int(r["fops"].get(k, 0)) for r in results))  # type: ignore[attr-defined]
    lines = ["# What waiting nodes cost /fsx (bench/bench_lock_waiters.py)", "",
             f"{meta['when']}, {meta['machine']}, {meta['code']}; the scale cluster "
             "(docker/scale/), /fsx on GlusterFS, a client per node with no metadata "
             f"cache; one node holds the image's lock for {meta['hold_s']} s, a job of N "
             "nodes waits for it; the server's operations counted over "
             f"{meta['window_s']} s of the wait.", "",
             "| figure | " + " | ".join(f"N={n}" for n in ns) + " |",
             "|---|" + "---|" * len(ns)]
    rows = [("fops_per_s", "file operations per second at the server, all nodes"),
            ("fops_per_s_per_node", "... per waiting node"),
            ("wake_s", "release to every task done (s): wake-up, one small pull, start"),
            ("cached_step_s", "the same step, image cached (s)")]
    for key, label in rows:
        lines.append(f"| {label} | " + " | ".join(f"{r[key]:g}" for r in results) + " |")
        earlier = {int(r["nodes"]): r for r in meta.get("compare", {}).get("results", [])}  # type: ignore[attr-defined]
        if earlier and key != "cached_step_s":
            code = meta["compare"]["meta"]["code"]  # type: ignore[index]
            lines.append(f"| ... {code} | " + " | ".join(
                f"{earlier[n][key]:g}" if n in earlier else "" for n in ns) + " |")
    for k in kinds:
        lines.append(f"| {k} per second | " + " | ".join(
            f"{int(r['fops'].get(k, 0)) / float(r['window_s']):.1f}"  # type: ignore[attr-defined]
            for r in results) + " |")
    (RESULTS / "lock-waiters.md").write_text("\n".join(lines) + "\n" + NOTES)


NOTES = """
## How to read it

- A waiter (docs/sqshbuild.md, "Lock") polls every 0.3 s at first, then 1.5 times longer
  each time, at most every 2 s; a poll is one `lstat` of the lock and a look for what it
  waits for (the job's pin in each cache, or the image); the holder's file is read once per
  lock file and for a progress line (every 5 s). Before (every 0.3 s: an `O_EXCL` create,
  two `lstat`s, an open and read of the holder's file, the pin read twice) each waiting
  node cost the server about 180 operations per second, and 64 nodes saturated this
  machine's GlusterFS server (about 11,400 per second: at 128 nodes each node's polls were
  slowed to half). After: about 9 to 11 per node, linear in N with that constant (1,000
  nodes: about 9,000 per second at the metadata server, against 180,000 asked before).
- Most of what remains is path lookups: with no client metadata cache (as on Lustre, whose
  clients ask the MDS), every component of a path under /fsx is looked up at each call.
- The holder's own writes (its status every second: WRITE, FTRUNCATE) are constant in N.
- The wake-up is up to 2 s later than before (a waiter's slowest poll), against a step
  that takes 5 to 50 s here.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="16,64,128")
    ap.add_argument("--hold", type=float, default=60)
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--code", default="", help="what the nodes run, for the results' line")
    ap.add_argument("--compare", type=Path, help="an earlier run's lock-waiters.json, shown "
                    "beside this one (run on the same machine just before)")
    args = ap.parse_args()
    cluster = with_push_tools()
    results = []
    for n in [int(x) for x in args.nodes.split(",")]:
        results.append(one_n(cluster, n, args.hold, args.window))
        print(json.dumps(results[-1]), flush=True)
    code = args.code or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip()
    meta: dict[str, object] = {
        "when": time.strftime("%Y-%m-%d"), "hold_s": args.hold, "window_s": args.window,
        "code": code, "machine": f"{platform.node()}, {os.cpu_count()} CPUs"}
    if args.compare:
        meta["compare"] = json.loads(args.compare.read_text())
    write(results, meta)


if __name__ == "__main__":
    main()
