"""A layer tar read by the merge while its download is still writing it.

The download (:mod:`squall.sqshbuild.layers`) inflates a layer blob into ``<hex>.tar.tmp``
as the bytes arrive; without this the merge could only open a layer once the whole blob
was downloaded and verified, so on a cold build the squash sat idle behind the network.
A :class:`LayerStream` is the handshake between the two: the download says when it starts
writing a file (:meth:`LayerStream.begin`) and when it is over (:meth:`LayerStream.end`,
with its error if it failed); the merge reads that file through a :class:`GrowingFile`,
whose reads wait until the bytes asked for are there.

Nothing read this way is trusted before the digest is checked: the merge waits for the
download's end after the layer's last member (:meth:`GrowingFile.verified`), a failed
download fails the merge with the download's own error, and a download that had to start
its file again (a registry that could not resume, a mirror that served other bytes) raises
:class:`StreamRestart`, so the build discards what it squashed and merges again from the
verified layers only. (A connection cut mid-layer that the registry resumes goes on into
the same file: the merge just waits.)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

POLL = 0.002  # seconds between looks at a file the inflater is still writing


class StreamRestart(Exception):
    """A layer's download started over after the merge read from it: merge again."""


class LayerStream:
    """One layer's download as the merge sees it (thread-safe: the download runs in a pool)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._fd = -1
        self._attempt = 0
        self._ended = False
        self._error: BaseException | None = None

    # -- the download's side --
    def begin(self, path: Path) -> None:
        """The download (re)starts writing the layer tar at ``path`` (already created)."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        with self._cond:
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = fd
            self._attempt += 1
            self._cond.notify_all()

    def end(self, error: BaseException | None = None) -> None:
        """The download is over: the file is complete and verified, or ``error`` says why
        not. Also called when the layer needed no download (cached, or fetched by another
        build): the merge then reads the cached file."""
        with self._cond:
            self._ended = True
            self._error = error
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._cond.notify_all()

    # -- the merge's side --
    def open(self) -> GrowingFile | None:
        """The layer tar being written, or None when no download writes it here (read the
        cached file instead); raises the download's error if it failed before starting."""
        with self._cond:
            while self._fd < 0 and not self._ended:
                self._cond.wait()
            if self._fd < 0:
                if self._error is not None:
                    raise self._error
                return None
            return GrowingFile(self, os.dup(self._fd), self._attempt)

    def _wait(self, attempt: int, fd: int, n: int) -> int:
        """Block until the file behind ``fd`` holds ``n`` bytes or the download ended;
        the size then."""
        with self._cond:
            while True:
                if self._attempt != attempt:
                    raise StreamRestart(self.name)
                size = os.fstat(fd).st_size
                if size >= n:
                    return size
                if self._ended:
                    if self._error is not None:
                        raise self._error
                    return os.fstat(fd).st_size  # complete: a short file is the layer's
                self._cond.wait(POLL)

    def _finished(self, attempt: int) -> None:
        with self._cond:
            while not self._ended:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            if self._attempt != attempt:
                raise StreamRestart(self.name)


class GrowingFile:
    """A read-only file whose reads wait for the download to write the bytes asked for:
    what :class:`squall.sqshbuild.tarhead.Reader` and :mod:`tarfile` read a layer through."""

    def __init__(self, stream: LayerStream, fd: int, attempt: int) -> None:
        self._stream = stream
        self._fd = fd
        self._attempt = attempt
        self._pos = 0
        self._known = 0  # bytes known to be in the file: no need to look again below that

    def fileno(self) -> int:
        return self._fd

    def wait_for(self, n: int) -> None:
        """Until the first ``n`` bytes are in the file (or the download ended)."""
        if n > self._known:
            self._known = self._stream._wait(self._attempt, self._fd, n)

    def pread(self, n: int, offset: int) -> bytes:
        self.wait_for(offset + n)
        return os.pread(self._fd, n, offset)

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            self._stream._finished(self._attempt)
            n = os.fstat(self._fd).st_size - self._pos
        data = self.pread(n, self._pos)
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_CUR:
            offset += self._pos
        elif whence == os.SEEK_END:
            self._stream._finished(self._attempt)
            offset += os.fstat(self._fd).st_size
        self._pos = offset
        return offset

    def tell(self) -> int:
        return self._pos

    def verified(self) -> None:
        """Wait for the download's end: return once the digest matched; raise its error, or
        :class:`StreamRestart` if it started its file over after this was opened."""
        self._stream._finished(self._attempt)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
