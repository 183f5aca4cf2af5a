"""Write a file so that readers see either the old one or the whole new one, never a part.

The one way squall replaces a small file in place (cache records, sidecars, generated
sbatch scripts): the data goes to a new temporary name in the same directory, created
exclusively and never through a link, then is renamed over the target.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path


def temp_name(path: Path, prefix: str = ".") -> Path:
    """``PREFIX NAME.<host>.<pid>~<random>`` beside ``path``: whose it is stays readable,
    so a cleanup can tell a dead writer's leftover from a live one's."""
    return path.with_name(f"{prefix}{path.name}.{socket.gethostname()}.{os.getpid()}"
                          f"~{uuid.uuid4().hex[:8]}")


def write_atomic(path: Path, data: bytes | str, mode: int = 0o644, *, tmp: Path | None = None,
                 fsync: bool = True) -> None:
    """Replace ``path`` by a file holding ``data`` with ``mode`` (whatever the umask).

    ``tmp`` is the temporary name (default: :func:`temp_name`); ``fsync`` makes the data
    durable before the rename (skip it for records that are only a cache). Raises OSError;
    the temporary file is removed then, and ``path`` is left as it was."""
    tmp = temp_name(path) if tmp is None else tmp
    raw = data.encode() if isinstance(data, str) else data
    # O_EXCL | O_NOFOLLOW: an existing name (anyone's link, file or FIFO) is an error
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)  # created above, exclusively: ours
        except OSError:
            pass
        raise
