"""Benchmark: the failover's heartbeats and a relaunch at N nodes (issue 27).

On the scale cluster (docker/scale/, /fsx on GlusterFS with a client per node), for each N:
a failover job (mksbatch, docs/failover.md) of N active nodes and one spare whose program
only says it runs (one line per rank on /fsx, then sleeps: no container, so that what is
measured is the failover's own cost, not N container starts on two CPUs). Measured:

- heartbeat load: over WINDOW seconds of the running job, the file operations per second
  that GlusterFS's server received (`gluster volume profile`), in all and per node, and the
  supervisor's CPU (its process tree's user+system time per second of wall time);
- false detections: "lost" lines in the job log before the kill (must be none);
- kill to training again: the last active node killed (every process in its mount
  namespace, the GlusterFS client and slurmd included: the node is gone), then the
  seconds until the supervisor relaunches, and until every rank of the new attempt has
  said it runs.

Results: bench/results/failover-scale.md (and failover-scale.json).

    python bench/bench_failover_scale.py [--nodes 16,64,128] [--window 20] [--merge]
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_failover import wait  # noqa: E402
from bench.bench_lock_waiters import profile  # noqa: E402
from bench.bench_scale import SCALE, growth, sh  # noqa: E402
from tests.integration.cluster import Cluster  # noqa: E402

RESULTS = ROOT / "bench" / "results"
HOME = "/fsx/home/squall"


def scale_sh(cluster: Cluster, cmd: str, **kw: object) -> str:
    return cluster.run(cmd, node=SCALE, **kw).out  # type: ignore[arg-type]


def cpu_ticks(cluster: Cluster, pattern: str) -> int:
    """utime+stime (clock ticks) of the processes matching pattern and their children."""
    out = cluster.run(f"for p in $(pgrep -f {shlex.quote(pattern)}); do "
                      "awk '{print $14 + $15 + $16 + $17}' /proc/$p/stat; done", node=SCALE,
                      user="root", check=False).out
    return sum(int(x) for x in out.split())


def kill_node(cluster: Cluster, node: str) -> None:
    """Every process in the node's mount namespace: its slurmd, slurmstepds, tasks and its
    GlusterFS client."""
    cluster.run(f"ns=$(readlink /proc/$(pgrep -f 'slurmd -D -N {node}$' | head -1)/ns/mnt); "
                "for p in /proc/[0-9]*; do [ \"$(readlink $p/ns/mnt 2>/dev/null)\" = \"$ns\" ] "
                "&& echo ${p#/proc/}; done | xargs -r kill -KILL 2>/dev/null; true", node=SCALE,
                user="root")  # a process may end by itself meanwhile


def one_n(cluster: Cluster, n: int, window: float) -> dict[str, object]:
    sh(["bash", str(ROOT / "docker/scale/scale.sh"), "up", str(n + 1)], timeout=600)
    cluster.run("gluster --mode=script volume profile fsx start", node=SCALE, user="root")
    b = f"{HOME}/bench-failover-{n}-{time.time_ns()}"
    recipe = {"name": f"fo{n}", "nodes": n, "spares": 1, "time": "00:20:00",
              "log_dir": f"{b}/logs", "launcher": "srun",
              "command": ["sh", "-c", f"echo $SLURM_PROCID >> {b}/up; exec sleep 900"],
              "failover": {"detect_seconds": 10}}
    scale_sh(cluster, f"mkdir -p {b}/logs && cat > {b}/job.yaml <<'EOF'\n"
             f"{json.dumps(recipe)}\nEOF")
    job = int(scale_sh(cluster, f"cd {b} && mksbatch job.yaml --submit").strip())

    def log() -> str:
        return scale_sh(cluster, f"cat {b}/logs/*-{job}.out 2>/dev/null || true")

    def ranks_up() -> int:
        return len(scale_sh(cluster, f"cat {b}/up 2>/dev/null || true").split())

    wait(lambda: ranks_up() >= n, 600, f"the {n} ranks of the first attempt")
    time.sleep(5)  # the heartbeats steady
    profile(cluster)
    t0, c0 = time.monotonic(), cpu_ticks(cluster, "squall failover")
    time.sleep(window)
    calls = profile(cluster)
    cpu = (cpu_ticks(cluster, "squall failover") - c0) / os.sysconf("SC_CLK_TCK")
    cpu_share = cpu / (time.monotonic() - t0)
    before = log()
    false = len(re.findall(r"node \S+ lost:", before))
    m = re.search(r"failover: running on (\S+); spares: (\S+);", before)
    assert m, before
    victim = m.group(1).split(",")[-1]
    victim = expand(victim, cluster)
    killed = time.monotonic()
    kill_node(cluster, victim)
    wait(lambda: "attempt 1 on" in log(), 300, "the relaunch")
    relaunch_s = time.monotonic() - killed
    def back() -> bool:
        if ranks_up() >= 2 * n:
            return True
        # squeue's own timeouts (a busy slurmctld) are not the job's end
        res = cluster.run(f"squeue -h -j {job} -o %T", node=SCALE, check=False)
        if res.rc == 0 and not res.out.strip():
            raise SystemExit(f"bench_failover_scale: job {job} ended; its log:\n{log()}")
        return False

    wait(back, 600, "every rank of the new attempt")
    back_s = time.monotonic() - killed
    final = log()
    cluster.run(f"scancel {job}", node=SCALE, user="root", check=False)
    sh(["bash", str(ROOT / "docker/scale/scale.sh"), "down"])
    total = sum(calls.values())
    why = re.search(r"node \S+ lost: ([^\n]*)", final)
    return {"nodes": n, "fops": calls, "fops_per_s": round(total / window, 1),
            "fops_per_s_per_node": round(total / window / (n + 1), 2),
            "supervisor_cpu": round(cpu_share, 3), "false_detections": false,
            "relaunch_s": round(relaunch_s, 1), "training_again_s": round(back_s, 1),
            "detected_by": why.group(1) if why else ""}


def expand(nodelist: str, cluster: Cluster) -> str:
    """The last node of a Slurm hostlist (s[1-16] -> s16)."""
    return scale_sh(cluster, f"scontrol show hostnames {shlex.quote(nodelist)} | tail -1").strip()


def write(results: list[dict[str, object]], meta: dict[str, object]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "failover-scale.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    ns = [int(r["nodes"]) for r in results]  # type: ignore[call-overload]
    lines = ["# Failover at N nodes (bench/bench_failover_scale.py)", "",
             f"{meta['when']}, {meta['machine']}, {meta['code']}; the scale cluster "
             "(docker/scale/), /fsx on GlusterFS with a client per node; a failover job of "
             "N active nodes and one spare, `detect_seconds: 10`, its program one line per "
             "rank then sleep (no container); heartbeat load over "
             f"{meta['window_s']} s of the running job; then the last active node killed "
             "(every process of it, its /fsx client included).", "",
             "| figure | " + " | ".join(f"N={n}" for n in ns) + " | growth in N |",
             "|---|" + "---|" * (len(ns) + 1)]
    rows = [("fops_per_s", "file operations per second at /fsx's server, whole job"),
            ("fops_per_s_per_node", "... per node"),
            ("supervisor_cpu", "supervisor's CPU (share of one core)"),
            ("false_detections", "nodes reported lost before the kill"),
            ("relaunch_s", "kill to relaunch (s)"),
            ("training_again_s", "kill to every rank of the new attempt running (s)")]
    for key, label in rows:
        xs = [float(r[key]) for r in results]  # type: ignore[arg-type]
        lines.append(f"| {label} | " + " | ".join(f"{x:g}" for x in xs) +
                     f" | {growth(xs, ns)} |")
    lines.append("| detected by | " + " | ".join(str(r["detected_by"]) for r in results)
                 + " | |")
    (RESULTS / "failover-scale.md").write_text("\n".join(lines) + "\n" + NOTES)


NOTES = """
## How to read it

