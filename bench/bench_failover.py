"""Benchmark: a node dies mid-job; how long until training goes on, and how much is lost.

On the mini cluster (after `make cluster-up`), one run of each path side by side, with the
coupled program (sbatch/demo/allreduce.py: every step an all-reduce over TCP among the
ranks, a checkpoint every 10 steps) on two nodes, in containers when the demo image
exists:

- requeue: today's recipe (no spares): Slurm notices the dead node (SlurmdTimeout=15 s
  on the mini cluster, 300 s by default), requeues the job, which starts again from the
  newest complete checkpoint;
- spare: `spares: 1`, `failover.detect_seconds: 10`: the job notices by itself and
  relaunches on the spare it holds.

For each: the node of rank 1 is killed (its container) after the second complete
checkpoint; measured are the seconds from the kill to every rank past its resume point
(rank 0 finishes the first step after the checkpoint it resumed from: in an all-reduce
that needs every rank) and the steps lost (executed before the kill, after that
checkpoint). Results: bench/results/failover.md.

    python bench/bench_failover.py [--steps 80] [--sleep 0.3] [--cases requeue,spare]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.test_mksbatch_cluster import _copy_tree  # noqa: E402

DEMO = ROOT / "sbatch" / "demo"
IMAGE = "/fsx/images/demo.sqsh"
RESULTS = ROOT / "bench" / "results" / "failover.md"
EVERY = 10


def wait(pred, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_failover: timed out after {timeout:.0f} s waiting for "
                             f"{what}")
        time.sleep(0.2)


def one(cluster: Cluster, lib: str, case: str, steps: int, sleep: float) -> dict[str, object]:
    b = f"/fsx/squall-tests/bench-failover/{case}-{time.time_ns()}"
    host = cluster.fsx_host / b[len("/fsx/"):]
    cluster.put(f"{b}/allreduce.py", (DEMO / "allreduce.py").read_bytes(), mode=0o755)
    recipe: dict[str, object] = {
        "name": f"bench-{case}", "nodes": 2, "time": "00:20:00", "log_dir": f"{b}/logs",
        "launcher": "srun",
        "command": ["python3", f"{b}/allreduce.py", f"--steps={steps}",
                    f"--checkpoint-every={EVERY}", f"--sleep={sleep}", "--step-timeout=1800",
                    f"--checkpoint-dir={b}/ckpt", f"--final={b}/final.json",
                    f"--log={b}/steps.log"],
        "checkpoint": {"dir": f"{b}/ckpt", "pattern": "ckpt-*", "complete_marker": "COMPLETE",
                       "newest_by": "name", "resume": "--resume {checkpoint}"},
        "requeue": {"max_restarts": 3},
    }
    if (cluster.fsx_host / IMAGE[len("/fsx/"):]).exists():
        recipe["container"] = {"image": IMAGE, "mounts": ["/fsx:/fsx"], "workdir": b,
                               "efa": "off"}
    if case == "spare":
        recipe["spares"] = 1
        recipe["failover"] = {"detect_seconds": 10}
    cluster.put(f"{b}/job.yaml", yaml.safe_dump(recipe, sort_keys=False))
    out = cluster.run(f"cd {b} && python3 -c 'from squall.mksbatch.cli import main; main()' "
                      "job.yaml --submit", env={"PYTHONPATH": lib})
    job = int(out.out.strip())

    def log() -> str:
        logs = list((host / "logs").glob(f"*-{job}.out"))
        return logs[0].read_text() if logs else ""

    def executed() -> list[int]:
        p = host / "steps.log"
        return [int(x.split()[1]) for x in p.read_text().splitlines()] if p.exists() else []

    wait(lambda: (host / "ckpt" / f"ckpt-{2 * EVERY:06d}" / "COMPLETE").exists(), 180,
         "the second complete checkpoint")
    if case == "spare":
        m = re.search(r"failover: running on (\S+);", log())
        assert m, log()
        victim = m.group(1).split(",")[1]
    else:
        info = cluster.wait_job(job, {"RUNNING"})
        nodes = cluster.run(f"scontrol show hostnames {info['NodeList']}").out.split()
        victim = [n for n in nodes if n != info["BatchHost"]][0]
    before = executed()
    killed = time.monotonic()
    cluster.kill_node(victim)
    try:
        pattern = (r"attempt 1 on \S+ from \S+/ckpt-(\d+)" if case == "spare" else
                   r"restart 1 .*\n(?:.*\n)*?.*resuming from the newest complete checkpoint: "
                   r"\S+/ckpt-(\d+)")
        wait(lambda: re.search(pattern, log()), 600, "the relaunch or the requeue")
        m2 = re.search(pattern, log())
        assert m2
        resume = int(m2.group(1))
        wait(lambda: resume in executed()[len(before):], 600, "a step past the resume point")
        back = time.monotonic() - killed
        info = cluster.wait_job(job, {"COMPLETED"}, timeout=900)
    finally:
        cluster.start_node(victim)
    lost = (max(before) + 1 - resume) if before else 0
    cluster.wait_node_state(victim, {"IDLE", "DRAIN", "IDLE+DRAIN", "DRAINED"}, timeout=180)
    cluster.run(f"scontrol update nodename={victim} state=resume", user="root", check=False)
    return {"case": case, "seconds": back, "lost": lost, "resumed_from": resume,
            "restarts": info["Restarts"], "victim": victim}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--sleep", type=float, default=0.3)
    ap.add_argument("--cases", default="requeue,spare")
    args = ap.parse_args()
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    lib = f"/fsx/squall-tests/bench-failover/pylib-{time.time_ns()}"
    _copy_tree(cluster, lib)
    rows = [one(cluster, lib, c, args.steps, args.sleep) for c in args.cases.split(",")]
    lines = [
        "# Failover: a node killed mid-job (bench/bench_failover.py)",
        "",
        f"Mini cluster, {time.strftime('%Y-%m-%d')}; coupled program (all-reduce every step, "
        f"{args.sleep} s a step, checkpoint every {EVERY} steps) on 2 nodes; the node of "
        "rank 1 killed (its container) after the second complete checkpoint. SlurmdTimeout "
        "is 15 s on the mini cluster (300 s by default: the requeue path is minutes there).",
        "",
        "| path | seconds from the kill to every rank past its resume point | steps lost "
        "| resumed from | Slurm restarts |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['case']} | {float(r['seconds']):.1f} | {r['lost']} | "
                     f"ckpt-{int(r['resumed_from']):06d} | {r['restarts']} |")
    lines += ["", "Target (spare): within detect_seconds + 5 s = 15 s of the kill, steps lost "
              f"at most one checkpoint interval ({EVERY}).", ""]
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
