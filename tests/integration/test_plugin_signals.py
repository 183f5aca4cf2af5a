"""Job signals reach the program in the container, never the container's filesystem (issue 9).

A checkpoint-on-signal program (the pattern mksbatch forwards) runs in a container step,
handles SIGUSR1, SIGUSR2, SIGCONT and SIGTERM, keeps reading the image's files and running
its programs after each, writes a checkpoint on SIGTERM and exits 0. Slurm delivers the
signals: `scancel -s SIG`, `--signal=SIG@TIME` (srun and sbatch) and a plain `scancel`
(SIGCONT, then SIGTERM). Under proctrack/linuxproc Slurm signals every process under
slurmstepd, so a runtime started there (Enroot's squashfuse and fuse-shim) dies of them
and the program then reads nothing (or dies of SIGBUS); under proctrack/cgroup only the
step's tasks get them. Every case runs under both (the cluster is recreated for
linuxproc), and after each the node must hold no process and no mount of the user:
step end, scancel, and a slurmstepd killed under a running container step.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from .cluster import PROCTRACK_MODES, Cluster, default_proctrack
from .leftovers import leftovers, wait_clean

SIGNALS_DIR = "/fsx/home/squall/signals"   # bound into the containers
PROGRAM = f"{SIGNALS_DIR}/ckpt-on-signal.sh"
# Handle job signals, keep reading the container's files after each (a broken runtime
# shows as "BROKEN", a missing program or SIGBUS), checkpoint on SIGTERM, exit 0.
#   ckpt-on-signal.sh DIR SIG: exit 0 once SIG was handled (SIG "none": wait for SIGTERM)
PROGRAM_TEXT = r"""#!/bin/bash
dir=$1 want=$2 done_sig=""
log() { echo "$*" >>"$dir/log"; }
read_image() {
    [ "$(cat /etc/squall-image-id)" = squalltest ] && ls /usr/bin | grep -q '^sleep$' &&
        head -c 4096 /usr/bin/bash | wc -c | grep -q 4096
}
handled() {
    sleep 1   # time for a runtime that got the signal too to lose its mounts
    if read_image; then log "$1 ok"; else log "$1 BROKEN"; exit 3; fi
    [ "$1" != "$want" ] || done_sig=$1
}
trap 'handled USR1' USR1
trap 'handled USR2' USR2
trap 'handled CONT' CONT
checkpoint() { echo "checkpoint $(cat /etc/squall-image-id)" >"$dir/ckpt"; log checkpointed; }
trap 'handled TERM; checkpoint; exit 0' TERM
log "ready $(hostname)"
while [ -z "$done_sig" ]; do sleep 0.2; done
for i in 1 2 3; do read_image || { log "BROKEN after"; exit 4; }; sleep 0.2; done
log done
"""


@dataclass
class Case:
    name: str
    want: str           # the signal after which the program exits 0 ("none": SIGTERM)
    submit: str         # "sbatch" (the program in a step of a batch job) or "srun"
    flags: str = ""     # extra sbatch/srun flags (time limit, --signal)
    send: str | None = None  # scancel arguments once the program is ready (None: nothing)
    limit_after_ready: bool = False  # cut the job's time limit once the program is ready


CASES = [
    Case("usr1", "USR1", "sbatch", send="-s USR1"),
    Case("usr2", "USR2", "sbatch", send="-s USR2"),
    Case("cont", "CONT", "sbatch", send="-s CONT"),
    Case("term", "TERM", "sbatch", send="-s TERM"),
    Case("scancel", "none", "sbatch", send=""),
    # Slurm sends the warning (after a SIGCONT) when the job is within 50 s of its limit,
    # checked every ~30 s by slurmctld. A warning sent before the program's trap exists is
    # lost, as with any program, so the limit is cut to 1-2 minutes left only once the
    # program is ready (a user may lower a job's limit): a slow container start cannot
    # turn into a missed signal.
    Case("signal-time-srun", "USR1", "srun", flags="-t 10 --signal=USR1@50",
         limit_after_ready=True),
    Case("signal-time-sbatch", "USR1", "sbatch", flags="-t 10 --signal=USR1@50",
         limit_after_ready=True),
]


def elapsed_s(text: str) -> int:
    """Seconds in squeue's %M ("M:SS", "H:MM:SS", "D-HH:MM:SS")."""
    days, _, clock = text.rpartition("-")
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds + int(days or 0) * 86400


