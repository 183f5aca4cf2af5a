"""Pipes between sqshbuild and the tools it feeds (tar2sqfs, igzip, zstd)."""

from __future__ import annotations

import fcntl
from pathlib import Path

F_SETPIPE_SZ = 1031


def grow_pipe(fd: int, want: int = 8 << 20) -> None:
    """A bigger pipe lets both ends run in parallel instead of taking turns every 64 KiB
    (best effort: the size is capped by ``/proc/sys/fs/pipe-max-size``)."""
    try:
        size = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    except (OSError, ValueError):
        size = 1 << 20
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, min(size, want))
    except OSError:
        pass
