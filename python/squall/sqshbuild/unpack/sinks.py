"""Where the merged tree goes, written in one pass: :class:`TarSink` (one tar stream for
``tar2sqfs``) or :class:`DirSink` (a directory for ``mksquashfs``).

Normalisation follows what ``enroot import`` produces: every file owned by root (the squash
step also says ``-all-root``), modes as :func:`normalise_mode` says, setuid/setgid bits kept
as they are (Enroot mounts the root filesystem ``nosuid``), extended attributes dropped.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from squall.errors import SquallError
from squall.sqshbuild import tarhead
from squall.sqshbuild.unpack.entries import COPY_CHUNK, Entry, Span, normalise_mode, normalise_name

_ZEROS = bytes(tarfile.BLOCKSIZE * 2)


def _copy_span(span: Span, size: int, out_fd: int) -> None:
    """Copy ``size`` bytes of a layer file to ``out_fd`` in the kernel (sendfile)."""
    in_fd, offset = span
    while size > 0:
        sent = os.sendfile(out_fd, in_fd, offset, min(size, 1 << 30))
        if sent == 0:
            raise SquallError("a layer file is shorter than its tar headers say: delete the "
                              "layer cache entry and build again")
        offset += sent
        size -= sent


class TarSink:
    """Writes the merged tree as one uncompressed tar stream (fed to ``tar2sqfs``).

    Headers are written by Python; file data from layer files on disk goes from the page
    cache to the pipe with ``sendfile`` and never enters the interpreter."""

    def __init__(self, out: BinaryIO, on_bytes: Callable[[int], None] | None = None) -> None:
        self._out = out
        try:
            self._fd = out.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = -1
        self._on_bytes = on_bytes
        self._closed = False

    def _header(self, info: tarfile.TarInfo) -> None:
        self._out.write(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))

    def _pad(self, size: int) -> None:
        rest = size % tarfile.BLOCKSIZE
        if rest:
            self._out.write(bytes(tarfile.BLOCKSIZE - rest))

    def add(self, entry: Entry, data: BinaryIO | None, span: Span | None = None) -> None:
        """The entry owned by root, its mode normalised, its data from ``span`` or ``data``."""
        info = entry.info
        size = info.size if info.isfile() else 0
        link = ""
        if info.type == tarfile.SYMTYPE:
            link = info.linkname
        elif info.type == tarfile.LNKTYPE:
            link = normalise_name(info.linkname, "") or ""
        self._out.write(tarhead.gnu_header(entry.path, info.type, normalise_mode(info), size,
                                           info.mtime, link))
        if not size:
            return
        if span is not None and self._fd >= 0:
            self._out.flush()
            _copy_span(span, size, self._fd)
        elif span is not None:
            self._write_span(span, size)
        elif data is not None:
            self._write_data(entry, data, size)
        self._pad(size)
        if self._on_bytes is not None:
            self._on_bytes(size)

    def _write_span(self, span: Span, size: int) -> None:
        """A layer file's bytes through Python (the output has no file descriptor)."""
        in_fd, offset = span
        left = size
        while left:
            chunk = os.pread(in_fd, min(left, COPY_CHUNK), offset)
            if not chunk:
                raise SquallError("a layer file is shorter than its tar headers say")
            self._out.write(chunk)
            offset += len(chunk)
            left -= len(chunk)

    def _write_data(self, entry: Entry, data: BinaryIO, size: int) -> None:
        left = size
        while left:
            chunk = data.read(min(left, COPY_CHUNK))
            if not chunk:
                raise SquallError(f"layer {entry.layer} ends inside {entry.path!r}: the "
                                  "layer is truncated; delete it and build again")
            self._out.write(chunk)
            left -= len(chunk)

    def add_synthetic(self, path: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mode = mode
        info.mtime = 0
        self._header(info)
        self._out.write(data)
        self._pad(len(data))

    def ensure_dir(self, path: str) -> None:
        info = tarfile.TarInfo(path)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        self._header(info)

    def close(self) -> None:
        if not self._closed:
            self._out.write(_ZEROS)
            self._out.flush()
            self._closed = True

    def abort(self) -> None:
        """Stop without writing the end of the archive (the build failed)."""
        self._closed = True


class DirSink:
    """Writes the merged tree into a directory (fed to ``mksquashfs -all-root``)."""

    def __init__(self, root: Path, on_bytes: Callable[[int], None] | None = None) -> None:
        self.root = root
        self._on_bytes = on_bytes
        self._dir_times: list[tuple[str, float, int]] = []
        root.mkdir(parents=True, exist_ok=True)

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path)

    def _parents(self, full: str) -> None:
        parent = os.path.dirname(full)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755, exist_ok=True)

    def _write_file(self, full: str, size: int, data: BinaryIO | None, span: Span | None
                    ) -> None:
        with open(full, "wb") as out:
            if span is not None:
                in_fd, offset = span
                left = size
                while left:
                    try:
                        n = os.copy_file_range(in_fd, out.fileno(), left, offset)
                    except OSError:
                        n = out.write(os.pread(in_fd, min(left, COPY_CHUNK), offset))
                    if n == 0:
                        raise SquallError("a layer file is shorter than its tar headers say")
                    offset += n
                    left -= n
            elif data is not None:
                shutil.copyfileobj(data, out, COPY_CHUNK)

    def add(self, entry: Entry, data: BinaryIO | None, span: Span | None = None) -> None:
        info = entry.info
        full = self._full(entry.path)
        mode = normalise_mode(info)
        try:
            self._parents(full)
            if info.isdir():
                if not os.path.isdir(full):
                    os.mkdir(full, 0o700)
                os.chmod(full, mode)
                self._dir_times.append((full, info.mtime, mode))
                return
            if info.isfile():
                self._write_file(full, info.size, data, span)
                if self._on_bytes is not None:
                    self._on_bytes(info.size)
            elif info.issym():
                os.symlink(info.linkname, full)
            elif info.islnk():
                target = self._full(normalise_name(info.linkname, entry.layer) or "")
                os.link(target, full)
                return
            elif info.isfifo():
                os.mkfifo(full)
            if not info.issym():
                os.chmod(full, mode)
            os.utime(full, (info.mtime, info.mtime), follow_symlinks=False)
        except OSError as exc:
            raise _os_error(exc, full) from None

    def add_synthetic(self, path: str, data: bytes, mode: int) -> None:
        full = self._full(path)
        self._parents(full)
        with open(full, "wb") as out:
            out.write(data)
        os.chmod(full, mode)
        os.utime(full, (0, 0))

    def ensure_dir(self, path: str) -> None:
        """Make ``path`` (resolved in the image: see :func:`resolve_in_image`) one component
        at a time, never through a symlink, so nothing is created outside the root."""
        full = str(self.root)
        for part in path.split("/"):
            full = os.path.join(full, part)
            try:
                os.mkdir(full, 0o755)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(full).st_mode):
                    raise SquallError(f"cannot make the working directory {path!r}: {full} "
                                      "is not a directory") from None
            except OSError as exc:
                raise _os_error(exc, full) from None

    def close(self) -> None:
        for full, mtime, _mode in reversed(self._dir_times):
            os.utime(full, (mtime, mtime), follow_symlinks=False)


def _os_error(exc: OSError, path: str) -> SquallError:
    if exc.errno == errno.ENOSPC:
        return SquallError(f"disk full while writing {path}: free space there or point "
                           "--work-dir (or TMPDIR) at a larger filesystem")
    return SquallError(f"cannot write {path}: {exc.strerror}")