def cut_limit_once_ready(cluster: Cluster, jobid: str) -> str:
    """Lower the job's limit to 1-2 minutes from now; say how long the job ran until then."""
    ran = elapsed_s(cluster.run(f"squeue -h -j {jobid} -o %M").out.strip())
    cluster.run(f"scontrol update JobId={jobid} TimeLimit={ran // 60 + 2}")
    return f"the program was ready {ran} s after the job started"


@pytest.fixture(scope="module", params=PROCTRACK_MODES)
def proctrack(request, cluster: Cluster) -> Iterator[str]:
    cluster.use_proctrack(request.param)
    yield request.param
    if request.param != default_proctrack():
        cluster.use_proctrack(default_proctrack())



LOCAL_CACHE = "/var/lib/squall/cache/1000"


@pytest.fixture(scope="module", autouse=True)
def from_squashfuse(cluster: Cluster, proctrack: str) -> Iterator[None]:
    """Containers start from the squashfs file, through squashfuse, the runtime path job
    signals break: the user's node-local cache of extracted images is emptied and made
    unwritable, so nothing is extracted (test_plugin_localcache.py covers the cache)."""
    for node in cluster.nodes:
        cluster.run(f"install -d -o 1000 -g 1000 {LOCAL_CACHE} && chmod -R u+w {LOCAL_CACHE}"
                    f" && rm -rf {LOCAL_CACHE}/* && chmod 0500 {LOCAL_CACHE}",
                    node=node, user="root")
    yield
    for node in cluster.nodes:
        cluster.run(f"chmod 0700 {LOCAL_CACHE}", node=node, user="root", check=False)


def wait_for(cluster: Cluster, cmd: str, what: str, timeout: float = 60,
             node: str = "login", user: str = "squall") -> str:
    deadline = time.monotonic() + timeout
    while True:
        res = cluster.run(cmd, node=node, user=user, check=False)
        if res.rc == 0 and res.out.strip():
            return res.out.strip()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s ({cmd}: {res})")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def outcomes(cluster: Cluster, proctrack: str, image: str) -> dict[str, str]:
    """Run every case at once (one job each), send the signals, return each case's log."""
    cluster.put(PROGRAM, PROGRAM_TEXT, mode=0o755)
    run_dir = f"{SIGNALS_DIR}/{proctrack}-{time.time_ns()}"
    jobs: dict[str, str] = {}
    for case in CASES:
        d = f"{run_dir}/{case.name}"
        cluster.put(f"{d}/log", "")
        step = (f"--container-image={image} --container-mounts={SIGNALS_DIR} "
                f"{PROGRAM} {d} {case.want}")
        name = f"sig-{proctrack}-{case.name}"
        if case.submit == "sbatch":
            wrap = f"srun {step}; echo srun-rc=$? >>{d}/log"
            cluster.run(f"sbatch -N1 -J {name} -o {d}/out {case.flags} --wrap {shlex.quote(wrap)}")
        else:
            srun = (f"srun -N1 -J {name} {case.flags} {step} >{d}/out 2>&1;"
                    f" echo srun-rc=$? >>{d}/log")
            cluster.run(f"setsid bash -c {shlex.quote(srun)} </dev/null >/dev/null 2>&1 &")
        jobs[case.name] = wait_for(cluster, f"squeue -h -n {name} -o %i", f"job {name} queued")
    ready_after: dict[str, str] = {}
    for case in CASES:
        d = f"{run_dir}/{case.name}"
        wait_for(cluster, f"grep '^ready' {d}/log", f"{case.name}: the program started", 120)
        if case.limit_after_ready:
            ready_after[case.name] = cut_limit_once_ready(cluster, jobs[case.name])
        if case.send is not None:
            cluster.run(f"scancel {case.send} {jobs[case.name]}")
    logs = {}
    for case in CASES:
        d = f"{run_dir}/{case.name}"
        end = "checkpointed" if case.want == "none" else "srun-rc="
        try:
            wait_for(cluster, f"grep -E '{end}|BROKEN' {d}/log", f"{case.name}: ended", 120)
        except AssertionError:
            pass
        time.sleep(0.5)
        text = cluster.run(f"cat {d}/log {d}/ckpt 2>/dev/null; tail -n 5 {d}/out", check=False).out
        when = f", {ready_after[case.name]}" if case.name in ready_after else ""
        logs[case.name] = (f"[{case.name}, proctrack/{proctrack}, job {jobs[case.name]}{when}]\n"
                           f"{text}")
    return logs


