"""`enroot exec`, `enroot list -f` and the rootfs lock of the Enroot TEST DOUBLE (issue 22).

Facts (Enroot's runtime.sh): `start` creates the lock file ``/.lock`` in the root
filesystem, holds it with flock while it configures the container and then binds it
read-only; `list -f` takes one PID per mount namespace from ``lsns -n -r -t mnt -o pid``
(the lowest), keeps it when ``/proc/PID/root/.lock`` exists, and names it by field 4 of its
mountinfo line for ``/`` relative to the data path (else ``<unknown>``); `exec PID CMD`
joins PID's user, mount and cgroup namespaces, takes its working directory and its
environment (``/proc/PID/environ``) plus the ``-e`` values, and runs CMD as the caller.
`export` leaves the lock file out. Runs as root on the host.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
import test_enroot_test_runtime as rt

# The runtime tests' fixtures, registered in this module by name.
prerequisites, base_tree, env, image = rt.prerequisites, rt.base_tree, rt.env, rt.image
ENROOT, enroot, one_line_error = rt.ENROOT, rt.enroot, rt.one_line_error

HEADER = ["NAME", "PID", "COMM", "STATE", "STARTED", "TIME", "MNTNS", "USERNS", "COMMAND"]


class Running:
    """`enroot start [OPTS] TARGET sh -c 'cd /etc; kill -STOP $$; exit 0'`, stopped (the
    plugin's pattern): the container's main process, whose PID `enroot exec` takes."""

    def __init__(self, env: dict[str, str], *args: str,
                 script: str = "cd /etc; kill -STOP $$; exit 0") -> None:
        self.proc = subprocess.Popen([str(ENROOT), "start", *args, "sh", "-c", script], env=env,
                                     stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            pytest.fail(f"enroot start {args} did not stop: {self.proc.stderr.read()!r}")
        self.pid = self.proc.pid

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc.stderr.close()


@pytest.fixture()
def running(env, image):
    r = Running(env, "-e", "FROM_START=yes", str(image))
    yield r
    r.close()
    rt.wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))


def ns(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def table(out: str) -> list[list[str]]:
    """`list -f` rows as cell lists: columns start where the header's words start."""
    lines = out.rstrip("\n").split("\n")
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    rows = []
    for line in lines:
        cells = [line[a:b].strip()
                 for a, b in zip(starts, starts[1:] + [len(line)], strict=True)]
        rows.append(cells)
    return rows


# --- the rootfs lock ----------------------------------------------------------------------

def test_an_image_start_has_a_read_only_lock_file_in_its_root(env, image):
    r = enroot(env, "start", "-w", str(image), "sh", "-c",
               "test -f /.lock && echo present; echo x > /.lock 2>/dev/null || echo refused")
    assert r.stdout == "present\nrefused\n"


def test_a_created_container_keeps_its_lock_file_and_export_leaves_it_out(env, image, tmp_path):
    enroot(env, "create", "-n", "locked", str(image))
    lock = Path(env["SQUALL_T_BASE"]) / "data/locked/.lock"
    assert not lock.exists()
    enroot(env, "start", "locked", "true")
    assert lock.is_file(), "start creates Enroot's rootfs lock in the container's directory"
    out = tmp_path / "locked.sqsh"
    enroot(env, "export", "-o", str(out), "locked")
    names = subprocess.run(["unsquashfs", "-l", str(out)], capture_output=True, text=True,
                           check=True).stdout.split()
    assert "squashfs-root/etc/os-release" in names and "squashfs-root/.lock" not in names


def test_the_lock_is_held_while_a_start_configures_the_container(env, image, tmp_path):
    """A hook of one start holds the lock: a second start of the same container waits."""
    enroot(env, "create", "-n", "shared", str(image))
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    conf = tmp_path / "slow.conf"
    conf.write_text(f"hooks() {{\n  read -r _ < '{gate}'\n}}\n")
    first = subprocess.Popen([str(ENROOT), "start", "-c", str(conf), "shared", "true"], env=env)
    try:
        lock = Path(env["SQUALL_T_BASE"]) / "data/shared/.lock"
        probe = ["flock", "-n", str(lock), "true"]
        for _ in range(200):   # until the first start holds it
            if lock.exists() and subprocess.run(probe).returncode != 0:
                break
            subprocess.run(["sleep", "0.02"])
        else:
            pytest.fail("the first start never took the rootfs lock")
    finally:
        with open(gate, "w") as g:
            g.write("go\n")
        assert first.wait(timeout=30) == 0
    assert subprocess.run(probe).returncode == 0, "the lock is released once configured"


# --- enroot list -f -----------------------------------------------------------------------

def test_list_f_shows_each_container_s_first_process_as_enroot_does(env, image):
    enroot(env, "create", "-n", "c1", str(image))
    enroot(env, "create", "-n", "idle", str(image))
    named, anonymous = Running(env, "c1"), Running(env, str(image))
    try:
        # A process exec'd into c1 shares its mount namespace: not a row of its own.
        side = subprocess.Popen([str(ENROOT), "exec", str(named.pid), "sleep", "30"], env=env)
        # A process with a mount namespace of its own but no /.lock under its root.
        other = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "30"])
        try:
            for _ in range(100):
                if (ns(side.pid, "mnt") == ns(named.pid, "mnt")
                        and ns(other.pid, "mnt") != ns("self", "mnt")):
                    break
                subprocess.run(["sleep", "0.02"])
            out = enroot(env, "list", "-f").stdout
        finally:
            side.kill(), other.kill(), side.wait(), other.wait()
        rows = table(out)
        assert rows[0] == HEADER, out
        by_pid = {r[1]: r for r in rows[1:] if r[1]}
        assert str(side.pid) not in by_pid and str(other.pid) not in by_pid, out
        row = by_pid[str(named.pid)]
        assert row[0] == "c1" and row[2] == "sh" and row[3].startswith("T"), out
        assert row[6] == ns(named.pid, "mnt")[5:-1] and row[7] == ns(named.pid, "user")[6:-1]
        assert row[8] == "sh -c cd /etc; kill -STOP $$; exit 0", out
        assert re.fullmatch(r"\d\d:\d\d|[A-Z][a-z]{2}\d\d|\d{4}", row[4]), row   # ps start_time
        assert re.fullmatch(r"(\d+-)?(\d\d:)?\d\d:\d\d", row[5]), row             # ps etime
        # An image start has no name: Enroot lists it under <unknown>.
        assert by_pid[str(anonymous.pid)][0] == "<unknown>", out
        assert ["idle"] + [""] * 8 in rows, out
        names = [r[0] for r in rows[1:] if r[0]]
        assert names == sorted(names)
    finally:
        named.close(), anonymous.close()
    assert table(enroot(env, "list", "-f").stdout)[1:] == [["c1"] + [""] * 8,
                                                          ["idle"] + [""] * 8]
    assert enroot(env, "list").stdout == "c1\nidle\n"


