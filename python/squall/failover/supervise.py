"""The supervisor: run the step, watch the nodes, relaunch on a spare when one is lost.

It runs in the batch shell (``squall failover SPEC``, written by mksbatch for a recipe with
``spares`` or a ``failover`` section) on the batch host, which waits as the last spare so
that the node of rank 0 can die too. One attempt is one step on the plan's active nodes
(``launch.py``: Slurm's own rank order, ``MASTER_ADDR`` on rank 0's node), started from the
newest complete checkpoint. What it sees is judged by the pure decisions of ``decide.py``;
this module only looks and acts: heartbeats and progress (``heartbeat.py``), the lines
ranks append to ``$SQUALL_PEER_LOST_FILE``, the tasks srun reports dead, and every Slurm
call through ``squall.slurm.control`` (timeouts, one-line errors).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

from squall.errors import SquallError
from squall.failover import launch
from squall.failover.decide import ANY, Course, Look, Settings, Verdict, after, judge
from squall.failover.heartbeat import Watcher, agent_argv
from squall.failover.plan import Plan
from squall.failover.spec import CheckpointSpec, Spec
from squall.newest_checkpoint import newest_complete
from squall.slurm.base import SlurmClientError
from squall.slurm.control import SlurmControl, reap

POLL = 0.25
HEARTBEAT_POLL = 1.0  # the heartbeat files are looked at once a second (they change so)
# the launcher saw a task or a node die: srun's line for a task that ended badly, Open
# MPI's (5: PRTE, 4: ORTE) for a lost daemon or a rank killed (prterun then exits 0)
TASK_DIED = re.compile(r"srun: error: \S+: tasks? [\d,-]+: (Exited with exit code|Killed|"
                       r"Terminated|Segmentation)|[PO]RTE has lost communication with a "
                       r"remote daemon|noticed that process rank \d+ .* exited on signal")


# srun's own failure to start a step, before any task ran: Slurm's, not the program's
# (slurmctld too busy to answer within MessageTimeout after a node died, on the scale
# cluster). Tried again LAUNCH_TRIES times, LAUNCH_RETRY_S, then twice that, ... apart.
LAUNCH_FAILED = re.compile(r"srun: error: Unable to (confirm allocation|create step) for job")
LAUNCH_TRIES = 3
LAUNCH_RETRY_S = 2.0


def say(text: str) -> None:
    """One line in the job log (the batch script's stdout), as the script's own lines."""
    print(f"squall: failover: {text}", flush=True)


def newest(ck: CheckpointSpec | None) -> str | None:
    return None if ck is None else newest_complete(ck.dir, ck.pattern, ck.marker, ck.newest_by)


def named_nodes(line: str, nodes: tuple[str, ...]) -> set[str]:
    """The step's nodes a report names (ANY when it names none)."""
    words = set(re.split(r"[^A-Za-z0-9_.-]+", line))
    return {n for n in nodes if n in words} or {ANY}


class Reports:
    """Lines appended to the peer-lost file, and tasks srun said died."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.task_died = threading.Event()
        self.launch_error = ""  # srun's line when it could not start the step

    def new(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(65536)
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        fresh = (ln.decode(errors="replace").strip() for ln in data[:end].splitlines())
        return [ln for ln in fresh if ln]

    def forward(self, stream: IO[bytes]) -> None:
        """srun's stderr to ours, line by line, noting tasks that died."""
        for raw in stream:
            line = raw.decode(errors="replace")
            sys.stderr.write(line)
            sys.stderr.flush()
            if TASK_DIED.search(line):
                self.task_died.set()
            elif not self.launch_error and LAUNCH_FAILED.search(line):
                self.launch_error = line.strip()


class Supervisor:
    def __init__(self, spec: Spec, job: str, allocation: list[str], batch_host: str,
                 control: SlurmControl | None = None) -> None:
        self.spec = spec
        self.job = job
        self.allocation = allocation
        self.slurm = control or SlurmControl()
        self.quick = SlurmControl(timeout=2.0)  # confirmations: never worth a long wait
        self.settings = Settings(detect_seconds=spec.detect_seconds,
                                 hang_seconds=spec.hang_seconds,
                                 max_restarts=spec.max_restarts, elastic=spec.elastic,
                                 min_nodes=spec.min_nodes)
        self.course = Course(Plan.initial(allocation, spec.nodes, batch_host))
        self.dir = Path(spec.heartbeat_dir or f"/tmp/squall-failover-{job}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.watch = Watcher(self.dir, every=HEARTBEAT_POLL, read_nodes=spec.hang_seconds > 0)
        self.agent: subprocess.Popen[bytes] | None = None
        self.reaping: list[subprocess.Popen[bytes]] = []  # scancels still talking
        self.launch_error = ""  # the last attempt's, when srun could not start it

    @property
    def plan(self) -> Plan:
        return self.course.plan

    @property
    def attempt(self) -> int:
        return self.course.attempt

    def nodes(self) -> list[str]:
        """The step's nodes in Slurm's order: rank 0's first."""
        return launch.slurm_order(self.plan.active, self.allocation)

    # -- the steps ------------------------------------------------------------------------
    def start_agent(self) -> None:
        nodes = [*self.plan.active, *self.plan.spares]
        argv = agent_argv(str(self.dir), nodes, f"squall-heartbeat-{self.attempt}",
                          count_stopped=self.spec.hang_seconds > 0)
        argv.insert(1, "--no-kill")
        self.agent = subprocess.Popen(argv, stdin=subprocess.DEVNULL)

    def warm_spares(self) -> None:
        """A step on the spares that starts the container (and so the node-local copy of
        the image), so that a relaunch there starts at later-step speed."""
        if not self.plan.spares or not self.spec.container_args:
            return
        spares = list(self.plan.spares)
        subprocess.Popen(launch.warm_argv(spares, self.spec.container_args),
                         stdin=subprocess.DEVNULL)
        say(f"spares {','.join(spares)} warmed with the image (a container step)")

    def kill_steps(self, prefix: str, wait: bool = False) -> None:
        """SIGKILL every step of this job whose name starts with ``prefix``, on every node
        at once: survivors are not waited for, nor scancel (unless ``wait``)."""
        try:
            steps = self.slurm.steps(self.job)
        except SlurmClientError as e:
            say(f"cannot list the job's steps to kill {prefix}*: {e}")
            steps = []
        for step, name in steps:
            if name.startswith(prefix):
                self.reaping.append(self.slurm.kill_step_async(step))
        self.reaping = reap(self.reaping, wait=30 if wait else 0)

    # -- one attempt ----------------------------------------------------------------------
    def run_attempt(self, resume: str | None) -> Verdict:
        nodes = self.nodes()
        env = launch.step_env(os.environ, self.spec, self.job, self.attempt, nodes, self.dir)
        reports = Reports(launch.peer_lost_file(self.dir, self.attempt))
        # Progress starts afresh: the last attempt's counts would otherwise stand for
        # this attempt's until its ranks report.
        for old in self.dir.glob("progress.*"):
            old.unlink(missing_ok=True)
        self.watch.progress.clear()
        argv = launch.main_argv(self.spec, self.job, self.attempt, nodes,
                                self.slurm.hostlist(nodes), resume)
        main = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert main.stderr is not None
        threading.Thread(target=reports.forward, args=(main.stderr,), daemon=True).start()
        self.watch.started = time.monotonic()
        try:
            return self._watch(main, reports)
        finally:
            self.launch_error = reports.launch_error
            if main.poll() is None:
                t = time.monotonic()
                main.kill()
                for name in launch.step_names(self.spec, self.attempt):
                    self.kill_steps(name)
                main.wait()
                say(f"attempt {self.attempt} killed on every node in "
                    f"{time.monotonic() - t:.1f} s")

    def _look(self, main: subprocess.Popen[bytes], reports: Reports, heard: set[str],
              exited_at: float | None, down: frozenset[str]) -> Look:
        nodes = [*self.plan.active, *self.plan.spares]
        self.watch.poll(nodes)
        for line in reports.new():
            say(f"a rank reports: {line[:160]}")
            heard |= named_nodes(line, self.plan.active)
        if reports.task_died.is_set():
            heard.add(ANY)
        rc = main.poll()
        return Look(silent={n: self.watch.silent(n) for n in nodes}, idle=self.watch.idle(),
                    stopped={n: self.watch.stopped(n) for n in self.plan.active},
                    exited=rc, exited_for=0.0 if exited_at is None else
                    time.monotonic() - exited_at, reports=frozenset(heard), down=down)

    def _watch(self, main: subprocess.Popen[bytes], reports: Reports) -> Verdict:
        told = self.attempt == 0
        heard: set[str] = set()
        down: frozenset[str] = frozenset()
        exited_at: float | None = None
        asked = 0.0
        stalled = False
        while True:
            time.sleep(POLL)
            if exited_at is None and main.poll() is not None:
                exited_at = time.monotonic()
            look = self._look(main, reports, heard, exited_at, down)
            if not told and self.watch.progressed_since(self.watch.started + POLL):
                told = True
                say(f"attempt {self.attempt}: the ranks report progress again "
                    f"{time.monotonic() - self.watch.started:.1f} s after its start")
            if self.agent is not None and self.agent.poll() is not None:
                self.start_agent()  # it ended (a node of it lost): again on the others
            verdict = judge(self.plan, look, self.settings)
            if verdict.stalled and not stalled:
                say(f"every heartbeat silent for {verdict.stalled:.0f} s: this node or the "
                    "shared file system stalls; no node is judged lost by its silence "
                    "until one beats again (or Slurm counts it down)")
            stalled = verdict.stalled > 0
            if verdict.spares_lost:
                say(f"spare {','.join(verdict.spares_lost)} lost (no heartbeat for "
                    f"{self.spec.detect_seconds:.0f} s): it will not be used")
                self.course = replace(self.course,
                                      plan=self.plan.drop_spares(set(verdict.spares_lost)))
            if verdict.how != "running":
                return verdict
            if verdict.confirm and time.monotonic() - asked > 1.0:
                asked = time.monotonic()
                down = frozenset(self._down(verdict.confirm))

    def _down(self, nodes: tuple[str, ...]) -> set[str]:
        """Which of ``nodes`` Slurm already counts as down (a confirmation; errors are
        not: the heartbeats still decide)."""
        found = set()
        for n in nodes:
            try:
                info = self.quick.node(n)
            except SlurmClientError:
                continue
            if info is not None and info.down:
                found.add(n)
        return found

    # -- the job --------------------------------------------------------------------------
    def run(self) -> int:
        s = self.spec
        say(f"running on {','.join(self.nodes())}; spares: "
            f"{','.join(self.plan.spares) or 'none'}; a node silent {s.detect_seconds:.0f} s "
            f"(or reported lost and silent {self.settings.confirm_seconds:.0f} s) is lost" +
            (f", no progress for {s.hang_seconds:.0f} s is a hang" if s.hang_seconds else ""))
        self.start_agent()
        self.warm_spares()
        tries = 0
        try:
            while True:
                resume = newest(s.checkpoint)
                if self.attempt and not tries:
                    say(f"attempt {self.attempt} on {','.join(self.nodes())} from "
                        f"{resume or 'the beginning'}")
                verdict = self.run_attempt(resume)
                at = time.monotonic()
                if verdict.how == "exit" and verdict.rc != 0 and self.launch_error:
                    if tries < LAUNCH_TRIES:
                        tries += 1
                        wait = LAUNCH_RETRY_S * 2 ** (tries - 1)
                        say(f"attempt {self.attempt}: srun could not start the step "
                            f"({self.launch_error[:160]}); trying again in {wait:.0f} s "
                            f"({tries} of {LAUNCH_TRIES})")
                        time.sleep(wait)
                        continue
                    say(f"attempt {self.attempt}: srun could not start the step; gave up "
                        f"after {tries} more tries")
                tries = 0
                if verdict.how != "exit":
                    self.report(verdict)
                decision = after(self.course, verdict, newest(s.checkpoint), self.settings)
                self.course = decision.course
                if decision.what == "done":
                    return decision.rc
                if decision.what == "stop":
                    say(decision.why)
                    return 1
                if decision.what == "requeue":
                    return self.requeue(decision.why, verdict.nodes,
                                        time.time() - verdict.silent - 1)
                if decision.what == "shrink":
                    say(f"no spare left: going on with {len(self.plan.active)} nodes "
                        f"(failover.elastic, min_nodes {s.min_nodes})")
                say(f"relaunching on {','.join(self.nodes())} "
                    f"{time.monotonic() - at:.1f} s after detection; spares left: "
                    f"{','.join(self.plan.spares) or 'none'}")
        finally:
            if self.agent is not None:
                self.agent.kill()
            self.kill_steps("squall-heartbeat")
            self.kill_steps("squall-warm", wait=True)

    def report(self, verdict: Verdict) -> None:
        what = (f"node {','.join(verdict.nodes)} lost: {verdict.why}" if verdict.how == "lost"
                else verdict.why)
        say(f"{what}; step killed on every node")
        for node in verdict.nodes:
            self.drain(node, what)
        now = newest(self.spec.checkpoint)
        done = self.watch.steps_done()
        lost_steps = steps_lost(done, now)
        if lost_steps is not None:
            say(f"steps lost: {lost_steps} (done {done}, resuming from "
                f"{now or 'the beginning'})")

    def wait_down(self, lost: tuple[str, ...], since: float) -> None:
        """Wait until Slurm has given up on each lost node (DOWN) or its slurmd came back.

        A requeue kills the job on every node; slurmctld queues that kill for a node it
        has not yet marked DOWN and delivers it when the node answers again, by job id:
        the requeued run, on that node by then, was killed (seen on the mini cluster)."""
        if not lost:
            return
        try:
            config = self.slurm.config_seconds()
        except SlurmClientError as e:
            say(f"cannot read Slurm's timeouts ({e}): waiting as for the defaults")
            config = {}
        limit = time.monotonic() + config.get("SlurmdTimeout", 300) + \
            2 * config.get("MessageTimeout", 10) + 10
        say(f"waiting for Slurm to set {','.join(lost)} DOWN before the requeue")
        pending = set(lost)
        while pending and time.monotonic() < limit:
            pending = {n for n in pending if not node_settled(self.slurm, n, since)}
            if pending:
                time.sleep(1)
        if pending:
            say(f"Slurm still counts {','.join(sorted(pending))} as up: requeueing anyway")

    def drain(self, node: str, why: str) -> None:
        try:
            self.slurm.drain(node, f"squall job {self.job}: {why}")
            say(f"node {node} drained")
        except SlurmClientError:
            say(f"node {node} left in its state (draining it needs an admin): {why}")

    def requeue(self, why: str, lost: tuple[str, ...] = (), lost_at: float = 0.0) -> int:
        self.wait_down(lost, lost_at)
        try:
            self.slurm.requeue(self.job)
        except SlurmClientError as e:
            say(f"{why}, and the requeue failed ({e}): the job ends here; resubmit it to "
                "continue")
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


def node_settled(slurm: SlurmControl, node: str, since: float) -> bool:
    """Slurm has set ``node`` DOWN, or its slurmd started after ``since`` (epoch s)."""
    try:
        info = slurm.node(node)
    except SlurmClientError:
        return False
    if info is None:
        return False
    return "DOWN" in info.state or (info.slurmd_started or 0) > since


def slurm_timeout(text: str) -> float:
    """SQUALL_SLURM_TIMEOUT: seconds each Slurm call may take (default 10)."""
    if not text:
        return 10.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise SquallError(f"SQUALL_SLURM_TIMEOUT={text!r} is not a number of seconds above "
                          "0: set it to e.g. 10, or unset it")
    return seconds


def main(spec_text: str) -> int:
    spec = Spec.from_json(spec_text)
    job = os.environ.get("SLURM_JOB_ID", "")
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not job or not nodelist:
        raise SquallError("squall failover runs inside a Slurm job (SLURM_JOB_ID and "
                          "SLURM_JOB_NODELIST are not set): submit the mksbatch script")
    control = SlurmControl(timeout=slurm_timeout(os.environ.get("SQUALL_SLURM_TIMEOUT", "")))
    allocation = control.hostnames(nodelist)
    if len(allocation) < spec.nodes:
        raise SquallError(f"the job has {len(allocation)} nodes, fewer than the "
                          f"{spec.nodes} the step needs")
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    return Supervisor(spec, job, allocation, host, control).run()
