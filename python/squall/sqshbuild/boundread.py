"""Files anyone may have planted, opened so that nothing blocks or follows a link.

``inspect`` reads an image and its sidecar that any user may have put where the caller
looks: a FIFO there must not block, a link must not be followed (to a root 0600 file
it would print), ``/dev/zero`` or a huge file must not be read whole. Every open here is
``O_NOFOLLOW|O_NONBLOCK``, the descriptor must be a regular file (``fstat``), and reads
stop at a cap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
SIDECAR_CAP = 1 << 20  # sqshbuild's sidecars are a few KiB


class NotRegular(Exception):
    """The path is not a regular file this process may read; the message says what it is."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path) -> int:
    """A blocking read descriptor of the regular file ``path``; a link there is never
    followed. ``FileNotFoundError`` when absent, :class:`NotRegular` for anything else."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular("is a symlink") from None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO nobody writes (never blocks)
            raise NotRegular("is a socket or a FIFO") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"is {_kind(st.st_mode)}")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, cap: int) -> bytes:
    """At most ``cap`` bytes of the regular file ``path`` (see :func:`open_regular`); a
    longer one is :class:`NotRegular` (larger than the cap), never read further."""
    fd = open_regular(path)
    try:
        if os.fstat(fd).st_size > cap:
            raise NotRegular(f"is larger than {cap} bytes")
        parts: list[bytes] = []
        have = 0
        while have <= cap:
            chunk = os.read(fd, min(1 << 16, cap + 1 - have))
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            have += len(chunk)
        raise NotRegular(f"is larger than {cap} bytes")
    finally:
        os.close(fd)
