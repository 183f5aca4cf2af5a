"""Node heartbeats and program progress, as the supervisor sees them.

Each node of the job runs a small agent (:func:`agent_argv`: a shell loop in its own
``srun --overlap`` step, outside any container) that rewrites ``<dir>/node.<NAME>`` in
place every second with a counter and how many of the job user's processes on the node are stopped
(state T: a frozen task). The program may report progress by touching
``$SQUALL_PROGRESS_FILE`` (``<dir>/progress.<rank>``) after each step. The supervisor
judges both by when it saw a file *change*, on its own monotonic clock, so no node's clock
or a shared filesystem's timestamps matter.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

AGENT = (
    # the job's signals (time limit, scancel --signal) are the program's, not the agent's
    'trap "" USR1 USR2 TERM INT HUP; n=0; f="$0/node.$SLURMD_NODENAME"; '
    'while :; do n=$((n + 1)); s=0; '
    # stopped tasks of the step (they carry SQUALL_FAILOVER_ATTEMPT): not the plugin's
    # own stopped holders, nor anything else of the user's. Only when hangs are watched
    # ($1): a look at every process of the node each second is not free (on the scale
    # cluster, whose nodes share one /proc, 65 agents took the two CPUs from slurmctld).
    '[ -n "$1" ] && for p in /proc/[0-9]*; do [ -O "$p" ] || continue; '
    # 2>/dev/null first: a process gone since the glob is no line in the job's log
    'read -r _ _ st _ 2>/dev/null < "$p/stat" || continue; [ "$st" = T ] || continue; '
    'tr "\\0" "\\n" 2>/dev/null < "$p/environ" | grep -q "^SQUALL_FAILOVER_ATTEMPT=" '
    '&& s=$((s + 1)); done; '
    # one open of the file, rewritten in place (no temporary file, no rename: one path
    # on /fsx a beat, not seven), at a fixed width so that no old byte is left
    'printf "%012d %06d\\n" "$n" "$s" 1<>"$f"; sleep 1; done'
)


def agent_argv(directory: str, nodes: list[str], name: str,
               count_stopped: bool = True) -> list[str]:
    """The srun command line of the heartbeat agents on ``nodes`` (one task a node);
    ``count_stopped``: each beat also counts the step's stopped tasks (hang detection)."""
    return ["srun", "--overlap", f"--job-name={name}", f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(nodes)}",
            "--kill-on-bad-exit=0", "--quiet", "sh", "-c", AGENT, directory,
            "stopped" if count_stopped else ""]


@dataclass
class Seen:
    content: bytes = b""
    changed: float = 0.0  # monotonic time of the last change we saw
    key: tuple[int, int, int] = (0, 0, 0)  # inode, mtime, size: a change is a new key


@dataclass
class Watcher:
    """When each node's heartbeat and the program's progress last changed."""

    directory: Path
    started: float = field(default_factory=time.monotonic)
    nodes: dict[str, Seen] = field(default_factory=dict)
    progress: dict[str, Seen] = field(default_factory=dict)
    # At most one look every `every` s (the agents beat once a second), each a stat per
    # file; a node's file is read only when it changed and `read_nodes` (its count of
    # stopped tasks matters to hang detection alone). The supervisor of a 1,000-node job
    # then costs the file system about 1,000 stats a second, not 4,000 stats and 4,000
    # opens and reads (bench/results/failover-scale.md).
    every: float = 0.0
    read_nodes: bool = True
    _polled: float = -1e9

    def _look(self, path: Path, seen: Seen, now: float, read: bool) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == seen.key:
            return
        seen.key, seen.changed = key, now
        if read:
            try:
                with open(path, "rb") as f:
                    seen.content = f.read(256)
            except OSError:
                pass

    def poll(self, nodes: list[str]) -> None:
        now = time.monotonic()
        if now - self._polled < self.every:
            return
        self._polled = now
        for n in nodes:
            self._look(self.directory / f"node.{n}",
                       self.nodes.setdefault(n, Seen(changed=self.started)), now,
                       self.read_nodes)
        try:
            names = [p for p in os.listdir(self.directory) if p.startswith("progress.")]
        except OSError:
            names = []
        for name in names:
            self._look(self.directory / name,
                       self.progress.setdefault(name, Seen(changed=self.started)), now, True)

    def silent(self, node: str) -> float:
        """Seconds since ``node``'s heartbeat last changed (since the watch began, when
        it never came)."""
        seen = self.nodes.get(node)
        return time.monotonic() - (seen.changed if seen else self.started)

    def stopped(self, node: str) -> int:
        """How many processes of the job's user the node's agent last saw stopped."""
        seen = self.nodes.get(node)
        if seen is None:
            return 0
        fields = seen.content.split(b"|")[0].split()
        return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0

    def progressed_since(self, t: float) -> bool:
        """Some rank's progress changed after monotonic time ``t``."""
        return any(s.changed > t for s in self.progress.values())

    def steps_done(self) -> int | None:
        """The most steps any rank last reported, when the program writes its count of
        completed steps into the progress file (sbatch/demo/allreduce.py does)."""
        counts = [int(word) for s in self.progress.values()
                  for word in s.content.split(b"|")[0].split()[:1] if word.isdigit()]
        return max(counts, default=None)

    def idle(self) -> float:
        """Seconds since any rank's progress last changed (since the watch began)."""
        last = max((s.changed for s in self.progress.values()), default=self.started)
        return time.monotonic() - max(last, self.started)
