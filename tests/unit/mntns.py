"""Mount namespaces for the reaping tests (test_core_reap, test_keeper,
test_plugin_epilog_records): a process's namespace identity, one process in a namespace of
its own, and the stream of a user's "next containers" (`unshare --mount sleep`) that takes
a freed namespace's number while the code under test still reaps (issue 30)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def ns_id(pid: int) -> tuple[int, int]:
    """(device, inode) of the process's mount namespace."""
    st = os.stat(f"/proc/{pid}/ns/mnt")
    return st.st_dev, st.st_ino


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def moved_in(proc: subprocess.Popen, timeout: float = 5.0) -> subprocess.Popen:
    """proc once unshare(1)/nsenter(1) has left this process's mount namespace."""
    deadline = time.monotonic() + timeout
    while ns_id(proc.pid) == ns_id(os.getpid()):
        assert time.monotonic() < deadline, "never left our mount namespace"
        time.sleep(0.005)
    return proc


def in_own_mntns(cmd: list[str]) -> subprocess.Popen:
    """cmd started, once it is in a mount namespace of its own."""
    return moved_in(subprocess.Popen(cmd))


class NextContainers:
    """The user's next containers, started one after another (every `pause` s) into
    `made` until stopped; `killed(number)` stops them and says which were killed."""

    def __init__(self, made: Path, pause: float = 0.002) -> None:
        self.made = made
        self.proc = subprocess.Popen(["sh", "-c", f"while :; do unshare --mount sleep 300 & "
                                      f"echo $! >>{made}; sleep {pause}; done"],
                                     start_new_session=True)

    def pids(self) -> list[int]:
        return [int(p) for p in self.made.read_text().split()] if self.made.exists() else []

    def killed(self, number: tuple[int, int], what: str) -> list[int]:
        """Stop starting more; print how many there were, how many got the old number,
        how many were killed; the killed ones' pids."""
        os.killpg(self.proc.pid, signal.SIGSTOP)
        pids = self.pids()
        dead = [p for p in pids if not alive(p)]
        took = [p for p in pids if alive(p) and ns_id(p) == number]
        print(f"{len(pids)} containers started {what}, {len(took)} of them in a namespace "
              f"numbered as the old one, {len(dead)} killed")
        return dead

    def end(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for p in self.pids():
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