- **Before this round** (the same bench, 94da3e6, N=16): about 3,400 operations a second,
  200 per node: the supervisor opened, read and stat'ed every node's file every 0.25 s and
  each agent wrote a temporary file and renamed it (seven path operations a beat). At
  N=64 no step could start: the 65 agents, each looking at every process of the node
  every second (on this cluster the nodes share one /proc), took the two CPUs from
  slurmctld ("step creation temporarily disabled ... Socket timed out"), and one relaunch
  whose srun could not reach slurmctld ended the job. Now: one open a beat per node, one
  stat per node a second by the supervisor, the process count only when hangs are
  watched, and a relaunch srun could not start is tried again.
- **Per node about 29 operations a second**, constant in N (linear in all). Most are path
  lookups: this GlusterFS has no client metadata cache (as a Lustre client asks its MDS),
  so each path's seven components are looked up at each open or stat; the operations
  themselves are one OPEN, WRITE, FLUSH, RELEASE a beat and one STAT by the supervisor.
  At 1,000 nodes: about 1,000 small writes and 1,000 stats a second at the metadata
  server, which a Lustre MDS serves; the supervisor's CPU grows linearly, 2 % of one
  core at 256.
- **No false detection** at any N, with 256 nodes on two CPUs. (A first run at 256, before
  the stall rule in docs/failover.md, declared every node lost when all heartbeats went
  silent together for 11.5 s on the overloaded machine.)
- **Kill to relaunch** is the 10 s of `detect_seconds` (the bench's program is `sleep`: it
  reports no lost peer, which a training program does in about a second, docs/failover.md)
  plus the kill of the old step; **to every rank running** adds the new step's start,
  which on two CPUs grows with N as any srun does (bench/results/scale.md, bare srun).
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="16,64,128")
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--merge", action="store_true", help="keep the results file's other N")
    args = ap.parse_args()
    cluster = Cluster(ROOT / ".cluster" / "fsx")
    results = []
    for n in [int(x) for x in args.nodes.split(",")]:
        results.append(one_n(cluster, n, args.window))
        print(json.dumps(results[-1]), flush=True)
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    meta = {"when": time.strftime("%Y-%m-%d"), "window_s": args.window, "code": code,
            "machine": f"{platform.node()}, {os.cpu_count()} CPUs"}
    if args.merge and (RESULTS / "failover-scale.json").exists():
        earlier = json.loads((RESULTS / "failover-scale.json").read_text())["results"]
        ns = {r["nodes"] for r in results}
        results = sorted([*[r for r in earlier if r["nodes"] not in ns], *results],
                         key=lambda r: int(r["nodes"]))  # type: ignore[call-overload]
    write(results, meta)


if __name__ == "__main__":
    main()
