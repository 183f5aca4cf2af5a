"""The supervisor: run the step, watch the nodes, relaunch on a spare when one is lost.

It runs in the batch shell (``squall failover SPEC``, written by mksbatch for a recipe with
``spares`` or a ``failover`` section) on the batch host, which waits as the last spare so
that the node of rank 0 can die too. One attempt is one ``srun --overlap`` step on the
plan's active nodes, started from the newest complete checkpoint. An attempt ends when:

- the step exits 0: the job is done;
- a node's heartbeat is silent for ``detect_seconds``: that node is lost;
- no rank reports progress for ``hang_seconds``: the job is hung, and the nodes whose
  tasks are stopped (if any) are lost;
- the step exits non-zero with every node alive: the program failed; its status is the
  job's (the batch script's time-limit requeue sees it as before).

A lost node leaves the plan (drained where the user may, reported in the job log in any
case), a spare takes its place, the step is killed on every node at once (survivors are
not waited for), and the launcher starts again on the new node set. With no spare left, or
after ``max_restarts`` relaunches, the job is requeued as today; two relaunches in a row
that did not move the checkpoint forward stop the job.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from squall.errors import SquallError
from squall.failover.heartbeat import Watcher, agent_argv
from squall.failover.plan import Plan
from squall.failover.spec import TORCHRUN_LIKE, CheckpointSpec, Spec
from squall.mksbatch.checkpoints import newest_complete
from squall.mksbatch.recipe import Checkpoint

POLL = 0.5


def say(text: str) -> None:
    """One line in the job log (the batch script's stdout), as the script's own lines."""
    print(f"squall: failover: {text}", flush=True)


@dataclass
class Ended:
    how: str              # "exit", "lost", "hung"
    rc: int = 0
    lost: tuple[str, ...] = ()
    silent: float = 0.0   # seconds the lost node had been silent when it was judged lost


def hostnames(nodelist: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise SquallError(f"scontrol show hostnames {nodelist} failed: "
                          f"{out.stderr.strip() or out.returncode}")
    return out.stdout.split()


def newest(ck: CheckpointSpec | None) -> str | None:
    if ck is None:
        return None
    return newest_complete(Checkpoint(dir=ck.dir, resume=ck.resume, complete_marker=ck.marker,
                                      pattern=ck.pattern, newest_by=ck.newest_by))


class Supervisor:
    def __init__(self, spec: Spec, job: str, allocation: list[str], batch_host: str) -> None:
        self.spec = spec
        self.job = job
        self.plan = Plan.initial(allocation, spec.nodes, batch_host)
        self.dir = Path(spec.heartbeat_dir or f"/tmp/squall-failover-{job}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.watch = Watcher(self.dir)
        self.agent: subprocess.Popen[bytes] | None = None
        self.reaping: list[subprocess.Popen[bytes]] = []  # scancels still talking
        self.attempt = 0

    # -- the steps ------------------------------------------------------------------------
    def start_agent(self) -> None:
        nodes = [*self.plan.active, *self.plan.spares]
        argv = agent_argv(str(self.dir), nodes, f"squall-heartbeat-{self.attempt}")
        argv.insert(1, "--no-kill")
        self.agent = subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def warm_spares(self) -> None:
        """A step on the spares that starts the container (and so the node-local copy of
        the image), so that a relaunch there starts at later-step speed."""
        if not self.plan.spares or not self.spec.container_args:
            return
        spares = list(self.plan.spares)
        subprocess.Popen(["srun", "--overlap", "--job-name=squall-warm-spares",
                          f"--nodes={len(spares)}", f"--ntasks={len(spares)}",
                          "--ntasks-per-node=1", f"--nodelist={','.join(spares)}", "--quiet",
                          *self.spec.container_args, "/bin/sh", "-c", ":"],
                         stdin=subprocess.DEVNULL)
        say(f"spares {','.join(spares)} warmed with the image (a container step)")

    def hostfile(self) -> Path:
        """Rank order as the plan says (rank 0 on active[0]): Slurm itself would order the
        tasks by its node table, whatever --nodelist says (``--distribution=arbitrary``
        reads this file instead)."""
        per_node = 1 if self.spec.launcher in TORCHRUN_LIKE else self.spec.tasks_per_node
        path = self.dir / f"hosts.{self.attempt}"
        path.write_text("".join(f"{n}\n" * per_node for n in self.plan.active))
        return path

    def main_argv(self, resume: str | None) -> list[str]:
        s, nodes = self.spec, list(self.plan.active)
        per_node = 1 if s.launcher in TORCHRUN_LIKE else s.tasks_per_node
        argv = ["srun", "--overlap", f"--job-name=squall-main-{self.attempt}",
                f"--ntasks={len(nodes) * per_node}", "--distribution=arbitrary",
                *s.srun_args, *s.container_args]
        if s.launcher in TORCHRUN_LIKE:
            argv += [s.launcher, f"--nnodes={len(nodes)}", f"--nproc-per-node={s.nproc_per_node}",
                     "--rdzv-backend=c10d", f"--rdzv-endpoint={nodes[0]}:{self.port()}",
                     f"--rdzv-id=squall-{self.job}-{self.attempt}"]
        elif s.launcher == "mpirun":
            argv = ["mpirun", "--host", ",".join(f"{n}:{s.tasks_per_node}" for n in nodes)]
        words = list(s.command)
        if resume is not None and s.checkpoint is not None:
            words += [w.replace("{checkpoint}", resume) for w in s.checkpoint.resume]
        return argv + words

    def port(self) -> int:
        """Rank 0's port: per job, and a new one each attempt (the last attempt's may
        still be in TIME_WAIT on rank 0's node)."""
        return self.spec.port_base + (int(self.job) % 100) * 10 + self.attempt % 10

    def kill_steps(self, prefix: str, wait: bool = False) -> None:
        """SIGKILL every step of this job whose name starts with ``prefix``, on every node
        at once: survivors are not waited for. scancel itself is not waited for either
        (unless ``wait``): slurmctld signals the live nodes at once, but scancel returns
        only when the RPC to a dead node has timed out (MessageTimeout, 10 s by default)."""
        out = subprocess.run(["squeue", "--steps", f"--jobs={self.job}", "--noheader",
                              "--format=%i %j"], capture_output=True, text=True, check=False)
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].startswith(prefix):
                proc = subprocess.Popen(["scancel", "--signal=KILL", parts[0]],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                self.reaping.append(proc)
        self.reaping = [p for p in self.reaping if p.poll() is None]
        if wait:
            for p in self.reaping:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()

    # -- one attempt ----------------------------------------------------------------------
    def run_attempt(self, resume: str | None) -> Ended:
        env = dict(os.environ, MASTER_ADDR=self.plan.active[0], MASTER_PORT=str(self.port()),
                   SLURM_HOSTFILE=str(self.hostfile()),
                   SQUALL_PROGRESS_FILE=str(self.dir / "progress.{rank}"),
                   SQUALL_FAILOVER_ATTEMPT=str(self.attempt))
        # Progress starts afresh: the last attempt's (or the last run's) counts would
        # otherwise stand for this attempt's until its ranks report.
        for old in self.dir.glob("progress.*"):
            old.unlink(missing_ok=True)
        self.watch.progress.clear()
        main = subprocess.Popen(self.main_argv(resume), env=env, stdin=subprocess.DEVNULL)
        self.watch.started = time.monotonic()
        try:
            return self._watch(main)
        finally:
            if main.poll() is None:
                t = time.monotonic()
                main.kill()
                self.kill_steps(f"squall-main-{self.attempt}")
                main.wait()
                say(f"attempt {self.attempt} killed on every node in "
                    f"{time.monotonic() - t:.1f} s")

    def _watch(self, main: subprocess.Popen[bytes]) -> Ended:
        s = self.spec
        exited_at: float | None = None
        rc = 0
        told = self.attempt == 0
        while True:
            time.sleep(POLL)
            nodes = [*self.plan.active, *self.plan.spares]
            self.watch.poll(nodes)
            if not told and self.watch.progressed_since(self.watch.started + POLL):
                told = True
                say(f"attempt {self.attempt}: the ranks report progress again "
                    f"{time.monotonic() - self.watch.started:.1f} s after its start")
            if self.agent is not None and self.agent.poll() is not None:
                self.start_agent()  # it ended (a node of it lost): again on the others
            dead_spares = {n for n in self.plan.spares if self.watch.silent(n) > s.detect_seconds}
            if dead_spares:
                say(f"spare {','.join(sorted(dead_spares))} lost (no heartbeat for "
                    f"{s.detect_seconds:.0f} s): it will not be used")
                self.plan = self.plan.drop_spares(dead_spares)
            lost = [n for n in self.plan.active if self.watch.silent(n) > s.detect_seconds]
            if lost:
                return Ended("lost", lost=tuple(lost),
                             silent=max(self.watch.silent(n) for n in lost))
            if s.hang_seconds and self.watch.idle() > s.hang_seconds and exited_at is None:
                frozen = tuple(n for n in self.plan.active if self.watch.stopped(n))
                return Ended("hung", lost=frozen, silent=self.watch.idle())
            if exited_at is None:
                code = main.poll()
                if code is None:
                    continue
                rc, exited_at = code, time.monotonic()
                if rc == 0:
                    return Ended("exit", 0)
            # a failed step: was it a node? wait for the heartbeats to tell
            if time.monotonic() - exited_at > s.detect_seconds + 2 * POLL:
                return Ended("exit", rc)

    # -- the job --------------------------------------------------------------------------
    def run(self) -> int:
        s = self.spec
        say(f"running on {','.join(self.plan.active)}; spares: "
            f"{','.join(self.plan.spares) or 'none'}; a node silent {s.detect_seconds:.0f} s "
            f"is lost" + (f", no progress for {s.hang_seconds:.0f} s is a hang"
                          if s.hang_seconds else ""))
        self.start_agent()
        self.warm_spares()
        stuck = 0
        previous: str | None = None
        try:
            while True:
                resume = newest(s.checkpoint)
                if self.attempt:
                    say(f"attempt {self.attempt} on {','.join(self.plan.active)} from "
                        f"{resume or 'the beginning'}")
                ended = self.run_attempt(resume)
                if ended.how == "exit":
                    return ended.rc
                at = time.monotonic()
                what = (f"node {','.join(ended.lost)} lost: no heartbeat for "
                        f"{ended.silent:.1f} s" if ended.how == "lost" else
                        f"no progress for {ended.silent:.1f} s (hung)" +
                        (f"; tasks stopped on {','.join(ended.lost)}" if ended.lost else ""))
                say(f"{what}; step killed on every node")
                for node in ended.lost:
                    self.drain(node, what)
                now = newest(s.checkpoint)
                done = self.watch.steps_done()
                lost_steps = steps_lost(done, now)
                if lost_steps is not None:
                    say(f"steps lost: {lost_steps} (done {done}, "
                        f"resuming from {now or 'the beginning'})")
                stuck = stuck + 1 if self.attempt and now == previous else 0
                previous = now
                if stuck >= 2:
                    say(f"{stuck} relaunches in a row resumed from {now or 'the beginning'} "
                        "and never moved the checkpoint forward: stopping the job (fix the "
                        "program or the nodes, then resubmit)")
                    return 1
                plan = self.plan.replace(set(ended.lost)) if ended.lost else self.plan
                if plan is None and s.elastic:
                    plan = self.plan.shrink(set(ended.lost), s.min_nodes)
                    if plan is not None:
                        say(f"no spare left: going on with {len(plan.active)} nodes "
                            f"(failover.elastic, min_nodes {s.min_nodes})")
                if plan is None or self.attempt + 1 > s.max_restarts:
                    why = ("no spare left" if plan is None else
                           f"failover.max_restarts={s.max_restarts} reached")
                    return self.requeue(why, ended.lost, time.time() - ended.silent - 1)
                self.plan = plan
                self.attempt += 1
                say(f"relaunching on {','.join(plan.active)} "
                    f"{time.monotonic() - at:.1f} s after detection; spares left: "
                    f"{','.join(plan.spares) or 'none'}")
        finally:
            if self.agent is not None:
                self.agent.kill()
            self.kill_steps("squall-heartbeat")
            self.kill_steps("squall-warm", wait=True)

    def wait_down(self, lost: tuple[str, ...], since: float) -> None:
        """Wait until Slurm has given up on each lost node (DOWN) or its slurmd came back.

        A requeue kills the job on every node; slurmctld queues that kill for a node it
        has not yet marked DOWN and delivers it when the node answers again, by job id:
        the requeued run, on that node by then, was killed (seen on the mini cluster)."""
        if not lost:
            return
        config = slurm_seconds()
        limit = time.monotonic() + config.get("SlurmdTimeout", 300) + \
            2 * config.get("MessageTimeout", 10) + 10
        say(f"waiting for Slurm to set {','.join(lost)} DOWN before the requeue")
        pending = set(lost)
        while pending and time.monotonic() < limit:
            pending = {n for n in pending if not node_settled(n, since)}
            if pending:
                time.sleep(1)
        if pending:
            say(f"Slurm still counts {','.join(sorted(pending))} as up: requeueing anyway")

    def drain(self, node: str, why: str) -> None:
        proc = subprocess.run(["scontrol", "update", f"nodename={node}", "state=drain",
                               f"reason=squall job {self.job}: {why}"[:200]],
                              capture_output=True, text=True, check=False)
        say(f"node {node} drained" if proc.returncode == 0 else
            f"node {node} left in its state (draining it needs an admin): {why}")

    def requeue(self, why: str, lost: tuple[str, ...] = (), lost_at: float = 0.0) -> int:
        self.wait_down(lost, lost_at)
        proc = subprocess.run(["scontrol", "requeue", self.job], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            say(f"{why}, and scontrol requeue failed ({proc.stderr.strip()}): the job ends "
                "here; resubmit it to continue")
            return 1
        say(f"{why}: job {self.job} requeued")
        return 0


def steps_lost(done: int | None, checkpoint: str | None) -> int | None:
    """Steps to do again: those the ranks reported done, less those the checkpoint holds
    (the last number in its name, as ckpt-000020 after 20 steps); None when unknown."""
    if done is None:
        return None
    if checkpoint is None:
        return done
    digits = re.findall(r"\d+", os.path.basename(checkpoint.rstrip("/")))
    return max(done - int(digits[-1]), 0) if digits else None


def slurm_seconds() -> dict[str, int]:
    """The whole-number settings of ``scontrol show config`` ("SlurmdTimeout = 300 sec"),
    read once."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                         check=False).stdout
    found: dict[str, int] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        words = value.split()
        if words and words[0].isdigit():
            found[key.strip()] = int(words[0])
    return found


def node_settled(node: str, since: float) -> bool:
    """Slurm has set ``node`` DOWN, or its slurmd started after ``since`` (epoch s)."""
    out = subprocess.run(["scontrol", "show", "node", "--oneliner", node],
                         capture_output=True, text=True, check=False).stdout
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    if "DOWN" in fields.get("State", ""):
        return True
    started = fields.get("SlurmdStartTime", "")
    try:
        return time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S")) > since
    except ValueError:
        return False


def main(spec_text: str) -> int:
    spec = Spec.from_json(spec_text)
    job = os.environ.get("SLURM_JOB_ID", "")
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not job or not nodelist:
        raise SquallError("squall failover runs inside a Slurm job (SLURM_JOB_ID and "
                          "SLURM_JOB_NODELIST are not set): submit the mksbatch script")
    allocation = hostnames(nodelist)
    if len(allocation) < spec.nodes:
        raise SquallError(f"the job has {len(allocation)} nodes, fewer than the "
                          f"{spec.nodes} the step needs")
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    return Supervisor(spec, job, allocation, host).run()
