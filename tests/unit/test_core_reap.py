"""Ending a container's processes through /proc (spank/core/reap.c), via cffi.

squall-keeper and the job epilog end a container by its session (the runtime and its FUSE
daemons) and its mount namespace (tasks that joined it), never by a PID list: these are
the finders, checked on real processes."""

import os
import signal
import subprocess
import time

import pytest

from squall._core import ffi, lib


def ids(text: bytes) -> tuple[int, int, int] | None:
    out = [ffi.new("long *") for _ in range(3)]
    if lib.sq_procstat_ids(ffi.from_buffer(text), len(text), *out) != 0:
        return None
    return out[0][0], out[1][0], out[2][0]


def test_ids_of_this_process():
    text = open(f"/proc/{os.getpid()}/stat", "rb").read()
    assert ids(text) == (os.getppid(), os.getpgrp(), os.getsid(0))


@pytest.mark.parametrize("comm", [b"a) S 1 2 3", b"))", b"x y"])
def test_ids_after_a_command_name_with_parentheses(comm):
    assert ids(b"42 (" + comm + b") S 7 8 9 0 -1 4194560 0\n") == (7, 8, 9)


@pytest.mark.parametrize("text", [b"", b"42 (sh) S", b"42 (sh) S 1 2", b"42 (sh) S 1 x 3 4",
                                  b"42 (sh)S 1 2 3 4", b"42 (sh) S 1 2 3x 4"])
def test_malformed_ids_are_refused(text):
    assert ids(text) is None


def alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_dead(pids, timeout=5.0):
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, [p for p in pids if alive(p)]
        time.sleep(0.02)


def test_reap_session_kills_the_session_and_nothing_else():
    # A session of three processes (a shell and two children) and a bystander.
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & exec sleep 62"],
                              start_new_session=True)
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 5
        while len(open(f"/proc/{leader.pid}/task/{leader.pid}/children").read().split()) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        kids = [int(p) for p in
                open(f"/proc/{leader.pid}/task/{leader.pid}/children").read().split()]
        assert lib.sq_reap_session(leader.pid, os.getuid(), leader.pid) == 2
        wait_dead(kids)
        assert alive(leader.pid) and alive(bystander.pid)
        assert lib.sq_reap_session(leader.pid, os.getuid(), -1) == 1
        leader.wait(timeout=5)
        assert lib.sq_reap_session(leader.pid, os.getuid(), -1) == 0
        assert alive(bystander.pid)
    finally:
        for p in (leader, bystander):
            p.kill()
            p.wait()


def test_owner_is_the_real_uid():
    assert lib.sq_proc_owned_by(os.getpid(), os.getuid()) == 1
    assert lib.sq_proc_owned_by(os.getpid(), os.getuid() + 1) == 0
    assert lib.sq_proc_owned_by(2**22 + 5, os.getuid()) == 0


def test_reap_session_spares_other_users_processes():
    leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert lib.sq_reap_session(leader.pid, os.getuid() + 12345, -1) == 0
        assert alive(leader.pid)
        assert lib.sq_reap_session(0, os.getuid(), -1) == 0
    finally:
        leader.kill()
        leader.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="a new mount namespace needs root")
def test_reap_mntns_kills_what_runs_in_that_namespace():
    # Its own session: under CI the runner may sit in session 0, which names no session.
    inside = subprocess.Popen(["unshare", "--mount", "sh", "-c", "sleep 60 & exec sleep 61"],
                              start_new_session=True)
    outside = subprocess.Popen(["sleep", "60"])
    try:
        dev, ino = ffi.new("unsigned long long *"), ffi.new("unsigned long long *")
        deadline = time.monotonic() + 5
        while True:
            assert lib.sq_mntns_of(inside.pid, dev, ino) == 0
            if os.readlink(f"/proc/{inside.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
                break
            assert time.monotonic() < deadline
            time.sleep(0.01)
        devs, inos = ffi.new("unsigned long long[4]"), ffi.new("unsigned long long[4]")
        assert lib.sq_session_mntns(os.getsid(inside.pid), os.getuid(), devs, inos, 4) == 1
        assert (devs[0], inos[0]) == (dev[0], ino[0])   # the caller's own is left out
        assert lib.sq_reap_mntns(dev[0], ino[0], os.getuid(), -1) >= 1
        inside.wait(timeout=5)
        assert inside.returncode == -signal.SIGKILL
        assert alive(outside.pid)
        assert lib.sq_mntns_of(2**22 + 5, dev, ino) == -1
    finally:
        for p in (inside, outside):
            p.kill()
            p.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="a new mount namespace needs root")
def test_mntns_find_names_a_process_of_that_user_in_that_namespace():
    # --container-name=JOBID.STEPID joins a kept-container step's layer through one of its
    # processes: the finder must name one in that namespace, of that user, or none.
    inside = subprocess.Popen(["unshare", "--mount", "sleep", "60"])
    try:
        dev, ino = ffi.new("unsigned long long *"), ffi.new("unsigned long long *")
        deadline = time.monotonic() + 5
        while os.readlink(f"/proc/{inside.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert lib.sq_mntns_of(inside.pid, dev, ino) == 0
        assert lib.sq_mntns_find(dev[0], ino[0], os.getuid()) == inside.pid
        assert lib.sq_mntns_find(dev[0], ino[0], 4242) == -1      # another user's: none
        # a namespace no process is in (ino + 1 may be a container's, as on a machine
        # running the mini cluster)
        used = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                used.add(int(os.readlink(f"/proc/{pid}/ns/mnt").strip("mnt:[]")))
            except OSError:
                pass
        free = next(i for i in range(ino[0] + 1, ino[0] + 100000) if i not in used)
        assert lib.sq_mntns_find(dev[0], free, os.getuid()) == -1
    finally:
        inside.kill()
        inside.wait()
