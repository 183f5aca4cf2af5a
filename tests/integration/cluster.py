"""Drive the mini Slurm cluster (docker-compose.yml) from tests, through the Docker SDK.

Every helper here acts on the real cluster: commands run in the node containers, node
failures are real container kills, states come from Slurm itself.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

ROOT = Path(__file__).resolve().parents[2]
NODES = ("node1", "node2", "node3")
LOGIN = "login"
USER = "squall"
UID = 1000
# The cluster tier runs on several mini clusters side by side, one pytest-xdist worker
# each (the Makefile's CLUSTERS): worker gwN, N > 0, drives a cluster of its own, named,
# addressed and given an /fsx after the first one's (extra_cluster_env); gw0, and a
# process outside xdist, the first one. A test is still alone on its cluster.
SUBNET_STEP = 4


def worker_index() -> int:
    """This process's pytest-xdist worker number (gw1: 1); 0 outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def extra_cluster_env(index: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """SQUALL_CLUSTER, SQUALL_SUBNET and SQUALL_FSX of worker ``index``'s cluster, after
    the first cluster's in ``env`` (os.environ): NAME-wINDEX, the subnet's third number
    SUBNET_STEP * INDEX higher, /fsx in FSX-wINDEX."""
    env = dict(os.environ if env is None else env)
    name = env.get("SQUALL_CLUSTER", "squall")
    a, b, c = env.get("SQUALL_SUBNET", "10.203.47").split(".")
    fsx = env.get("SQUALL_FSX", str(ROOT / ".cluster" / "fsx"))
    return {"SQUALL_CLUSTER": f"{name}-w{index}",
            "SQUALL_SUBNET": f"{a}.{b}.{int(c) + SUBNET_STEP * index}",
            "SQUALL_FSX": f"{fsx}-w{index}"}
# Slurm's process tracking the session's cluster runs with (docs/cluster.md): cgroup by
# default, linuxproc when SQUALL_PROCTRACK says so; a test may switch (use_proctrack).
PROCTRACK_MODES = ("cgroup", "linuxproc")


def default_proctrack() -> str:
    return os.environ.get("SQUALL_PROCTRACK", "cgroup")


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"rc={self.rc}\n--- stdout ---\n{self.out}--- stderr ---\n{self.err}"


class ClusterError(AssertionError):
    """A cluster operation did not do what the test needed; the message says what."""


class Cluster:
    def __init__(self, fsx_host: Path) -> None:
        self.client = docker.from_env()
        # docker-compose.yml: SQUALL_CLUSTER prefixes the container and image names.
        self.name = os.environ.get("SQUALL_CLUSTER", "squall")
        self.fsx_host = fsx_host
        self.nodes = NODES
        self.login = LOGIN
        self.user = USER

    # -- containers -------------------------------------------------------------
    def container(self, node: str):
        return self.client.containers.get(f"{self.name}-{node}")

    def running(self) -> bool:
        """All four containers run, from the node image of the release under test."""
        release = os.environ.get("SQUALL_RELEASE", "trixie")
        try:
            image = self.client.images.get(f"{self.name}-node:{release}").id
            return all(self.container(n).status == "running" and self.container(n).image.id == image
                       for n in (LOGIN, *NODES))
        except docker.errors.NotFound:
            return False

    def serves_fsx(self) -> bool:
        """The login node's /fsx is fsx_host (not the /fsx of another checkout's run)."""
        try:
            mounts = self.container(LOGIN).attrs.get("Mounts") or []
        except docker.errors.NotFound:
            return False
        return any(m.get("Destination") == "/fsx"
                   and Path(m.get("Source", "")) == self.fsx_host.resolve() for m in mounts)

    def proctrack(self) -> str:
        """The process tracking the running containers were created with ("" if unknown)."""
        env = self.container(LOGIN).attrs["Config"].get("Env") or []
        return next((e.split("=", 1)[1] for e in env if e.startswith("SQUALL_PROCTRACK=")), "")

    def healthy(self, proctrack: str | None = None) -> bool:
        if not self.running() or self.proctrack() != (proctrack or default_proctrack()):
            return False
        res = self.run("sinfo -h -N -o '%N %t'", user="root", check=False, timeout=15)
        states = [line.split()[-1] for line in res.out.splitlines() if line.strip()]
        return res.rc == 0 and len(states) == 3 and all(
            s.rstrip("*") in {"idle", "mix", "alloc"} for s in states)

    # -- commands ---------------------------------------------------------------
    def run(self, cmd: str, node: str = LOGIN, user: str = USER, timeout: float = 120,
            check: bool = True, env: dict[str, str] | None = None) -> Result:
        """Run ``cmd`` with bash on ``node`` as ``user`` (a login shell's environment)."""
        argv = ["timeout", "-k", "5", str(int(timeout)), "bash", "-c", cmd]
        home = "/root" if user == "root" else f"/fsx/home/{user}"
        workdir = "/" if user == "root" else home
        environment = {"HOME": home, "USER": user}
        environment.update(env or {})
        rc, (out, err) = self.container(node).exec_run(
            argv, user=user, workdir=workdir, environment=environment, demux=True)
        res = Result(rc, (out or b"").decode(errors="replace"),
                     (err or b"").decode(errors="replace"))
        if rc == 124:
            raise ClusterError(f"timed out after {timeout}s on {node}: {cmd}\n{res}")
        if check and rc != 0:
            raise ClusterError(f"command failed on {node} as {user}: {cmd}\n{res}")
        return res

    def put(self, path: str, data: bytes | str, mode: int = 0o644, owner: int = UID) -> Path:
        """Write a file under /fsx (as seen on the nodes), owned by the test user."""
        if not path.startswith("/fsx/"):
            raise ValueError(f"put: {path!r} is not under /fsx")
        host = self.fsx_host / path[len("/fsx/"):]
        # Only the directories made here become the owner's: chowning existing parents
        # would hand root's /fsx/home or /fsx/squall to the test user.
        made = [p for p in [host.parent, *host.parent.parents]
                if p.is_relative_to(self.fsx_host) and p != self.fsx_host and not p.exists()]
        host.parent.mkdir(parents=True, exist_ok=True)
        for parent in made:
            os.chown(parent, owner, owner)
        tmp = host.with_name(host.name + ".tmp-put")
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        os.chown(tmp, owner, owner)
        os.chmod(tmp, mode)
        os.replace(tmp, host)
        return host

    def use_proctrack(self, mode: str) -> None:
        """Run the cluster with proctrack/MODE (cgroup or linuxproc): the containers are
        recreated with SQUALL_PROCTRACK=MODE when they run with another (jobs are lost,
        /fsx stays)."""
        if mode not in PROCTRACK_MODES:
            raise ValueError(f"proctrack {mode!r}: use one of {PROCTRACK_MODES}")
        if not self.healthy(mode):
            compose("up", proctrack=mode)

    # -- node failures ----------------------------------------------------------
    def kill_node(self, node: str) -> None:
        """Kill the whole node container (slurmd, slurmstepd, tasks): a dead node."""
        self.container(node).kill()

    def stop_node(self, node: str) -> None:
        self.container(node).stop(timeout=5)

    def start_node(self, node: str) -> None:
        self.container(node).start()

    def bring_back(self, node: str) -> None:
        """Boot a killed node again the way an admin does after a dead node: mark it DOWN
        first, then start it; it rejoins by itself (ReturnToService=2). A node whose job
        ended before Slurm noticed the death was not always set DOWN after that: CI saw
        one completing the dead part (MIXED*) for over 90 s, then not idle 240 s after
        its boot."""
        if self.node_state(node).rstrip("*") != "DOWN":
            self.run(f"scontrol update nodename={node} state=down "
                     "reason='killed by a test'", user="root", check=False, timeout=15)
        self.start_node(node)

    # -- Slurm state --------------------------------------------------------------
    def node_state(self, node: str) -> str:
        res = self.run(f"sinfo -h -n {node} -o %T", user="root", check=False, timeout=15)
        return res.out.strip().upper()

    def wait_node_state(self, node: str, states: Iterable[str], timeout: float = 60) -> str:
        wanted = {s.upper() for s in states}
        try:
            return self._wait(lambda: self.node_state(node).rstrip("*"), wanted, timeout,
                              f"node {node}")
        except ClusterError as exc:  # say what holds the node
            raise ClusterError(f"{exc}; jobs on {node}: {self.jobs_on(node) or 'none'}") \
                from None

    def wait_rejoined(self, node: str, timeout: float = 120) -> str:
        """A booted node whole again: IDLE (or drained). Slurm can go on counting an ended
        job's CPUs on a node it took out of that job shortly before the job ended: MIXED
        with no job on it, for minutes (CI: over 360 s). After 20 s of that, `scontrol
        reconfigure` (as an admin would) makes select/cons_tres count again from the jobs;
        a node still so at the end takes jobs all the same, and is returned as MIXED."""
        whole = {"IDLE", "DRAIN", "IDLE+DRAIN", "DRAINED"}
        start = time.monotonic()
        recounted = False
        while True:
            state = self.node_state(node).rstrip("*")
            if state in whole:
                return state
            stale = state == "MIXED" and not self.jobs_on(node)
            waited = time.monotonic() - start
            if stale and not recounted and waited > 20:
                self.run("scontrol reconfigure", user="root", check=False, timeout=30)
                recounted = True
            if waited > timeout:
                if stale:
                    return state
                raise ClusterError(f"node {node} did not rejoin within {timeout:.0f}s: "
                                   f"{state}; jobs on it: {self.jobs_on(node) or 'none'}")
            time.sleep(1)

    def jobs_on(self, node: str) -> str:
        return self.run(f"squeue -h -w {node} -o '%i %u %j %T %M'", user="root",
                        check=False, timeout=15).out.strip()

    def wait_in_service(self, node: str, timeout: float = 60) -> str:
        """The node takes jobs again (not DOWN, not drained): IDLE, or MIXED when another
        test's job shares it."""
        return self.wait_node_state(node, {"IDLE", "MIXED"}, timeout)

    def job_info(self, jobid: str | int) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (JobState, Restarts, NodeList, ...)."""
        res = self.run(f"scontrol show job -o {jobid}", user="root", check=False, timeout=15)
        info: dict[str, str] = {}
        for field in res.out.split():
            key, sep, value = field.partition("=")
            if sep:
                info.setdefault(key, value)
        return info

    def wait_job(self, jobid: str | int, states: Iterable[str], timeout: float = 120,
                 where: Callable[[dict[str, str]], bool] | None = None) -> dict[str, str]:
        """Wait until the job is in one of ``states`` (and ``where(info)`` holds)."""
        wanted = {s.upper() for s in states}
        last: dict[str, str] = {}

        def probe() -> str:
            nonlocal last
            last = self.job_info(jobid)
            state = last.get("JobState", "UNKNOWN")
            if where is not None and state in wanted and not where(last):
                return f"{state} (condition not met)"
            return state

        self._wait(probe, wanted, timeout, f"job {jobid}")
        return last

    def _wait(self, probe: Callable[[], str], wanted: set[str], timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            value = probe()
            if not seen or seen[-1] != value:
                seen.append(value)
            if value in wanted:
                return value
            if time.monotonic() > deadline:
                raise ClusterError(f"{what} did not reach {sorted(wanted)} within {timeout}s; "
                                   f"states seen: {' -> '.join(seen)}")
            time.sleep(0.5)

    def sbatch(self, script: str, args: str = "", node: str = LOGIN) -> str:
        """Submit ``script`` (its text) as the test user; returns the job id."""
        path = f"/fsx/home/{USER}/jobs/job-{time.time_ns()}.sh"
        self.put(path, script, mode=0o755)
        res = self.run(f"sbatch --parsable {args} {path}", node=node)
        return res.out.strip().split(";")[0]


def compose(*args: str, proctrack: str | None = None) -> None:
    env = dict(os.environ, SQUALL_PROCTRACK=proctrack or default_proctrack())
    subprocess.run(["bash", str(ROOT / "docker" / "cluster.sh"), *args], check=True, env=env)
