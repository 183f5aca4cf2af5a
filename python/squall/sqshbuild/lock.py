"""A lock that works on shared filesystems (NFS, Lustre with or without ``flock``).

``fcntl``/``flock`` locks are not reliable across nodes on every Lustre or NFS mount, so the
lock is a file created with ``O_CREAT|O_EXCL`` (atomic on NFSv3+ and Lustre) holding the
owner's host, pid and start time, and, rewritten every second while it builds, how far its
build is (:mod:`.progress`: what the builds waiting on other nodes tell their users). The
owner refreshes the file's mtime every ``heartbeat`` seconds from a thread. A waiter takes
the lock over when the owner is gone: same host and the pid no longer exists, or the file
has not changed for ``stale_after`` seconds of the waiter's own monotonic clock (a crashed
or SIGKILLed node). The file's mtime against the waiter's wall clock counts only past
``SKEW_BOUND`` more: nodes whose clocks are minutes apart never break each other's live
lock, and a lock left hours ago is taken at once. Takeover renames the stale file to a
unique name first, so of two waiters only one wins, then creates the lock afresh.

A lock is honoured only when a trusted owner made it (:mod:`.trust`): another user's lock
file is ignored at once, with one note, and the build goes on without a lock (publication
stays atomic; at worst two builds of the same image run). A lock that lies (an mtime in
the future, a host that never refreshes it) stops counting once its file has not changed
for ``stale_after`` seconds of this waiter's own clock, so no waiter waits longer than
that plus one build. A stale lock this user may not remove (another user's, in a sticky
directory) is left to its owner or root's gc and the build goes on without it.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import jsonbound, safefs
from squall.sqshbuild.trust import Trust, may_remove, who

HEARTBEAT = 5.0
STATUS_EVERY = 1.0  # how often a holder with a status (progress.py) rewrites it
STALE_AFTER = 60.0
# A waiter polls every POLL_FIRST s at first (a job's pin is resolved in a moment), then
# less often, at most every POLL_MAX s: 1,000 nodes waiting for one pull then cost the file
# system's metadata server about one stat per node per POLL_MAX s (bench/results/
# lock-waiters.md), and each sees the lock go at most POLL_MAX s late.
POLL_FIRST = 0.3
POLL_MAX = 2.0
# How far apart two nodes' clocks may be without a waiter breaking a live lock on its
# mtime alone (an NTP-less node can be minutes off; an hour is no longer a skew).
SKEW_BOUND = 3600.0
# Owners (host, pid) whose lock this process found stale: a build that died held its
# image's lock and its layers' locks; once one of them is judged, the others are stale as
# soon as they have missed two heartbeats, not after a full STALE_AFTER each.
_GONE: set[tuple[object, object]] = set()
# Told what the lock file says of its holder (None: absent, untrusted or malformed).
OwnerCallback = Callable[[dict[str, object] | None], None]


def pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed build its parent has not reaped
    yet is gone all the same)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return True
    return state != [b"Z"] and state != [b"X"]


class SharedLock:
    def __init__(self, path: Path, heartbeat: float = HEARTBEAT,
                 stale_after: float = STALE_AFTER, trust: Trust | None = None) -> None:
        self.path = path
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.trust = trust or Trust.current()
        self.host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held = False
        self.unlocked = False  # going on without it (an untrusted or unremovable lock)
        # What the holder is doing (progress.PullCount.fields): written into the lock file
        # at every heartbeat, for the builds waiting for it on other nodes.
        self.status: Callable[[], dict[str, object]] | None = None
        self._fd = -1
        self._since = 0.0
        self._seen: tuple[int, int, int, int] | None = None  # the file as last seen
        self._seen_at = 0.0  # when it last changed, by this process's clock
        # Who holds it, read once per lock file (its host and pid never change): a poll
        # is then one stat, not an open and a read of the holder's file as well.
        self._holder: tuple[tuple[int, int], dict[str, object]] | None = None

    def try_acquire(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise SquallError(f"disk full in {self.path.parent} (creating the lock "
                                  f"{self.path.name}): free space there") from None
            raise SquallError(f"cannot create lock {self.path}: {exc.strerror}; the directory "
                              f"{self.path.parent} must be writable by every user of the cache "
                              f"(chmod 1777 {self.path.parent})") from None
        try:
            os.fchmod(fd, 0o644)  # whatever the umask: every user reads who holds it
            self._since = time.time()
            os.write(fd, self._content({}))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd   # kept for the heartbeat's status (never reopened by its name)
        self.held = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return True

    def _content(self, status: dict[str, object]) -> bytes:
        return json.dumps({**status, "host": self.host, "pid": os.getpid(),
                           "since": self._since}).encode()

    def _beat(self) -> None:
        """The mtime every heartbeat; the status, when there is one, every STATUS_EVERY
        seconds (one small write by the one build that holds the lock)."""
        last = time.monotonic()
        while not self._stop.wait(min(self.heartbeat, STATUS_EVERY)):
            try:
                if self.status is not None:
                    # One write of a few hundred bytes: a reader sees the old text or the
                    # new (a torn read fails to parse and is skipped). It changes the mtime.
                    data = self._content(self.status())
                    os.pwrite(self._fd, data, 0)
                    os.ftruncate(self._fd, len(data))
                elif time.monotonic() - last >= self.heartbeat:
                    os.utime(self.path)
                else:
                    continue
                last = time.monotonic()
            except OSError:
                return

    def owner(self) -> dict[str, object] | None:
        """What the lock says of its holder; None when it is absent, untrusted (never
        read: it may be a FIFO) or malformed."""
        try:
            data = jsonbound.loads(safefs.read_file(self.path, self.trust, limit=4096) or b"{}",
                                   f"the lock {self.path}")
            return data if isinstance(data, dict) else None
        except (OSError, SquallError, safefs.Unsafe):
            return None

    def untrusted(self, st: os.stat_result | None = None) -> str:
        """Why the existing lock file does not count ('' when it does, or is absent)."""
        st = st or safefs.lstat(self.path)
        if st is None:
            return ""
        return self.trust.why_not_file(st)

    def _holder_of(self, st: os.stat_result) -> dict[str, object]:
        """The holder's host and pid, read from the file once per lock file."""
        key = (st.st_ino, st.st_uid)
        if self._holder is None or self._holder[0] != key:
            owner = self.owner() or {}
            if owner.get("host") is None or owner.get("pid") is None:
                return owner  # not written yet (created, then written): read it again
            self._holder = (key, owner)
        return self._holder[1]

    def is_stale(self, st: os.stat_result | None = None) -> bool:
        st = st or safefs.lstat(self.path)
        if st is None:
            return False
        now = time.monotonic()
        seen = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_uid)
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
        if now - self._seen_at > self.stale_after:
            return True  # unchanged for the bound by our own clock, whatever it says
        owner = self._holder_of(st)
        if ((owner.get("host"), owner.get("pid")) in _GONE
                and now - self._seen_at > 2 * self.heartbeat + 1):
            return True  # its holder's other lock was stale: it died
        pid = owner.get("pid")
        if owner.get("host") == self.host and isinstance(pid, int) and not pid_alive(pid):
            # read again before it counts: a new holder may have the old one's inode
            self._holder = None
            owner = self._holder_of(st)
            pid = owner.get("pid")
            if owner.get("host") == self.host and isinstance(pid, int) and not pid_alive(pid):
                return True
        # by the wall clock only when no skew explains it; a future mtime counts only by
        # our own monotonic clock (above)
        age = time.time() - st.st_mtime
        return age > self.stale_after + SKEW_BOUND

    def break_stale(self) -> bool:
        """Remove the lock if its owner is gone; True if this process removed it."""
        return self.is_stale() and self._remove()

    def _remove(self) -> bool:
        """Move the (stale) lock aside and delete it, when it is this process's to remove."""
        st = safefs.lstat(self.path)
        if st is None or not may_remove(st, self.trust):
            return False  # another user's: never removed (a sticky directory anyway)
        owner = self.owner() or {}
        aside = self.path.with_name(f"{self.path.name}.stale.{uuid.uuid4().hex}")
        try:
            os.rename(self.path, aside)
        except OSError:  # gone already, or not ours to move (sticky directory)
            return False
        if owner.get("host") and owner.get("pid"):
            _GONE.add((owner.get("host"), owner.get("pid")))
        # -v says which lock a takeover waited for, and whose it was
        log.info("took over the stale lock %s of %s pid %s after %.0f s of watching it",
                 self.path, owner.get("host"), owner.get("pid"),
                 time.monotonic() - self._seen_at)
        try:
            os.unlink(aside)
        except OSError:
            pass
        return True

    def acquire(self, done: Callable[[], bool] | None = None, timeout: float = 6 * 3600,
                poll: float = POLL_FIRST, on_wait: OwnerCallback | None = None,
                progress: OwnerCallback | None = None, every: float = 5.0) -> bool:
        """Take the lock, or return False as soon as ``done()`` says the work was done by the
        holder; waits up to ``timeout`` seconds, polling every ``poll`` s at first, then
        less often (POLL_MAX). ``on_wait`` is told the holder once, ``progress`` every
        ``every`` seconds of the wait (what the holder's file says)."""
        deadline = time.monotonic() + timeout
        first, told = poll, False
        next_progress = time.monotonic() + every
        while True:
            if done is not None and done():
                return False
            st = safefs.lstat(self.path)
            if st is None and self.try_acquire():
                return True
            why = self.untrusted(st)
            if why:
                log.warning("note: ignoring the lock %s: it %s (docs/security.md); building "
                            "without it", self.path, why)
                self.unlocked = True
                return True
            if self.is_stale(st):
                if self._remove() or safefs.lstat(self.path) is None:
                    poll = first
                    continue
                st = safefs.lstat(self.path)
                log.warning("note: the lock %s of %s is stale and not this user's to remove: "
                            "building without it", self.path,
                            who(st.st_uid) if st is not None else "?")
                self.unlocked = True
                return True
            if not told and on_wait is not None:
                on_wait(self.owner())
                told = True
            if progress is not None and time.monotonic() >= next_progress:
                progress(self.owner())
                next_progress = time.monotonic() + every
            if time.monotonic() > deadline:
                owner = self.owner() or {}
                raise SquallError(
                    f"timed out after {timeout:.0f} s waiting for {self.path} held by "
                    f"{owner.get('host')} pid {owner.get('pid')}: if that build is dead, "
                    "delete the lock file")
            # a progress line on time, not up to a poll late
            time.sleep(min(poll, max(0.0, next_progress - time.monotonic()))
                       if progress is not None else poll)
            poll = poll if poll >= POLL_MAX else min(poll * 1.5, POLL_MAX)

    def release(self) -> None:
        if not self.held:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.held = False

    def __enter__(self) -> SharedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
