"""The Slurm calls of a job's own supervisor (squall failover): node names, steps, node
state, drain, requeue, the config's timeouts.

Every call has a timeout (a hung slurmctld must not block the one process that has to
survive failures) and fails with one line naming the call and Slurm's reason
(``SlurmClientError``; ``SlurmUnavailable`` when the command is missing or did not
answer). ``scontrol show node`` is read by one parser, :func:`parse_node`, built on the
``Key=Value`` reader every other scontrol output of squall goes through.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from squall.slurm import command
from squall.slurm.base import SlurmClientError, SlurmUnavailable
from squall.slurm.cli_backend import parse_scontrol_line


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str                    # e.g. "ALLOCATED", "DOWN+NOT_RESPONDING"
    slurmd_started: float | None  # epoch seconds of SlurmdStartTime (None: unknown)

    @property
    def down(self) -> bool:
        """Slurm has given up on the node (DOWN) or no longer hears it (NOT_RESPONDING)."""
        return any(flag in self.state for flag in ("DOWN", "NOT_RESPONDING", "FAIL"))


def parse_node(text: str) -> NodeInfo | None:
    """The first node of ``scontrol show node --oneliner`` output (None: none)."""
    for line in text.splitlines():
        fields = parse_scontrol_line(line)
        if "NodeName" not in fields:
            continue
        started: float | None
        try:
            started = time.mktime(time.strptime(fields.get("SlurmdStartTime", ""),
                                                "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            started = None
        return NodeInfo(fields["NodeName"], fields.get("State", ""), started)
    return None


def parse_config_seconds(text: str) -> dict[str, int]:
    """The whole-number settings of ``scontrol show config`` ("SlurmdTimeout = 300 sec")."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        words = value.split()
        if words and words[0].isdigit():
            found[key.strip()] = int(words[0])
    return found


class SlurmControl:
    """The supervisor's one Slurm client: each call times out after ``timeout`` s."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout

    def _run(self, argv: Sequence[str]) -> str:
        proc = command.run(argv, self.timeout, f"{argv[0]} not found on PATH: the "
                           "supervisor runs in a Slurm job's batch shell")
        if proc.returncode != 0:
            raise SlurmClientError(f"{' '.join(argv[:3])} failed: {command.reason(proc)}")
        return proc.stdout or ""

    def hostnames(self, nodelist: str) -> list[str]:
        """``node[1-3]`` as names, in Slurm's node table order when it is a job's list."""
        return self._run(["scontrol", "show", "hostnames", nodelist]).split()

    def hostlist(self, names: Sequence[str]) -> str:
        """Names compressed as Slurm writes a node list (``node[1-2]``)."""
        return self._run(hostlist_argv(names)).strip()

    def steps(self, job: str) -> list[tuple[str, str]]:
        """(step id, step name) of every step of ``job`` Slurm knows."""
        out = self._run(["squeue", "--steps", f"--jobs={job}", "--noheader",
                         "--format=%i %j"])
        return [(p[0], p[1]) for p in (line.split() for line in out.splitlines())
                if len(p) == 2]

    def kill_step_async(self, step: str) -> subprocess.Popen[bytes]:
        """SIGKILL a step on every node at once; not waited for: scancel returns only when
        its RPC to a dead node has timed out (MessageTimeout), slurmctld signals the live
        nodes at once. The caller reaps it (:func:`reap`)."""
        try:
            return subprocess.Popen(["scancel", "--signal=KILL", step],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except FileNotFoundError:
            raise SlurmUnavailable("scancel not found on PATH: the supervisor runs in a "
                                   "Slurm job's batch shell") from None

    def node(self, name: str) -> NodeInfo | None:
        return parse_node(self._run(["scontrol", "show", "node", "--oneliner", name]))

    def drain(self, node: str, reason: str) -> None:
        self._run(["scontrol", "update", f"nodename={node}", "state=drain",
                   f"reason={reason}"[:200]])

    def requeue(self, job: str) -> None:
        self._run(["scontrol", "requeue", job])

    def config_seconds(self) -> dict[str, int]:
        return parse_config_seconds(self._run(["scontrol", "show", "config"]))


def reap(procs: list[subprocess.Popen[bytes]], wait: float = 0.0) -> list[subprocess.Popen[bytes]]:
    """The calls still running; with ``wait``, each is given that long, then killed."""
    if wait:
        for p in procs:
            try:
                p.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return [p for p in procs if p.poll() is None]


def hostlist_argv(names: Sequence[str]) -> list[str]:
    return ["scontrol", "show", "hostlist", ",".join(names)]
