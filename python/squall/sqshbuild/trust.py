"""Whose entries of a shared cache a reader uses (docs/security.md).

On a cluster every user can write to ``/fsx``, so an entry of the shared cache (image,
sidecar, layer, index record, lock) proves nothing by its name. A reader uses an entry
only when its owner is root, one of the site's builder identities, or the reader itself;
anything else is ignored with one ``note:`` line and never deleted, renamed or written.

The builder identities come from ``SQSHBUILD_BUILDERS`` (comma-separated user names,
uids and ``@group`` names) or, when it is unset, from ``/etc/squall/builders`` (one entry
a line, ``#`` comments). A group names every user whose primary group it is or who is
listed as its member.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from squall.log import log

BUILDERS_ENV = "SQSHBUILD_BUILDERS"
BUILDERS_FILE = Path("/etc/squall/builders")


def who(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@functools.lru_cache(maxsize=4096)
def _in_group(uid: int, gid: int) -> bool:
    """``uid``'s primary group is ``gid`` or it is listed as a member: looked up for this
    one user and group (never a walk over every user, which a site's LDAP may refuse)."""
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    if user.pw_gid == gid:
        return True
    try:
        return user.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        return False


def _parse(entries: list[str], where: str) -> tuple[frozenset[int], frozenset[int]]:
    uids: set[int] = set()
    gids: set[int] = set()
    for raw in entries:
        item = raw.split("#", 1)[0].strip()
        if not item:
            continue
        try:
            if item.startswith("@"):
                name = item[1:]
                gids.add(int(name) if name.isdigit() else grp.getgrnam(name).gr_gid)
            else:
                uids.add(int(item) if item.isdigit() else pwd.getpwnam(item).pw_uid)
        except KeyError:
            log.warning("note: %s names %r, which is no user or group on this host: "
                        "ignored", where, item)
    return frozenset(uids), frozenset(gids)


@dataclass(frozen=True)
class Trust:
    """Who this process trusts: root, the builders and itself."""

    uids: frozenset[int]
    gids: frozenset[int]

    @classmethod
    def current(cls) -> Trust:
        return _current(os.environ.get(BUILDERS_ENV), os.geteuid())

    def owner(self, uid: int) -> bool:
        return uid in self.uids or any(_in_group(uid, g) for g in self.gids)

    def why_not_file(self, st: os.stat_result) -> str:
        """'' when a cache file with this ``lstat`` may be used, else why not (a phrase)."""
        if not stat.S_ISREG(st.st_mode):
            return f"is not a regular file ({kind(st.st_mode)})"
        if not self.owner(st.st_uid):
            return f"belongs to {who(st.st_uid)}, who is not root, a builder or you"
        if st.st_nlink != 1:
            return f"has {st.st_nlink} hard links (another name may change it)"
        return self._why_writable(st)

    def why_not_dir(self, st: os.stat_result) -> str:
        """'' when a directory others cannot rearrange: trusted owner, and sticky where
        untrusted users may write to it."""
        if not stat.S_ISDIR(st.st_mode):
            return f"is not a directory ({kind(st.st_mode)})"
        if not self.owner(st.st_uid):
            return f"belongs to {who(st.st_uid)}, who is not root, a builder or you"
        if st.st_mode & stat.S_ISVTX:
            return ""
        return self._why_writable(st)

    def _why_writable(self, st: os.stat_result) -> str:
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o002:
            return f"is writable by every user (mode {mode:04o})"
        if mode & 0o020 and st.st_gid not in self.gids:
            return f"is writable by group {_group(st.st_gid)} (mode {mode:04o})"
        return ""


@functools.lru_cache(maxsize=16)
def _current(env: str | None, euid: int) -> Trust:
    if env is not None:
        uids, gids = _parse(env.split(","), BUILDERS_ENV)
    else:
        try:
            lines = BUILDERS_FILE.read_text().splitlines()
        except OSError:
            lines = []
        uids, gids = _parse(lines, str(BUILDERS_FILE))
    return Trust(uids | {0, euid}, gids | {0})  # group root: its members are admins


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "of unknown type"


def may_remove(st: os.stat_result, trust: Trust | None = None) -> bool:
    """An entry this process may delete: its own, or (for root) a trusted owner's; never
    another user's (docs/security.md)."""
    euid = os.geteuid()
    if st.st_uid == euid:
        return True
    return euid == 0 and (trust or Trust.current()).owner(st.st_uid)
