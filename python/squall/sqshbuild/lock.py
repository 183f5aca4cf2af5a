"""A lock that works on shared filesystems (NFS, Lustre with or without ``flock``).

``fcntl``/``flock`` locks are not reliable across nodes on every Lustre or NFS mount, so the
lock is a file created with ``O_CREAT|O_EXCL`` (atomic on NFSv3+ and Lustre) holding the
owner's host, pid and start time. The owner refreshes the file's mtime every
``heartbeat`` seconds from a thread. A waiter takes the lock over when the owner is gone:
same host and the pid no longer exists, or the mtime is older than ``stale_after`` (a
crashed or SIGKILLed node). Takeover renames the stale file to a unique name first, so of
two waiters only one wins, then creates the lock afresh.
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

HEARTBEAT = 5.0
STALE_AFTER = 60.0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SharedLock:
    def __init__(self, path: Path, heartbeat: float = HEARTBEAT,
                 stale_after: float = STALE_AFTER) -> None:
        self.path = path
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held = False

    def try_acquire(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
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
            os.write(fd, json.dumps({"host": self.host, "pid": os.getpid(),
                                     "since": time.time()}).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        self.held = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return True

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                os.utime(self.path)
            except OSError:
                return

    def owner(self) -> dict[str, object] | None:
        try:
            data = json.loads(self.path.read_text() or "{}")
            return data if isinstance(data, dict) else None
        except (OSError, ValueError):
            return None

    def is_stale(self) -> bool:
        try:
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return False
        owner = self.owner() or {}
        pid = owner.get("pid")
        if owner.get("host") == self.host and isinstance(pid, int) and not pid_alive(pid):
            return True
        return age > self.stale_after

    def break_stale(self) -> bool:
        """Remove the lock if its owner is gone; True if this process removed it."""
        if not self.is_stale():
            return False
        aside = self.path.with_name(f"{self.path.name}.stale.{uuid.uuid4().hex}")
        try:
            os.rename(self.path, aside)
        except OSError:  # gone already, or not ours to move (sticky directory)
            return False
        try:
            os.unlink(aside)
        except OSError:
            pass
        return True

    def acquire(self, done: Callable[[], bool] | None = None, timeout: float = 6 * 3600,
                poll: float = 0.3, on_wait: Callable[[dict[str, object] | None], None] | None = None
                ) -> bool:
        """Take the lock, or return False as soon as ``done()`` says the work was done by the
        holder; waits up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        told = False
        while True:
            if done is not None and done():
                return False
            if self.try_acquire():
                return True
            if self.break_stale():
                continue
            if not told and on_wait is not None:
                on_wait(self.owner())
                told = True
            if time.monotonic() > deadline:
                owner = self.owner() or {}
                raise SquallError(
                    f"timed out after {timeout:.0f} s waiting for {self.path} held by "
                    f"{owner.get('host')} pid {owner.get('pid')}: if that build is dead, "
                    "delete the lock file")
            time.sleep(poll)

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
        self.held = False

    def __enter__(self) -> SharedLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
