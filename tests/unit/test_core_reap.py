"""Ending a container's processes through /proc (spank/core/reap.c), via cffi.

squall-keeper and the job epilog end a container by its session (the runtime and its FUSE
daemons) and its mount namespace (tasks that joined it), never by a PID list: these are
the finders, checked on real processes."""

import os
import signal
import subprocess
import time

import pytest
from mntns import alive, in_own_mntns, ns_id

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


@pytest.mark.needs_root("a new mount namespace")
def test_reap_mntns_kills_what_runs_in_that_namespace():
    # Its own session: under CI the runner may sit in session 0, which names no session.
    inside = subprocess.Popen(["unshare", "--mount", "sh", "-c", "sleep 60 & exec sleep 61"],
                              start_new_session=True)
    outside = subprocess.Popen(["sleep", "60"])
    try:
        dev, ino = ffi.new("unsigned long long *"), ffi.new("unsigned long long *")
        deadline = time.monotonic() + 5
        # read once unshare(1) has moved in: before that the pid is still in ours
        while os.readlink(f"/proc/{inside.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert lib.sq_mntns_of(inside.pid, dev, ino) == 0
        fds = ffi.new("int[4]")
        assert lib.sq_session_mntns(os.getsid(inside.pid), os.getuid(), fds, 4) == 1
        st = os.fstat(fds[0])
        assert (st.st_dev, st.st_ino) == (dev[0], ino[0])   # the caller's own is left out
        try:
            assert lib.sq_reap_mntns(fds[0], os.getuid(), -1) >= 1
        finally:
            os.close(fds[0])
        inside.wait(timeout=5)
        assert inside.returncode == -signal.SIGKILL
        assert alive(outside.pid)
        assert lib.sq_mntns_of(2**22 + 5, dev, ino) == -1
    finally:
        for p in (inside, outside):
            p.kill()
            p.wait()


@pytest.mark.needs_root("a new mount namespace")
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


@pytest.mark.needs_root("a new mount namespace")
def test_a_pinned_namespace_keeps_its_number_and_is_reaped_by_it():
    """Issue 30: the kernel gives a freed mount namespace's number to the next one made.
    Held by a descriptor (sq_mntns_pin), the namespace keeps it: its last process gone, a new
    namespace gets another number and survives a reap by the held one; without the hold,
    the next namespace gets the very number."""
    first = in_own_mntns(["unshare", "--mount", "sleep", "60"])
    number = ns_id(first.pid)
    assert lib.sq_mntns_pin(first.pid, os.getuid() + 1) == -1       # another user's: no
    assert lib.sq_mntns_pin(2**22 + 5, os.getuid()) == -1           # gone: no
    pin = lib.sq_mntns_pin(first.pid, os.getuid())
    assert pin >= 0
    procs = [first]
    try:
        dev, ino = ffi.new("unsigned long long *"), ffi.new("unsigned long long *")
        assert lib.sq_mntns_fd_id(pin, dev, ino) == 0 and (dev[0], ino[0]) == number
        user = os.open("/proc/self/ns/user", os.O_RDONLY)
        assert lib.sq_mntns_fd_id(user, dev, ino) == -1                 # not a mount ns
        os.close(user)
        first.kill()
        first.wait()
        later = [in_own_mntns(["unshare", "--mount", "sleep", "60"]) for _ in range(20)]
        procs += later
        assert all(ns_id(p.pid) != number for p in later)
        assert lib.sq_reap_mntns(pin, os.getuid(), -1) == 0
        assert all(p.poll() is None for p in later)
        # Let go, the number goes to the next namespace made (the kernel's reuse).
        os.close(pin)
        pin = -1
        tries = 0
        while not tries or ns_id(procs[-1].pid) != number:
            tries += 1
            assert tries <= 200, "the kernel did not reuse the number in 200 tries"
            procs.append(in_own_mntns(["unshare", "--mount", "sleep", "60"]))
        print(f"the freed number {number} was reused after {tries} tries")
    finally:
        if pin >= 0:
            os.close(pin)
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.needs_root("a new mount namespace")
def test_a_recorded_number_is_pinned_only_in_the_container_s_user_namespace():
    """A layer record's number (a mount namespace made in the container's user namespace)
    is taken for the layer only when the namespace it names now is owned by the user
    namespace of the container held: not when it is a namespace made since elsewhere."""
    container = in_own_mntns(["unshare", "--user", "--map-root-user", "--mount", "sleep", "60"])
    procs = [container]
    owner = lib.sq_mntns_pin(container.pid, os.getuid())
    host = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    try:
        layer = subprocess.Popen(["nsenter", f"--target={container.pid}", "--user",
                                  "unshare", "--mount", "sleep", "60"])
        procs.append(layer)
        deadline = time.monotonic() + 5
        while ns_id(layer.pid) in (ns_id(os.getpid()), ns_id(container.pid)):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        lid = ns_id(layer.pid)
        got = lib.sq_mntns_pin_owned(lid[0], lid[1], os.getuid(), owner)
        assert got >= 0 and os.fstat(got).st_ino == lid[1]
        os.close(got)
        assert lib.sq_mntns_pin_owned(lid[0], lid[1], os.getuid() + 1, owner) == -1
        # Owned by our own user namespace, ownership would not tell containers apart.
        assert lib.sq_mntns_pin_owned(lid[0], lid[1], os.getuid(), host) == -1
        # The layer gone, its number goes to a namespace of another container: refused.
        layer.kill()
        layer.wait()
        for _ in range(200):
            other = in_own_mntns(["unshare", "--mount", "sleep", "60"])
            procs.append(other)
            if ns_id(other.pid) == lid:
                break
        else:
            pytest.fail("the kernel did not reuse the number in 200 tries")
        assert lib.sq_mntns_pin_owned(lid[0], lid[1], os.getuid(), owner) == -1
    finally:
        os.close(host)
        if owner >= 0:
            os.close(owner)
        for p in procs:
            p.kill()
            p.wait()
