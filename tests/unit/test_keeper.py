"""squall-keeper (spank/keeper/squall-keeper.c), driven the way the plugin drives it.

The keeper holds a container's runtime outside slurmstepd's process tree: it runs the
runtime with the job signals ignored, in a process group of its own, reports when its first
process has stopped itself, and ends everything on "stop", when slurmstepd (a pidfd on fd
4) dies, or when the runtime exits. A fake runtime stands in for `enroot start` here (a
shell that starts a daemon in the session, then stops itself, as Enroot's does); the real
protocol, processes and signals are used. Runs as root for the mount-namespace case.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from mntns import NextContainers, alive, in_own_mntns, ns_id

ROOT = Path(__file__).resolve().parents[2]
# A daemon in the runtime's session (like squashfuse), then the runtime stops itself.
FAKE_RUNTIME = ["/bin/sh", "-c", "sleep 300 & echo $! >\"$1\"; kill -STOP $$; exit 0", "rt"]


@pytest.fixture(scope="module")
def keeper(tmp_path_factory) -> Path:
    """Built from the sources as spank/Makefile builds it (spank/keeper/*.c and the core)."""
    out = tmp_path_factory.mktemp("keeper") / "squall-keeper"
    sources = sorted(str(p) for p in (ROOT / "spank/keeper").glob("*.c"))
    core = sorted(str(p) for p in (ROOT / "spank/core").glob("*.c"))
    # make asan sets SQUALL_TEST_CFLAGS: the keeper is built with the sanitizers too
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2",
                    *os.environ.get("SQUALL_TEST_CFLAGS", "").split(),
                    f"-I{ROOT}/spank/core", f"-I{ROOT}/spank/plugin", f"-I{ROOT}/spank/keeper",
                    "-o", str(out), *sources, *core], check=True)
    return out


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
    a pidfd of a stand-in slurmstepd on fd 4 (job: [SOCKET, IDLE_S] for a kept one)."""

    def __init__(self, keeper: Path, runtime: list[str], stepd: subprocess.Popen | None,
                 job: list[str] | None = None, umask: int = -1):
        self.plugin_end, keeper_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stepd_fd = os.pidfd_open(stepd.pid) if stepd is not None else -1

        def place_fds() -> None:
            os.dup2(keeper_end.fileno(), 3)
            if stepd_fd >= 0:
                os.dup2(stepd_fd, 4)

        job_args = ["--job", *job] if job else []
        self.proc = subprocess.Popen([str(keeper), *job_args, *runtime], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, preexec_fn=place_fds,
                                     pass_fds=[3, 4] if stepd_fd >= 0 else [3], umask=umask)
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


@pytest.mark.needs_root("a mount namespace of its own")
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


# --- kept for the job: steps attach through a socket -------------------------------------

def attach(path: Path) -> tuple[socket.socket, int, int, list[int]]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(20)
    s.connect(str(path))
    s.send(b"attach")
    text, fds, _, _ = socket.recv_fds(s, 128, 2)
    word, kpid, rpid = text.decode().split()
    assert word == "attached" and len(fds) == 2, text
    return s, int(kpid), int(rpid), fds


def test_kept_container_serves_later_steps_and_ends_when_idle(keeper, tmp_path):
    sock = tmp_path / "kept.sock"
    k = Keeper(keeper, [*FAKE_RUNTIME, str(tmp_path / "daemon")], None, [str(sock), "1"])
    try:
        assert k.hear() == "ready"
        daemon = daemon_of(tmp_path / "daemon")
        k.plugin_end.send(b"bye")            # the starting step ends: the container stays
        step2, kpid, rpid, fds = attach(sock)
        assert (kpid, rpid) == (k.proc.pid, k.runtime)
        for fd in fds:
            os.close(fd)
        time.sleep(1.5)                       # attached: no idle end
        assert alive(k.runtime) and alive(daemon)
        step2.send(b"bye")
        step2.close()
        assert k.proc.wait(timeout=15) == 0   # idle for 1 s with no step: ended
        wait_dead([k.runtime, daemon])
        assert not sock.exists()
    finally:
        k.close()


def test_a_kept_container_s_runtime_has_the_user_s_umask(keeper, tmp_path):
    """The job's socket is the user's alone (umask 077 for its bind), and only it: the
    runtime, the container's processes and the extraction keep the user's umask (issue 30:
    a umask left at 077 made the cache's copy of an image 0600/0700 throughout)."""
    sock, seen = tmp_path / "kept.sock", tmp_path / "umask"
    runtime = ["/bin/sh", "-c", 'umask >"$1"; kill -STOP $$; exit 0', "rt", str(seen)]
    k = Keeper(keeper, runtime, None, [str(sock), "30"], umask=0o022)
    try:
        assert k.hear() == "ready"
        assert seen.read_text().strip() == "0022"
        assert oct(sock.stat().st_mode & 0o777) == "0o700"
        k.plugin_end.send(b"stop")
        assert k.proc.wait(timeout=15) == 0
    finally:
        k.close()


def mntns(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/mnt").st_ino


def lsns_pids() -> set[int]:
    """What Enroot's `list -f` walks: one PID per mount namespace (lsns: the lowest).

    lsns (util-linux 2.38) exits 1 when a process it is reading ends under it, which the
    other tests running beside this one do all the time: that is tried again, a few times."""
    for _ in range(20):
        run = subprocess.run(["lsns", "-n", "-r", "-t", "mnt", "-o", "pid"],
                             capture_output=True, text=True)
        if run.returncode == 0:
            return {int(word) for word in run.stdout.split()}
        time.sleep(0.05)
    raise AssertionError(f"lsns failed 20 times: {run.stderr.strip()}")


# A runtime whose first process has a mount namespace of its own, as Enroot's has.
NS_RUNTIME = [shutil.which("unshare") or "/usr/bin/unshare", "--mount", "--propagation",
              "private", "/bin/sh", "-c", "kill -STOP $$; exit 0"]


@pytest.mark.parametrize("kept", [True, False], ids=["kept", "the-step-s-own"])
def test_a_container_s_first_process_stands_behind_a_sentinel(keeper, tmp_path, kept):
    """enroot list -f shows the lowest PID of each mount namespace whose root has /.lock:
    for a container squall starts that must not be the runtime's stopped shell (squall's
    holder) but a process whose root is the container's /proc (no /.lock: not listed). A
    kept container's steps, and a step's own container's tasks (named, --container-save),
    run in layers of their own, which are listed (plugin/layer.h)."""
    if shutil.which("lsns") is None:
        pytest.fail("lsns is missing: apt install util-linux")
    k = Keeper(keeper, NS_RUNTIME, None, [str(tmp_path / "kept.sock"), "30"] if kept else None)
    try:
        assert k.hear() == "ready"
        deadline = time.monotonic() + 5
        while True:
            same = sorted(p for p in map(int, filter(str.isdigit, os.listdir("/proc")))
                          if p != k.runtime and alive(p) and _same_ns(p, k.runtime))
            if same or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert same and same[0] < k.runtime, "nothing stands for the container's namespace"
        sentinel = same[0]
        assert os.readlink(f"/proc/{sentinel}/root") == "/proc"
        assert k.runtime not in lsns_pids() and sentinel in lsns_pids()
        k.plugin_end.send(b"stop")
        assert k.proc.wait(timeout=15) == 0
        wait_dead([k.runtime, sentinel])
    finally:
        k.close()


def _same_ns(pid: int, other: int) -> bool:
    try:
        return mntns(pid) == mntns(other)
    except OSError:
        return False


def test_attach_before_ready_is_answered_once_ready(keeper, tmp_path):
    sock = tmp_path / "kept.sock"
    slow = ["/bin/sh", "-c", "sleep 0.5; kill -STOP $$; exit 0"]
    k = Keeper(keeper, slow, None, [str(sock), "30"])
    try:
        step2, _, rpid, fds = attach(sock)
        assert rpid == k.runtime and k.hear() == "ready"
        for fd in fds:
            os.close(fd)
        k.plugin_end.send(b"stop")
        assert k.proc.wait(timeout=15) == 0
        step2.close()
    finally:
        k.close()


@pytest.mark.needs_root("a mount namespace of its own")
def test_a_step_gone_without_goodbye_loses_its_layer_not_the_container(keeper, tmp_path):
    sock = tmp_path / "kept.sock"
    k = Keeper(keeper, [*FAKE_RUNTIME, str(tmp_path / "daemon")], None, [str(sock), "30"])
    try:
        assert k.hear() == "ready"
        step2, _, _, fds = attach(sock)
        for fd in fds:
            os.close(fd)
        task = subprocess.Popen(["unshare", "--mount", "sleep", "300"])   # its layer
        deadline = time.monotonic() + 5
        while os.readlink(f"/proc/{task.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        send_layer(step2, task.pid)
        time.sleep(0.1)
        step2.close()                         # its slurmstepd died: no "bye"
        assert task.wait(timeout=10) == -signal.SIGKILL
        assert alive(k.runtime) and k.proc.poll() is None
    finally:
        k.plugin_end.send(b"stop")
        k.proc.wait(timeout=15)
        k.close()


def send_layer(sock: socket.socket, pid: int) -> tuple[int, int]:
    """"layer DEV INO" with a descriptor of pid's mount namespace, as kept.c says it."""
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    try:
        st = os.fstat(fd)
        socket.send_fds(sock, [f"layer {st.st_dev} {st.st_ino}".encode()], [fd])
        return st.st_dev, st.st_ino
    finally:
        os.close(fd)


@pytest.mark.needs_root("a mount namespace of its own")
def test_a_layer_s_number_taken_by_the_next_container_is_not_the_layer(keeper, tmp_path):
    """Issue 30: a step's layer ends (its tasks and its slurmstepd's descriptor gone), the
    kernel gives the namespace's number to the user's next container, then the keeper sees
    the step's connection close. It must not kill that container: it holds the layer's
    namespace itself (the descriptor the step sent), so the number names nothing else."""
    sock = tmp_path / "kept.sock"
    k = Keeper(keeper, [*FAKE_RUNTIME, str(tmp_path / "daemon")], None, [str(sock), "30"])
    nxt = None
    try:
        assert k.hear() == "ready"
        step2, _, _, fds = attach(sock)
        for fd in fds:
            os.close(fd)
        task = in_own_mntns(["unshare", "--mount", "sleep", "300"])   # its layer
        number = send_layer(step2, task.pid)
        time.sleep(0.1)
        task.kill()                           # the layer's last task
        task.wait()
        tries = 0
        while tries < 50:                     # the next container, until it has the number
            tries += 1
            nxt = in_own_mntns(["unshare", "--mount", "sleep", "300"])
            if ns_id(nxt.pid) == number:
                break
            nxt.kill()
            nxt.wait()
            nxt = None
        print(f"layer number {number}: " +
              (f"reused after {tries} tries" if nxt else f"not reused in {tries} tries"))
        if nxt is None:                       # held by the keeper: a namespace of its own
            nxt = in_own_mntns(["unshare", "--mount", "sleep", "300"])
        step2.close()                         # its slurmstepd died: no "bye"
        time.sleep(0.5)
        assert nxt.poll() is None, "the keeper killed the user's next container"
        assert alive(k.runtime) and k.proc.poll() is None
    finally:
        if nxt is not None:
            nxt.kill()
            nxt.wait()
        k.plugin_end.send(b"stop")
        k.proc.wait(timeout=15)
        k.close()


@pytest.mark.needs_root("a mount namespace of its own")
def test_slurmstepd_gone_the_next_container_survives_the_keeper_s_sweep(keeper, tmp_path):
    """Issue 30, in the keeper's own teardown: slurmstepd dies, the keeper ends the tasks
    in the container's namespace and the runtime; the namespace is freed and the next job's
    containers (made one after another here) take its number while the keeper still
    sweeps. None of them may be killed."""
    stepd = subprocess.Popen(["sleep", "300"])
    runtime = ["/usr/bin/unshare", "--mount", "--propagation", "private", *FAKE_RUNTIME,
               str(tmp_path / "daemon")]
    k = Keeper(keeper, runtime, stepd)
    nxt = None
    try:
        assert k.hear() == "ready"
        number = ns_id(k.runtime)
        task = subprocess.Popen(["nsenter", "-t", str(k.runtime), "-m", "sleep", "301"])
        nxt = NextContainers(tmp_path / "made", pause=0.001)
        time.sleep(0.2)
        stepd.kill()
        stepd.wait()
        # (a keeper that kills each new namespace given the number sweeps for long)
        assert k.proc.wait(timeout=60) == 0
        assert task.wait(timeout=10) == -signal.SIGKILL
        time.sleep(0.1)
        dead = nxt.killed(number, "during the keeper's sweep")
        assert not dead, f"the keeper killed the next job's processes {dead}"
    finally:
        if nxt is not None:
            nxt.end()
        k.close()
        if stepd.poll() is None:
            stepd.kill()
