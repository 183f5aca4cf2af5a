"""mksbatch and the Slurm client layer on the mini cluster (issue 6).

- The demo recipe (sbatch/demo/demo.yaml) runs count.py on two nodes; the batch host is
  killed mid-run; Slurm requeues the job (Restarts=1); it resumes from the newest complete
  checkpoint on the nodes left and ends with exactly the final state of an uninterrupted
  run, no step lost and none repeated beyond the last checkpoint interval.
- Time limit: the --signal lead time arrives, the program checkpoints, the script requeues
  the job, and it finishes across restarts with the same final state.
- The client layer's command backend against the real Slurm: submit, state, requeue count.

What runs on the login node is the working tree's squall (python/squall copied to /fsx
and put first on PYTHONPATH), so these tests check this checkout, not whatever the node
image installed; set SQUALL_TEST_INSTALLED=1 to use the installed `mksbatch` instead.

The demo's container section: SQUALL_DEMO_CONTAINER=1 keeps it (the image
/fsx/images/demo.sqsh, or $SQUALL_DEMO_IMAGE, must exist), 0 removes it, unset/auto keeps it
when that image exists. The image needs python3 (count.py uses the standard library only).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .cluster import Cluster
from .mksbatch_site import DEMO_DIR, DEMO_IMAGE, Site, job_log, use_container, wait_for

pytestmark = pytest.mark.cluster

EVERY = 5


def demo_recipe(site: Site, steps: int, sleep: float, container: bool, **top: object) -> str:
    """sbatch/demo/demo.yaml with this test's paths and sizes."""
    recipe = yaml.safe_load((DEMO_DIR / "demo.yaml").read_text())
    for key in ("spares", "failover"):  # these tests are of the requeue path
        recipe.pop(key, None)
    # count.py is started by srun (the demo's train_ddp.py by torchrun), and stops on USR1
    recipe["launcher"] = "srun"
    recipe["signal"]["forward"] = "USR1"
    b = site.base
    recipe["log_dir"] = f"{b}/logs"
    recipe["command"] = ["python3", f"{b}/count.py", f"--steps={steps}", f"--every={EVERY}",
                         f"--sleep={sleep}", f"--checkpoint-dir={b}/ckpt",
                         f"--final={b}/final.json", f"--log={b}/steps.log"]
    recipe["checkpoint"]["dir"] = f"{b}/ckpt"
    if container:
        recipe["container"]["image"] = DEMO_IMAGE
        recipe["container"]["workdir"] = b
    else:
        del recipe["container"]
    recipe.update(top)
    text = yaml.safe_dump(recipe, sort_keys=False)
    site.cluster.put(f"{b}/demo.yaml", text)
    return text


def reference_final(tmp_path: Path, steps: int) -> str:
    """The final state of an uninterrupted run of the same program, run here."""
    subprocess.run([sys.executable, str(DEMO_DIR / "count.py"), f"--steps={steps}",
                    f"--every={EVERY}", "--sleep=0", f"--checkpoint-dir={tmp_path}/ck",
                    f"--final={tmp_path}/final.json"], check=True, capture_output=True,
                   env={**os.environ, "SLURM_PROCID": "0"})
    return (tmp_path / "final.json").read_text()


def executed_steps(site: Site) -> dict[int, list[int]]:
    """Steps rank 0 executed, per restart count, from count.py's --log."""
    runs: dict[int, list[int]] = {}
    for line in (site.host / "steps.log").read_text().splitlines():
        restart, step = (int(x) for x in line.split())
        runs.setdefault(restart, []).append(step)
    return runs


def start_watch(site: Site) -> Path:
    """`mksbatch demo.yaml --watch` detached on the login node; returns its output file."""
    out = f"{site.base}/watch.log"
    inner = (f"{'PYTHONPATH=' + shlex.quote(site.pythonpath) + ' ' if site.pythonpath else ''}"
             + ("python3 -c 'from squall.mksbatch.cli import main; main()'"
                if site.pythonpath else "mksbatch")
             + " demo.yaml --watch --poll 1")
    site.cluster.run(f"cd {shlex.quote(site.base)} && setsid nohup bash -c "
                     f"{shlex.quote(inner)} > {shlex.quote(out)} 2>&1 < /dev/null &")
    return site.host / "watch.log"


def first_line_job_id(path: Path, timeout: float = 60) -> int:
    def ready() -> bool:
        return path.exists() and path.read_text().strip() != ""

    wait_for(ready, timeout, f"a job id in {path}")
    first = path.read_text().splitlines()[0].strip()
    assert first.isdigit(), path.read_text()
    return int(first)