@pytest.mark.parametrize("case", [c for c in CASES if c.want != "none"], ids=lambda c: c.name)
def test_program_handles_the_signal_and_keeps_reading_the_image(outcomes, case: Case) -> None:
    log = outcomes[case.name]
    assert f"{case.want} ok" in log and "BROKEN" not in log, log
    end = "checkpointed" if case.want == "TERM" else "done"
    assert f"\n{end}\n" in log and "srun-rc=0" in log, log


def test_plain_scancel_term_handler_writes_its_checkpoint(outcomes) -> None:
    log = outcomes["scancel"]
    assert "TERM ok" in log and "checkpointed" in log and "BROKEN" not in log, log
    assert "checkpoint squalltest" in log, log


def test_nothing_left_after_the_signal_cases(cluster: Cluster, outcomes) -> None:
    for node in cluster.nodes:
        assert wait_clean(cluster, node=node) == "", node


def start_container_step(cluster: Cluster, node: str, name: str, image: str) -> tuple[str, str]:
    """`srun --container-image=IMG sleep 300` on node, running: (job id, slurmstepd PID)."""
    cluster.run(f"setsid srun -N1 -w {node} -J {name} --container-image={image} sleep 300"
                " </dev/null >/dev/null 2>&1 &")
    jobid = wait_for(cluster, f"squeue -h -n {name} -o %i", f"job {name} queued")
    wait_for(cluster, "pgrep -u squall -x sleep", "the container step started", 60,
             node=node, user="root")
    assert "squashfuse" in cluster.run("pgrep -a -u squall", node=node, user="root").out
    stepd = wait_for(cluster, f"pgrep -f 'slurmstepd: \\[{jobid}\\.0\\]'",
                     "slurmstepd of the step", 10, node=node, user="root")
    return jobid, stepd


def test_slurmstepd_killed_under_a_running_container_leaves_nothing(
        cluster: Cluster, proctrack: str, image: str) -> None:
    """A crashed slurmstepd (SIGKILL) cannot stop its container or its tasks: the keeper
    ends the tasks left in it at once, and the container (kept for the job) with the job."""
    node = "node2"
    jobid, stepd = start_container_step(cluster, node, f"stepd-kill-{proctrack}", image)
    try:
        cluster.run(f"kill -KILL {stepd}", node=node, user="root")
        wait_for(cluster, "pgrep -u squall -x sleep >/dev/null || echo gone",
                 "the task in the container ended after its slurmstepd was killed", 30,
                 node=node, user="root")
    finally:
        cluster.run(f"scancel {jobid}", check=False)
    cluster.wait_job(jobid, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=120)
    assert wait_clean(cluster, node=node) == "", leftovers(cluster, node=node)


def test_job_epilog_ends_a_container_whose_step_and_keeper_are_gone(
        cluster: Cluster, proctrack: str, image: str) -> None:
    """slurmstepd killed while the keeper is stopped: only the job epilog is left to end
    the runtime and the step's orphaned task in the container."""
    node = "node3"
    jobid, stepd = start_container_step(cluster, node, f"epilog-{proctrack}", image)
    try:
        cluster.run(f"pkill -STOP -u squall -x squall-keeper && kill -KILL {stepd}", node=node,
                    user="root")
        time.sleep(2)
        assert "squashfuse" in leftovers(cluster, node=node)
    finally:
        cluster.run(f"scancel {jobid}", check=False)
    cluster.wait_job(jobid, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=120)
    assert wait_clean(cluster, node=node) == "", leftovers(cluster, node=node)
