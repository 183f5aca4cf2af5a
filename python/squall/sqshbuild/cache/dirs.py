"""Opening a cache's directories: the shared one (root and the builder write it; users
read it) and a user's own (docs/security.md, "Who writes what").

Every directory is reached through descriptors from ``/`` (:func:`safefs.walk`): only
root's, the builder's (or, for a private cache, the user's own) links are followed, every
parent must be one that nobody else can rearrange, and the cache's own directories must be
writable by nobody but their owner. A directory is made with its mode and owner set on its
descriptor and an existing one is never "repaired": a cache an earlier squall made for
every user to write (``1777``) is refused with the command that converts it.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from squall.errors import SquallError
from squall.sqshbuild import safefs
from squall.sqshbuild.cache.layout import (
    LAYER_CACHE_ENV,
    PRIVATE_DIR_MODE,
    SHARED_DIR_MODE,
    SUBDIRS,
)
from squall.sqshbuild.trust import Trust, builder_name, builder_uid, who

Owner = tuple[int, int] | None


class LegacyCache(SquallError):
    """A cache of an earlier squall that every user could write."""


def builder_owner() -> Owner:
    """(uid, gid) that root gives the shared cache's directories: the builder's, when
    there is one and this process is root; else None (the creator keeps them)."""
    uid = builder_uid()
    if os.geteuid() != 0 or uid is None:
        return None
    try:
        return uid, pwd.getpwuid(uid).pw_gid
    except KeyError:
        return None


def _convert_hint(root: Path) -> str:
    return f"convert it with: sqshbuild convert-cache --cache-dir {root} (docs/security.md)"


def _check(fd: int, path: Path, trust: Trust, cache_root: Path) -> None:
    st = os.fstat(fd)
    why = trust.why_not_cache_dir(st)
    if not why:
        return
    if trust.owner(st.st_uid) and stat.S_IMODE(st.st_mode) & 0o022:
        raise LegacyCache(f"the image cache {cache_root} was made by an earlier squall for "
                          f"every user to write ({path} mode {stat.S_IMODE(st.st_mode):04o}): "
                          f"it is neither read nor written; {_convert_hint(cache_root)}")
    raise safefs.Unsafe(f"{path} {why}")


def open_tree(root: Path, trust: Trust, mode: int, owner: Owner,
              create: bool) -> tuple[Path, Path]:
    """Check (and, with ``create``, make what is missing of) a cache at ``root`` and its
    subdirectories; (the root as it really is, the layer root). Raises
    :class:`safefs.Unsafe`, :class:`LegacyCache` or OSError (FileNotFoundError when the
    cache does not exist and ``create`` is false)."""
    links = Trust(trust.uids | Trust.shared().uids)
    make = (0o755 if mode == SHARED_DIR_MODE else mode, None) if create else None
    pfd, parent = safefs.walk(root.parent, links, dirs=links, make=make)
    try:
        if create:
            fd = safefs.make_new_dir(pfd, root.name, mode, owner)
        else:
            fd = safefs.open_dir(root.name, dir_fd=pfd)
    finally:
        os.close(pfd)
    real = parent / root.name
    env_layers = os.environ.get(LAYER_CACHE_ENV)
    try:
        _check(fd, real, trust, real)
        _subdirs(fd, real, trust, mode, owner, create,
                 SUBDIRS if not env_layers else tuple(n for n in SUBDIRS if n != "layers"))
        if not env_layers:
            _subdirs_below(fd, real, "layers", trust, mode, owner, create)
            return real, real / "layers"
    finally:
        os.close(fd)
    return real, open_tree_layers(Path(env_layers), trust, mode, owner, create, real)


def open_tree_layers(path: Path, trust: Trust, mode: int, owner: Owner, create: bool,
                     cache_root: Path) -> Path:
    """A layer cache outside the cache root (SQSHBUILD_LAYER_CACHE), checked the same way."""
    links = Trust(trust.uids | Trust.shared().uids)
    make = (0o755 if mode == SHARED_DIR_MODE else mode, None) if create else None
    pfd, parent = safefs.walk(path.parent, links, dirs=links, make=make)
    try:
        fd = safefs.make_new_dir(pfd, path.name, mode, owner) if create else \
            safefs.open_dir(path.name, dir_fd=pfd)
    finally:
        os.close(pfd)
    try:
        _check(fd, parent / path.name, trust, cache_root)
        _subdirs(fd, parent / path.name, trust, mode, owner, create, ("sha256",))
    finally:
        os.close(fd)
    return parent / path.name


def _subdirs(fd: int, here: Path, trust: Trust, mode: int, owner: Owner, create: bool,
             names: tuple[str, ...]) -> None:
    for name in names:
        try:
            sfd = safefs.make_new_dir(fd, name, mode, owner) if create else \
                safefs.open_dir(name, dir_fd=fd)
        except safefs.Unsafe as exc:
            raise safefs.Unsafe(f"{here}/{exc}") from None
        except OSError as exc:
            if not create and isinstance(exc, FileNotFoundError):
                continue  # a reader: what a writer has not made yet holds nothing
            # named whole: the caller's message names only the cache's root
            raise OSError(exc.errno, exc.strerror, str(here / name)) from None
        try:
            _check(sfd, here / name, trust, here)
        finally:
            os.close(sfd)


def _subdirs_below(fd: int, here: Path, sub: str, trust: Trust, mode: int, owner: Owner,
                   create: bool) -> None:
    try:
        sfd = safefs.open_dir(sub, dir_fd=fd)
    except FileNotFoundError:
        return
    try:
        _subdirs(sfd, here / sub, trust, mode, owner, create, ("sha256",))
    finally:
        os.close(sfd)


def shared_trust_text() -> str:
    name = builder_name()
    return f"root and {name}" if builder_uid() is not None else "root"


def not_writable(root: Path) -> str:
    """Why this writer cannot write the shared cache at ``root``, and the admin's fix."""
    try:
        if os.statvfs(root).f_flag & os.ST_RDONLY:
            return f"the image cache {root} is on a read-only filesystem"
    except OSError:
        pass
    st = os.stat(root)
    name = builder_name() if builder_uid() is not None else "root"
    return (f"the image cache {root} is not writable by {who(os.geteuid())} (owner "
            f"{who(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}): an admin can fix it "
            f"with chown -R {name}: {root}")


PRIVATE = PRIVATE_DIR_MODE
SHARED = SHARED_DIR_MODE