def test_demo_survives_a_killed_node_and_resumes_from_the_last_checkpoint(
        cluster: Cluster, site: Site, tmp_path: Path) -> None:
    steps, sleep = 60, 0.5
    demo_recipe(site, steps, sleep, use_container(cluster))
    site.mksbatch("demo.yaml -o demo.sbatch")
    watch_log = start_watch(site)
    job_id = first_line_job_id(watch_log)
    info = cluster.wait_job(job_id, {"RUNNING"}, timeout=90)
    assert info["Restarts"] == "0", info
    # Mid-run: after the second complete checkpoint, before the end.
    wait_for(lambda: (site.host / "ckpt" / "ckpt-000010" / "COMPLETE").exists(), 90,
             "checkpoint ckpt-000010 to be complete")
    victim = info["BatchHost"]
    cluster.kill_node(victim)
    try:
        # The requeue (Restarts=1) is what this waits for; the node goes DOWN on the way.
        # Slurm waits cred_expire (30 s) before the requeued run may start on the third node.
        info = cluster.wait_job(job_id, {"RUNNING"}, timeout=240,
                                where=lambda i: i.get("Restarts") == "1")
        hosts = cluster.run(f"scontrol show hostnames {info['NodeList']}").out.split()
        assert victim not in hosts and len(hosts) == 2, info
        info = cluster.wait_job(job_id, {"COMPLETED"}, timeout=180)
        assert info["Restarts"] == "1", info
    finally:
        cluster.start_node(victim)

    log = job_log(site, job_id)
    final = (site.host / "final.json").read_text()
    assert final == reference_final(tmp_path, steps), log
    runs = executed_steps(site)
    assert sorted(runs) == [0, 1], runs
    first, second = runs[0], runs[1]
    assert first == list(range(len(first))) and second == list(range(second[0], steps)), runs
    resumed_at = second[0]
    assert resumed_at % EVERY == 0 and resumed_at >= 10, runs
    repeated = sorted(set(first) & set(second))
    assert len(repeated) <= EVERY, f"{len(repeated)} steps repeated: {repeated}"
    assert f"resuming from the newest complete checkpoint: {site.base}/ckpt/ckpt-{resumed_at:06d}" \
        in log, log
    assert "restart 0 (at most 3)" in log and "restart 1 (at most 3)" in log, log
    wait_for(lambda: f"job {job_id}: COMPLETED" in watch_log.read_text(), 30,
             "mksbatch --watch to report the end")
    watched = watch_log.read_text()
    assert f"job {job_id}: requeued, restart 1" in watched, watched
    assert f"job {job_id}: RUNNING on" in watched, watched
    cluster.wait_in_service(victim, timeout=90)


def test_time_limit_signal_checkpoints_requeues_and_finishes(
        cluster: Cluster, site: Site, tmp_path: Path) -> None:
    steps, sleep = 90, 1.0  # 90 s of work in a 2 minute limit with the signal 60 s before
    demo_recipe(site, steps, sleep, use_container(cluster), time="00:02:00",
                signal={"name": "USR1", "forward": "USR1", "lead_seconds": 60},
                requeue={"max_restarts": 8})
    job_id = int(site.mksbatch("demo.yaml --submit").out.strip())
    info = cluster.wait_job(job_id, {"COMPLETED"}, timeout=540)
    log = job_log(site, job_id)
    restarts = int(info["Restarts"])
    assert restarts >= 1, log
    assert "got SIGUSR1 before the time limit: sending SIGUSR1 to the program" in log, log
    assert f"requeueing job {job_id}" in log, log
    assert "count.py: signal 10: checkpointed" in log, log
    assert "signal 15" not in log, log  # rank 0 was never cut short by the step kill
    assert (site.host / "final.json").read_text() == reference_final(tmp_path, steps), log
    runs = executed_steps(site)
    ran = sorted(runs)
    if ran != list(range(restarts + 1)):
        # A run whose warning came after its last step checkpointed all of them: the run
        # after it resumed at the end with nothing left to do (seen on a loaded CI).
        assert ran == list(range(restarts)), runs
        assert f"restart {restarts}, starting at step {steps}" in log, log
    # A signal-time checkpoint is taken at the step reached: nothing is repeated at all.
    done = [s for r in sorted(runs) for s in runs[r]]
    assert done == list(range(steps)), runs


