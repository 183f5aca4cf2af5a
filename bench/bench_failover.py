"""Benchmark: a node dies mid-job; how long until training goes on, and how much is lost.

On the mini cluster (after `make cluster-up`), today's failover code against another
revision's (default: main), side by side, run after run alternating, with the coupled
program (sbatch/demo/allreduce.py: every step an all-reduce over TCP among the ranks, a
checkpoint every 10 steps) on two nodes and one spare, `failover.detect_seconds: 10` (the
default), in containers when the demo image exists. The supervisor of each revision is
that revision's `python/squall` (copied onto /fsx, on PYTHONPATH); the program is the same
for both.

Each run kills the node of rank 1 (its container) after the second complete checkpoint and
measures the seconds from the kill to every rank past its resume point (rank 0 finishes the
first step after the checkpoint it resumed from: in an all-reduce that needs every rank)
and the steps lost (executed before the kill, after that checkpoint). Results, each run and
the median and spread per revision: bench/results/failover.md.

    python bench/bench_failover.py [--runs 3] [--old main] [--steps 40] [--sleep 0.3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster  # noqa: E402

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
        time.sleep(0.1)


def copy_lib(cluster: Cluster, src: Path, dest: str) -> None:
    for path in sorted(src.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".c":
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            cluster.put(f"{dest}/squall/{path.relative_to(src)}", path.read_bytes(), mode=mode)


def revision_lib(cluster: Cluster, rev: str, work: Path) -> str:
    """``rev``'s python/squall on /fsx, with this checkout's compiled core."""
    tar = work / f"{rev}.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(tar), rev, "python/squall"],
                   check=True)
    with tarfile.open(tar) as t:
        t.extractall(work / rev, filter="data")
    src = work / rev / "python" / "squall"
    for core in (ROOT / "python" / "squall").glob("_core*.so"):
        (src / core.name).write_bytes(core.read_bytes())
    dest = f"/fsx/squall-tests/bench-failover/pylib-{rev}-{time.time_ns()}"
    copy_lib(cluster, src, dest)
    return dest


def ready(cluster: Cluster) -> list[str]:
    """Every node back in service before a run; the nodes a run left drained (Slurm's
    "Kill task failed": a step that outlived the job's end), which are then resumed."""
    out = cluster.run("sinfo -h -N -o '%N %t %E'", user="root", check=False).out
    drained = sorted({line.split()[0] for line in out.splitlines()
                      if len(line.split()) > 1 and line.split()[1].startswith("drain")})
    for node in drained:
        cluster.run(f"scontrol update nodename={node} state=resume", user="root", check=False)
    for node in cluster.nodes:
        cluster.wait_node_state(node, {"IDLE"}, timeout=180)
    return drained


def one(cluster: Cluster, lib: str, case: str, steps: int, sleep: float) -> dict[str, object]:
    left = ready(cluster)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", case).strip("-")
    b = f"/fsx/squall-tests/bench-failover/{slug}-{time.time_ns()}"
    host = cluster.fsx_host / b[len("/fsx/"):]
    cluster.put(f"{b}/allreduce.py", (DEMO / "allreduce.py").read_bytes(), mode=0o755)
    recipe: dict[str, object] = {
        "name": f"bench-{slug}", "nodes": 2, "spares": 1, "time": "00:20:00",
        "log_dir": f"{b}/logs", "launcher": "srun",
        "command": ["python3", f"{b}/allreduce.py", f"--steps={steps}",
                    f"--checkpoint-every={EVERY}", f"--sleep={sleep}", "--step-timeout=1800",
                    f"--checkpoint-dir={b}/ckpt", f"--final={b}/final.json",
                    f"--log={b}/steps.log"],
        "checkpoint": {"dir": f"{b}/ckpt", "pattern": "ckpt-*", "complete_marker": "COMPLETE",
                       "newest_by": "name", "resume": "--resume {checkpoint}"},
        "failover": {"detect_seconds": 10},
    }
    if (cluster.fsx_host / IMAGE[len("/fsx/"):]).exists():
        recipe["container"] = {"image": IMAGE, "mounts": ["/fsx:/fsx"], "workdir": b,
                               "efa": "off"}
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
    m = re.search(r"failover: running on (\S+);", log())
    assert m, log()
    victim = m.group(1).split(",")[1]
    before = executed()
    killed = time.monotonic()
    cluster.kill_node(victim)
    try:
        pattern = r"attempt 1 on \S+ from \S+/ckpt-(\d+)"
        wait(lambda: re.search(pattern, log()), 120, "the relaunch")
        m2 = re.search(pattern, log())
        assert m2
        resume = int(m2.group(1))
        wait(lambda: resume in executed()[len(before):], 120, "a step past the resume point")
        back = time.monotonic() - killed
        info = cluster.wait_job(job, {"COMPLETED"}, timeout=300)
    finally:
        try:  # back once DOWN: else the node stays completing (MIXED) for minutes
            cluster.wait_node_state(victim, {"DOWN"}, timeout=60)
        except AssertionError:
            pass
        cluster.start_node(victim)
    lost = (max(before) + 1 - resume) if before else 0
    cluster.wait_node_state(victim, {"IDLE", "DRAIN", "IDLE+DRAIN", "DRAINED"}, timeout=180)
    cluster.run(f"scontrol update nodename={victim} state=resume", user="root", check=False)
    how = re.search(r"node \S+ lost: ([^;]+);", log())
    return {"case": case, "seconds": back, "lost": lost, "resumed_from": resume,
            "restarts": info["Restarts"], "victim": victim, "how": how.group(1) if how else "?",
            "left_drained": left}


def summary(rows: list[dict[str, object]], case: str) -> str:
    secs = [float(str(r["seconds"])) for r in rows if r["case"] == case]
    lost = [int(str(r["lost"])) for r in rows if r["case"] == case]
    return (f"| {case} | {len(secs)} | {statistics.median(secs):.1f} | "
            f"{min(secs):.1f} to {max(secs):.1f} | {statistics.median(lost):g} | "
            f"{min(lost)} to {max(lost)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--old", default="main", help="the revision to compare with")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--sleep", type=float, default=0.3)
    args = ap.parse_args()
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    with tempfile.TemporaryDirectory() as work:
        libs = {f"old ({args.old})": revision_lib(cluster, args.old, Path(work)),
                "new": f"/fsx/squall-tests/bench-failover/pylib-new-{time.time_ns()}"}
    copy_lib(cluster, ROOT / "python" / "squall", libs["new"])
    rows = []
    for i in range(args.runs):
        for case, lib in libs.items():
            row = one(cluster, lib, case, args.steps, args.sleep)
            print(f"run {i + 1} {case}: {float(str(row['seconds'])):.1f} s, "
                  f"{row['lost']} steps lost ({row['how']})", flush=True)
            if row["left_drained"] and rows:  # the run before left them drained
                rows[-1]["drained_after"] = row["left_drained"]
            rows.append(row)
    lines = [
        "# Failover: a node killed mid-job (bench/bench_failover.py)",
        "",
        f"Mini cluster (2 cores), {time.strftime('%Y-%m-%d')}; coupled program (all-reduce "
        f"every step, {args.sleep} s a step, checkpoint every {EVERY} steps) on 2 nodes + 1 "
        "spare, `detect_seconds: 10` (the default); the node of rank 1 killed (its "
        "container) after the second complete checkpoint. Old and new alternate, "
        f"{args.runs} runs each, in one session.",
        "",
        "| code | runs | median s from the kill to every rank past its resume point | "
        "spread (s) | median steps lost | spread |",
        "|---|---|---|---|---|---|",
        *(summary(rows, case) for case in libs),
        "",
        "| run | code | seconds | steps lost | resumed from | Slurm restarts | why lost | "
        "left drained |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, r in enumerate(rows):
        lines.append(f"| {n // len(libs) + 1} | {r['case']} | {float(str(r['seconds'])):.1f} | "
                     f"{r['lost']} | ckpt-{int(str(r['resumed_from'])):06d} | {r['restarts']} "
                     f"| {r['how']} | {','.join(r.get('drained_after') or []) or '-'} |")
    lines += ["", "Goal (issue 28): new code ≤ 5 s from the kill to training again.", ""]
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