def test_list_f_of_an_empty_data_path_is_the_header(env):
    assert table(enroot(env, "list", "-f").stdout) == [HEADER]
    assert enroot(env, "list").stdout == ""


# --- enroot exec --------------------------------------------------------------------------

def test_exec_runs_in_the_container_with_its_root_cwd_and_environment(env, running):
    r = enroot(dict(env, SQUALL_T_HOST="from-host"), "exec", "-e", "ADDED=1",
               "--env=FROM_IMAGE=overridden", "-e", "SQUALL_T_HOST", str(running.pid), "sh", "-c",
               'cat /etc/os-release; pwd; echo "$FROM_START $FROM_IMAGE $ADDED $SQUALL_T_HOST"')
    assert r.stdout == "ID=squalltest\nVERSION_ID=1\n/etc\nyes overridden 1 from-host\n"
    r = enroot(env, "exec", str(running.pid), "sh", "-c",
               "stat -L -c %i /proc/self/ns/mnt /proc/self/ns/user /proc/self/ns/cgroup; env")
    lines = r.stdout.splitlines()
    assert lines[:3] == [ns(running.pid, k).split("[")[1][:-1] for k in ("mnt", "user", "cgroup")]
    environ = [e.decode() for e in Path(f"/proc/{running.pid}/environ").read_bytes().split(b"\0")]
    def ours(entries: list[str]) -> list[str]:
        return sorted(e for e in entries if e and not e.startswith("PWD="))   # sh sets PWD
    assert ours(lines[3:]) == ours(environ), "the environment is the container's, not the caller's"


def test_exec_passes_the_exit_status_through(env, running):
    assert enroot(env, "exec", str(running.pid), "sh", "-c", "exit 7", check=False).returncode == 7
    assert enroot(env, "exec", "--", str(running.pid), "true").returncode == 0


def test_exec_into_a_created_container_and_one_without_a_user_namespace(env, image):
    enroot(env, "create", "-n", "c2", str(image))
    for e in (env, dict(env, ENROOT_ALLOW_SUPERUSER="y")):
        r = Running(e, "c2")
        try:
            out = enroot(env, "exec", str(r.pid), "sh", "-c", "pwd; cat /etc/os-release").stdout
            assert out.startswith("/etc\nID=squalltest"), out
        finally:
            r.close()


def test_exec_refuses_what_is_not_a_running_container(env, running):
    host = subprocess.Popen(["sleep", "30"])
    try:
        line = one_line_error(enroot(env, "exec", str(host.pid), "true", check=False))
        assert "not a container" in line and str(host.pid) in line
    finally:
        host.kill(), host.wait()
    gone = host.pid
    assert f"Process not found: {gone}" in one_line_error(
        enroot(env, "exec", str(gone), "true", check=False))
    assert "Process not found: nope" in one_line_error(
        enroot(env, "exec", "nope", "true", check=False))
    assert "Invalid argument: 1BAD=x" in one_line_error(
        enroot(env, "exec", "-e", "1BAD=x", str(running.pid), "true", check=False))
    assert "needs a PID and a COMMAND" in one_line_error(
        enroot(env, "exec", str(running.pid), check=False))
    assert "Unknown option for enroot exec" in one_line_error(
        enroot(env, "exec", "-x", str(running.pid), "true", check=False))