def test_numeric_checkpoints_with_sbatch_srun_and_setup(cluster: Cluster, site: Site,
                                                        tmp_path: Path) -> None:
    """Issue 14 on the real Slurm. An earlier run left complete checkpoint-10 ...
    checkpoint-100 (the Hugging Face naming) and an incomplete checkpoint-110. The job, from
    a recipe with sbatch:, srun: and setup: and the default numeric order, resumes from
    checkpoint-100 (byte order picks checkpoint-90), sees what setup exported, and ends
    with the final state of an uninterrupted run."""
    b = site.base
    name = "--name=checkpoint-{step}"
    site.cluster.run(f"cd {shlex.quote(b)} && python3 count.py --steps=100 --every=10 "
                     f"--sleep=0 --checkpoint-dir={b}/ckpt --final={b}/first.json "
                     f"{shlex.quote(name)} && mkdir {b}/ckpt/checkpoint-110")
    recipe = {
        "name": "numeric-resume", "nodes": 2, "time": "00:05:00", "log_dir": f"{b}/logs",
        "launcher": "srun",
        "command": ["bash", "-c", 'echo "rank $SLURM_PROCID sees DEMO_SETUP=$DEMO_SETUP"; '
                    'exec "$@"', "bash", "python3", f"{b}/count.py", "--steps=120",
                    "--every=10", "--sleep=0.1", f"--checkpoint-dir={b}/ckpt",
                    f"--final={b}/final.json", f"--log={b}/steps.log", name],
        "checkpoint": {"dir": f"{b}/ckpt", "pattern": "checkpoint-*",
                       "complete_marker": "COMPLETE", "resume": "--resume {checkpoint}"},
        "sbatch": {"comment": "squall-issue-14"},
        "srun": ["--label"],
        "setup": [f"echo setup-ran > {b}/setup.txt", "export DEMO_SETUP=from-setup"],
    }
    site.cluster.put(f"{b}/r.yaml", yaml.safe_dump(recipe, sort_keys=False))
    job_id = int(site.mksbatch("r.yaml --submit").out.strip())
    info = cluster.wait_job(job_id, {"COMPLETED"}, timeout=240)
    log = job_log(site, job_id)
    assert info.get("Comment") == "squall-issue-14", info
    assert (site.host / "setup.txt").read_text() == "setup-ran\n", log
    assert "squall: running the recipe's setup lines" in log, log
    assert f"resuming from the newest complete checkpoint: {b}/ckpt/checkpoint-100" in log, log
    assert "0: rank 0 sees DEMO_SETUP=from-setup" in log, log
    assert "1: rank 1 sees DEMO_SETUP=from-setup" in log, log
    assert "0: count.py rank 0: restart 0, starting at step 100" in log, log
    assert executed_steps(site) == {0: list(range(100, 120))}
    assert (site.host / "final.json").read_text() == reference_final(tmp_path, 120), log


CLIENT_PROBE = r"""
import json, sys, time
from squall.slurm import client, JobNotFound
c = client("auto")
out = {"backend": c.backend, "version": str(c.version())}
jid = c.submit("#!/bin/bash\n#SBATCH -N1 --requeue -o /dev/null\nsleep 20\n", workdir=".")
out["job_id"] = jid
states = []
deadline = time.time() + 60
while time.time() < deadline:
    info = c.job(jid)
    states.append(info.state)
    if info.state == "RUNNING":
        break
    time.sleep(0.5)
c.requeue(jid)
deadline = time.time() + 90
while time.time() < deadline:
    info = c.job(jid)
    if info.restarts == 1 and info.state == "RUNNING":
        break
    time.sleep(0.5)
out["after_requeue"] = [info.state, info.restarts]
c.cancel(jid)
deadline = time.time() + 60
while time.time() < deadline:
    info = c.job(jid)
    if info.final:
        break
    time.sleep(0.5)
out["final"] = [info.state, info.restarts, info.final]
out["states"] = states
try:
    c.job(99999999)
    out["missing"] = "found?"
except JobNotFound as exc:
    out["missing"] = str(exc)
print(json.dumps(out))
"""


def test_cli_backend_against_real_slurm(cluster: Cluster, site: Site) -> None:
    res = site.python(CLIENT_PROBE, timeout=240)
    out = json.loads(res.out.strip().splitlines()[-1])
    release = cluster.run("sinfo --version").out.split()[-1]
    assert out["backend"] == "cli", out  # no pyslurm matches Debian's Slurm
    assert out["version"] == release, out
    assert out["states"][-1] == "RUNNING", out
    assert out["after_requeue"] == ["RUNNING", 1], out
    assert out["final"] == ["CANCELLED", 1, True], out
    assert out["missing"].startswith("job 99999999 is unknown to Slurm"), out
    # scontrol shows COMPLETING until slurmd has ended the job's processes (cgroup) and run
    # the epilog; squeue, which the client reads, already shows CANCELLED.
    info = cluster.wait_job(out["job_id"], {"CANCELLED"}, timeout=60)
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "1", info
