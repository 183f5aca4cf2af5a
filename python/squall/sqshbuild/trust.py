"""Who writes the shared image cache, and whose entries a reader uses (docs/security.md).

The shared cache is written by one identity alone, **the builder**: a dedicated account
(``squall-builder``, created by the packages), and root. A user reads it and never writes
it: a user's builds go to the user's own cache. So an entry of the shared cache is used
only when root or the builder owns it; an entry of a user's own cache only when that user
(or root) owns it. Anything else is ignored with one ``note:`` line and never deleted,
renamed, written or followed.

The builder's name comes from ``SQSHBUILD_BUILDER`` (for this process only), else the
first word of ``/etc/squall/builder``, else ``squall-builder``; ``none``, or a name no
account has, means there is none and root alone writes the shared cache.
"""

from __future__ import annotations

import functools
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

BUILDER_ENV = "SQSHBUILD_BUILDER"
BUILDER_FILE = Path("/etc/squall/builder")
DEFAULT_BUILDER = "squall-builder"
_FILE_LIMIT = 4096


def who(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _builder_file_name() -> str:
    """The first word of the first line of /etc/squall/builder that is not a comment; ''
    when the file is missing or is not a small regular file of root's that only root may
    write (it is never followed or waited on)."""
    try:
        fd = os.open(BUILDER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            return ""  # as the plugin reads it: root's alone, or the default
        text = os.read(fd, _FILE_LIMIT).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            return words[0]
    return ""


def builder_name() -> str:
    """The builder's account name as configured ('' for none)."""
    name = os.environ.get(BUILDER_ENV)
    if name is None:
        name = _builder_file_name() or DEFAULT_BUILDER
    name = name.strip()
    return "" if name == "none" else name


@functools.lru_cache(maxsize=8)
def _uid_of(name: str) -> int | None:
    if not name:
        return None
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return int(name) if name.isdigit() else None


def builder_uid() -> int | None:
    """The builder's uid, or None when this host has no builder account."""
    return _uid_of(builder_name())


def is_writer(uid: int | None = None) -> bool:
    """``uid`` (default: this process) may write the shared cache: root or the builder."""
    uid = os.geteuid() if uid is None else uid
    return uid == 0 or uid == builder_uid()


@dataclass(frozen=True)
class Trust:
    """The owners whose entries a reader of one cache uses."""

    uids: frozenset[int]

    @classmethod
    def shared(cls) -> Trust:
        """Root and the builder: the only writers of the shared cache."""
        b = builder_uid()
        return cls(frozenset({0} if b is None else {0, b}))

    @classmethod
    def private(cls) -> Trust:
        """A user's own cache: that user alone (what root made in it, the user could not
        write)."""
        return cls(frozenset({os.geteuid()}))

    @classmethod
    def current(cls) -> Trust:
        """Root, the builder and this process: what a layer or lock of a cache this
        process writes may belong to."""
        return cls(cls.shared().uids | {os.geteuid()})

    def owner(self, uid: int) -> bool:
        return uid in self.uids

    def why_not_file(self, st: os.stat_result) -> str:
        """'' when a cache file with this ``lstat`` may be used, else why not (a phrase)."""
        if not stat.S_ISREG(st.st_mode):
            return f"is not a regular file ({kind(st.st_mode)})"
        if not self.owner(st.st_uid):
            return f"belongs to {who(st.st_uid)}, {self._not_whom()}"
        if st.st_nlink != 1:
            return f"has {st.st_nlink} hard links (another name may change it)"
        return _why_writable(st)

    def why_not_dir(self, st: os.stat_result) -> str:
        """'' when a directory others cannot rearrange: trusted owner, and sticky where
        others may write to it."""
        if not stat.S_ISDIR(st.st_mode):
            return f"is not a directory ({kind(st.st_mode)})"
        if not self.owner(st.st_uid):
            return f"belongs to {who(st.st_uid)}, {self._not_whom()}"
        if st.st_mode & stat.S_ISVTX:
            return ""
        return _why_writable(st)

    def why_not_cache_dir(self, st: os.stat_result) -> str:
        """'' for a directory of a cache: trusted owner and writable by nobody else
        (sticky is not enough inside a cache: no 1777)."""
        if not stat.S_ISDIR(st.st_mode):
            return f"is not a directory ({kind(st.st_mode)})"
        if not self.owner(st.st_uid):
            return f"belongs to {who(st.st_uid)}, {self._not_whom()}"
        return _why_writable(st)

    def _not_whom(self) -> str:
        names = sorted(who(u) for u in self.uids)
        return "who is not " + " or ".join(names)


def _why_writable(st: os.stat_result) -> str:
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o002:
        return f"is writable by every user (mode {mode:04o})"
    if mode & 0o020:
        return f"is writable by its group (mode {mode:04o})"
    return ""


def kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "of unknown type"


def may_remove(st: os.stat_result, trust: Trust | None = None) -> bool:
    """An entry this process may delete: its own, or, for root and the builder, the other
    shared writer's (when ``trust``, the cache's, trusts it too); never another user's
    (docs/security.md)."""
    euid = os.geteuid()
    if st.st_uid == euid:
        return True
    if not is_writer(euid) or not Trust.shared().owner(st.st_uid):
        return False
    return trust is None or trust.owner(st.st_uid)
