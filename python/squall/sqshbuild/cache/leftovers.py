"""What killed builds left: temporary files in a cache, scratch trees in TMPDIR.

A leftover is removed only by its owner, through directory descriptors (:mod:`.fdtree`);
in the shared cache root and the builder may also remove each other's. Another user's
entry is never opened, followed, chmodded or removed, whatever its name says: in a
``1777`` TMPDIR a "dead" scratch directory of alice's is alice's (docs/security.md).
"""

from __future__ import annotations

import fnmatch
import os
import socket
import stat
import time
from pathlib import Path

from squall.sqshbuild import fdtree, safefs
from squall.sqshbuild.cache.layout import WORK_PREFIX
from squall.sqshbuild.lock import pid_alive
from squall.sqshbuild.trust import Trust, may_remove

DEAD_TEMP_AGE = 24 * 3600  # a temporary file of another host this old is a dead build's


def started_after(pid: int, when: float) -> bool:
    """Whether process ``pid`` started after ``when`` (seconds since the epoch), so that it
    cannot have written a file last written then: a pid used again after a reboot (a
    node's pids start over) or after wrapping. False when it cannot be told."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > when + 1  # 1 s: mtime's granularity


def dead_here(stem: str, st: os.stat_result | None = None) -> bool | None:
    """For a name ending ``<host>.<pid>`` (and an optional ``~<random>``): True when the
    host is this one and the process is gone (or, given the file's ``st``, is a process
    that started after the file was last written), False when it lives, None when the
    name is another host's or has no owner."""
    stem = stem.split("~", 1)[0]
    head, _, pid = stem.rpartition(".")
    host = socket.gethostname()
    if not pid.isdigit() or not (head.endswith("." + host) or head.endswith("-" + host)):
        return None
    if int(pid) == os.getpid():
        return False
    return not pid_alive(int(pid)) or (st is not None and started_after(int(pid), st.st_mtime))


def _dead(name: str, st: os.stat_result) -> bool:
    dead = dead_here(name, st)
    if dead is not None:
        return dead
    return time.time() - st.st_mtime > DEAD_TEMP_AGE


def remove_dead_temps(directory: Path, pattern: str, trust: Trust | None = None,
                      any_host: bool = False) -> list[tuple[Path, int]]:
    """Remove the files matching ``pattern`` in ``directory`` that dead builds left and
    this process may remove (:func:`may_remove`); with ``any_host`` (the caller holds the
    lock that every writer of these files holds) every such file but this process's own.
    Returns (path, bytes)."""
    removed: list[tuple[Path, int]] = []
    try:
        fd = safefs.open_dir(directory)
    except OSError:
        return removed
    try:
        for entry in os.scandir(fd):
            if not fnmatch.fnmatchcase(entry.name, pattern):
                continue
            st = safefs.lstat_at(fd, entry.name)
            if (st is None or stat.S_ISDIR(st.st_mode) or not may_remove(st, trust)
                    or not (any_host and dead_here(entry.name, st) is not False
                            or _dead(entry.name, st))):
                continue
            try:
                os.unlink(entry.name, dir_fd=fd)
                removed.append((directory / entry.name, st.st_size))
            except OSError:
                pass
    finally:
        os.close(fd)
    return removed


def remove_dead_work_dirs(directory: Path) -> list[tuple[Path, int]]:
    """Scratch trees (unpack roots, dockerd:// exports, private layers) that killed builds
    of this process's user on this host left in ``directory`` (``--work-dir`` or TMPDIR):
    only directories this user owns, that nobody else could write into. Returns (path,
    bytes)."""
    try:
        fd = safefs.open_dir(directory)
    except OSError:
        return []
    try:
        return remove_dead_work_dirs_at(fd, directory)
    finally:
        os.close(fd)


def remove_dead_work_dirs_at(fd: int, directory: Path) -> list[tuple[Path, int]]:
    """:func:`remove_dead_work_dirs` in the directory open at ``fd``."""
    removed: list[tuple[Path, int]] = []
    for entry in os.scandir(fd):
        name = entry.name
        if not name.startswith(WORK_PREFIX) or dead_here(name.rpartition(".")[0]) is not True:
            continue
        st = safefs.lstat_at(fd, name)
        if (st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
                or stat.S_IMODE(st.st_mode) & 0o077):
            continue
        size = fdtree.tree_size(fd, name)
        try:
            fdtree.remove_tree(fd, name)
            removed.append((directory / name, size))
        except OSError:
            pass
    return removed
