"""Start writing a file to disk while it is still being written, so that its final fsync
(the image is published only once it is durable) waits for the last few blocks instead of
the whole image: ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` every quarter second, from a
background thread. Best effort: where the call is missing, the fsync does all the work."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path
from types import TracebackType

SYNC_FILE_RANGE_WRITE = 2
_libc: ctypes.CDLL | None = None


def _sync_file_range() -> ctypes._NamedFuncPointer | None:
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = _libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int) -> bool:
    """Ask the kernel to start writing ``fd``'s dirty pages now; False where it cannot."""
    fn = _sync_file_range()
    return fn is not None and fn(fd, 0, 0, SYNC_FILE_RANGE_WRITE) == 0


class EarlyWriteback:
    """``with EarlyWriteback(path): <a tool writes path>``."""

    def __init__(self, path: Path, interval: float = 0.25) -> None:
        self.path = path
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writeback", daemon=True)

    def __enter__(self) -> EarlyWriteback:
        self._thread.start()
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        fd = -1
        try:
            while not self._stop.wait(self.interval):
                if fd < 0:
                    try:
                        fd = os.open(self.path, os.O_RDONLY)
                    except OSError:
                        continue  # not created yet
                if not start_writeback(fd):
                    return
        finally:
            if fd >= 0:
                os.close(fd)
