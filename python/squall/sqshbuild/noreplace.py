"""Renaming a file into place only where no file is yet: the first verified copy of a
content-addressed layer wins, and a later one never replaces it (issue 39).

``renameat2(RENAME_NOREPLACE)`` where the kernel and file system have it; elsewhere (NFS,
an old C library) a hard link, which fails on an existing name just the same, then the
source unlinked; on a file system without hard links, a rename after a check (what every
build did before: a copy that lands meanwhile is replaced by one of the same bytes).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from pathlib import Path

RENAME_NOREPLACE = 1
_AT_FDCWD = -100
# The kernel or the file system has no renameat2 or no RENAME_NOREPLACE.
_UNSUPPORTED = (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP)


_Rename = Callable[[int, bytes, int, bytes, int], int]


def _renameat2() -> _Rename | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_uint]
    fn.restype = ctypes.c_int
    call: _Rename = fn
    return call


_RENAMEAT2 = _renameat2()


def place_new(src: Path | str, dst: Path | str, src_dir_fd: int | None = None,
              dst_dir_fd: int | None = None) -> bool:
    """Rename ``src`` to ``dst`` (relative to the directory descriptors, when given) unless
    ``dst`` exists: True when placed, False when another file is there (``src`` is then
    left as it was)."""
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(_AT_FDCWD if src_dir_fd is None else src_dir_fd, os.fsencode(src),
                      _AT_FDCWD if dst_dir_fd is None else dst_dir_fd, os.fsencode(dst),
                      RENAME_NOREPLACE) == 0:
            return True
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            return False
        if err not in _UNSUPPORTED:
            raise OSError(err, os.strerror(err), str(src), None, str(dst))
    try:
        os.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=False)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        try:
            os.stat(dst, dir_fd=dst_dir_fd, follow_symlinks=False)
            return False
        except FileNotFoundError:
            pass
        os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        return True
    os.unlink(src, dir_fd=src_dir_fd)
    return True
