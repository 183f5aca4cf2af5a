"""Remove or measure a directory tree through descriptors, never by path.

A scratch tree (an unpacked root filesystem, a private layer directory) may hold
directories the image made read-only and names an image chose. Every step here works on
a descriptor opened ``O_NOFOLLOW|O_DIRECTORY`` below the one before, so a link swapped in
during the walk is removed as a link, never followed. The one mode change: a read-only
directory of this process's own scratch tree that refuses an unlink is opened up with
``fchmod`` on its own descriptor; nothing is chmodded by path, nothing of another user's.
"""

from __future__ import annotations

import errno
import os
import stat

from squall.sqshbuild.safefs import open_dir


def remove_tree(parent_fd: int, name: str) -> None:
    """Remove ``name`` below ``parent_fd`` and everything in it. Raises OSError when some
    of it could not be removed (it is then left for its owner)."""
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    fd = open_dir(name, dir_fd=parent_fd)
    try:
        if os.fstat(fd).st_ino != st.st_ino:
            raise OSError(errno.EAGAIN, "replaced during removal", name)
        _empty(fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _empty(fd: int) -> None:
    opened = False
    for entry in os.scandir(fd):
        try:
            remove_tree(fd, entry.name)
        except PermissionError:
            # a read-only directory the image made, in this process's own tree: opened up
            # on its own descriptor, never another user's
            if opened or os.fstat(fd).st_uid != os.geteuid():
                raise
            os.fchmod(fd, 0o700)
            opened = True
            remove_tree(fd, entry.name)


def tree_size(parent_fd: int, name: str) -> int:
    """Bytes of the regular files below ``name`` (best effort, links not followed)."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size if stat.S_ISREG(st.st_mode) else 0
    try:
        fd = open_dir(name, dir_fd=parent_fd)
    except OSError:
        return 0
    try:
        return sum(tree_size(fd, e.name) for e in os.scandir(fd))
    except OSError:
        return 0
    finally:
        os.close(fd)


def remove_path(path: str) -> None:
    """:func:`remove_tree` of a path whose parent this process made or checked."""
    parent, name = os.path.split(os.path.abspath(path))
    fd = open_dir(parent)
    try:
        remove_tree(fd, name)
    finally:
        os.close(fd)


def remove_scratch(path: str | os.PathLike[str]) -> None:
    """:func:`remove_path` of a build's scratch tree, leaving what could not be removed."""
    try:
        remove_path(os.fspath(path))
    except OSError:
        pass  # what could not be removed is a dead build's, removed by the next run or gc
