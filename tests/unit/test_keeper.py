"""squall-keeper (spank/hooks/squall-keeper.c), driven the way the plugin drives it.

The keeper holds a container's runtime outside slurmstepd's process tree: it runs the
runtime with the job signals ignored, in a process group of its own, reports when its first
process has stopped itself, and ends everything on "stop", when slurmstepd (a pidfd on fd
4) dies, or when the runtime exits. A fake runtime stands in for `enroot start` here (a
shell that starts a daemon in the session, then stops itself, as Enroot's does); the real
protocol, processes and signals are used. Runs as root for the mount-namespace case.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A daemon in the runtime's session (like squashfuse), then the runtime stops itself.
FAKE_RUNTIME = ["/bin/sh", "-c", "sleep 300 & echo $! >\"$1\"; kill -STOP $$; exit 0", "rt"]


@pytest.fixture(scope="module")
def keeper(tmp_path_factory) -> Path:
    """Built from the sources as spank/Makefile builds it (core objects, plugin pidfd.c)."""
    out = tmp_path_factory.mktemp("keeper") / "squall-keeper"
    core = sorted(str(p) for p in (ROOT / "spank/core").glob("*.c"))
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2",
                    f"-I{ROOT}/spank/core", f"-I{ROOT}/spank/plugin", "-o", str(out),
                    str(ROOT / "spank/hooks/squall-keeper.c"),
                    str(ROOT / "spank/plugin/pidfd.c"), *core], check=True)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_dead(pids: list[int], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still alive: {[p for p in pids if alive(p)]}"
        time.sleep(0.02)


def sig_ignored(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigIgn line")


class Keeper:
    """A keeper started as the plugin starts it: new session, control socket on fd 3,
    a pidfd of a stand-in slurmstepd on fd 4."""

    def __init__(self, keeper: Path, runtime: list[str], stepd: subprocess.Popen | None):
        self.plugin_end, keeper_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stepd_fd = os.pidfd_open(stepd.pid) if stepd is not None else -1

        def place_fds() -> None:
            os.dup2(keeper_end.fileno(), 3)
            if stepd_fd >= 0:
                os.dup2(stepd_fd, 4)

        self.proc = subprocess.Popen([str(keeper), *runtime], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, preexec_fn=place_fds,
                                     pass_fds=[3, 4] if stepd_fd >= 0 else [3])
        keeper_end.close()
        if stepd_fd >= 0:
            os.close(stepd_fd)
        self.plugin_end.settimeout(20)
        text, fds, _, _ = socket.recv_fds(self.plugin_end, 128, 2)
        word, kpid, rpid = text.decode().split()
        assert word == "started" and int(kpid) == self.proc.pid, text
        assert len(fds) == 2, fds
        self.runtime = int(rpid)
        self.pidfds = fds

    def hear(self) -> str:
        return self.plugin_end.recv(128).decode()

    def close(self) -> None:
        for fd in self.pidfds:
            os.close(fd)
        self.plugin_end.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def daemon_of(pidfile: Path) -> int:
    deadline = time.monotonic() + 5
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return int(pidfile.read_text())


def test_ready_then_stop_ends_the_runtime_and_its_session(keeper, tmp_path):
    k = Keeper(keeper, [*FAKE_RUNTIME, str(tmp_path / "daemon")], None)
    try:
        assert k.hear() == "ready"
        daemon = daemon_of(tmp_path / "daemon")
        assert os.getsid(k.runtime) == k.proc.pid == os.getsid(daemon)
        assert os.getpgid(k.runtime) == k.runtime != os.getpgid(k.proc.pid)
        for pid in (k.proc.pid, k.runtime):
            ignored = sig_ignored(pid)
            for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP,
                        signal.SIGALRM, signal.SIGINT):
                assert ignored & (1 << (sig - 1)), (pid, sig)
        # Job signals to the whole session: nothing moves.
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP):
            os.killpg(k.runtime, sig)
            os.kill(k.proc.pid, sig)
        time.sleep(0.2)
        assert alive(k.proc.pid) and alive(k.runtime) and alive(daemon)
        k.plugin_end.send(b"stop")
        assert k.proc.wait(timeout=15) == 0
        wait_dead([k.runtime, daemon])
    finally:
        k.close()


def test_runtime_that_exits_before_stopping_is_reported(keeper):
    k = Keeper(keeper, ["/bin/sh", "-c", "echo boom >&2; exit 3"], None)
    try:
        assert k.hear() == f"exited {3 << 8}"
        assert k.proc.wait(timeout=10) == 0
        assert b"boom" in k.proc.stderr.read()
    finally:
        k.close()


def test_closed_control_socket_ends_the_container(keeper, tmp_path):
    k = Keeper(keeper, [*FAKE_RUNTIME, str(tmp_path / "daemon")], None)
    try:
        assert k.hear() == "ready"
        daemon = daemon_of(tmp_path / "daemon")
        k.plugin_end.close()
        assert k.proc.wait(timeout=15) == 0
        wait_dead([k.runtime, daemon])
    finally:
        k.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of its own needs root")
def test_slurmstepd_gone_ends_the_container_and_the_tasks_in_it(keeper, tmp_path):
    stepd = subprocess.Popen(["sleep", "300"])
    runtime = ["/usr/bin/unshare", "--mount", "--propagation", "private", *FAKE_RUNTIME,
               str(tmp_path / "daemon")]
    k = Keeper(keeper, runtime, stepd)
    try:
        assert k.hear() == "ready"
        daemon = daemon_of(tmp_path / "daemon")
        # A task that joined the container (its mount namespace), started by "slurmstepd".
        task = subprocess.Popen(["nsenter", "-t", str(k.runtime), "-m", "sleep", "301"])
        bystander = subprocess.Popen(["sleep", "302"])
        time.sleep(0.2)
        stepd.kill()
        stepd.wait()
        assert k.proc.wait(timeout=15) == 0
        wait_dead([k.runtime, daemon])
        assert task.wait(timeout=10) == -signal.SIGKILL
        assert alive(bystander.pid)
        bystander.kill()
        bystander.wait()
    finally:
        k.close()
        if stepd.poll() is None:
            stepd.kill()


def test_keeper_killed_the_kernel_ends_the_stopped_runtime(keeper, tmp_path):
    """The runtime's stopped process group is orphaned: SIGHUP (ignored) and SIGCONT."""
    k = Keeper(keeper, [*FAKE_RUNTIME, str(tmp_path / "daemon")], None)
    try:
        assert k.hear() == "ready"
        daemon = daemon_of(tmp_path / "daemon")
        os.kill(k.proc.pid, signal.SIGKILL)
        k.proc.wait()
        wait_dead([k.runtime])
        # What the runtime left in the session is the epilog's to sweep (keeper.h).
        assert alive(daemon)
        os.kill(daemon, signal.SIGKILL)
    finally:
        k.close()
