"""A layer blob's bytes turned into the uncompressed layer tar as they arrive.

gzip goes through ``igzip -dc`` (Debian's ``isal``: ISA-L, 2-3x faster than zlib) when it is
installed, else in-process with python-isal's zlib when that is installed, else the standard
zlib; zstd through ``zstd -dc``; a plain tar is copied as is. The tools write the tar file
themselves, so the inflated bytes never pass through the interpreter and the inflate runs
beside the download thread's hashing instead of taking turns with it for the GIL.
``SQSHBUILD_NO_ISAL=1`` forces the standard zlib (for benchmarks).

A tool that fails is asked why before its data is called bad: a full disk or quota
(``OSError`` with ``ENOSPC`` or ``EDQUOT``, which the caller reports as a full disk), then
bad data.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import zlib
from typing import Any, BinaryIO

from squall.errors import SquallError
from squall.sqshbuild.pipe import grow_pipe

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SNIFF_BYTES = max(len(GZIP_MAGIC), len(ZSTD_MAGIC))  # what Decoder needs to tell the format
_PROBE = 1 << 20  # how much a file must still be able to grow for the disk not to be full


def _no_isal() -> bool:
    return os.environ.get("SQSHBUILD_NO_ISAL") == "1"


def _zlib_module() -> Any:
    """python-isal's zlib when installed (and not switched off), else the standard zlib."""
    if not _no_isal():
        try:
            from isal import isal_zlib  # type: ignore[import-not-found,unused-ignore]
            return isal_zlib
        except ImportError:
            pass
    return zlib


def _nearly_full(fd: int) -> bool:
    try:
        st = os.fstatvfs(fd)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (64 << 20)


def _no_room(fd: int) -> int:
    """``ENOSPC`` or ``EDQUOT`` when the file ``fd`` cannot grow by :data:`_PROBE` bytes
    now (the disk or this user's quota is full), else 0. Asked with ``posix_fallocate``,
    else (not supported there) by writing zeros; the file is cut back to its size."""
    try:
        size = os.fstat(fd).st_size
    except OSError:
        return 0
    full = (errno.ENOSPC, errno.EDQUOT)
    try:
        try:
            os.posix_fallocate(fd, size, _PROBE)
        except OSError as exc:
            if exc.errno in full:
                return exc.errno
            done = 0
            while done < _PROBE:  # a short write is not an error: go on until one is
                wrote = os.pwrite(fd, bytes(min(64 << 10, _PROBE - done)), size + done)
                if wrote <= 0:
                    break
                done += wrote
    except OSError as exc:
        return exc.errno if exc.errno in full else 0
    finally:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass
    return 0


def gzip_tool() -> str | None:
    """``igzip`` when it is installed and not switched off."""
    return None if _no_isal() else shutil.which("igzip")


def describe() -> str:
    """How gzip layers are inflated here, for the benchmark and ``--json``."""
    if gzip_tool():
        return "igzip"
    return "python-isal" if _zlib_module() is not zlib else "zlib"


class Decoder:
    """Feed it the blob's bytes in order (:meth:`write`), then :meth:`finish`; the tar goes to
    ``out``. Errors are kept until :meth:`finish`, which the caller runs only after the
    digest matched: a blob that is not what the manifest says is reported as such."""

    def __init__(self, first: bytes, out: BinaryIO, digest: str) -> None:
        self.out = out
        self.digest = digest
        self.proc: subprocess.Popen[bytes] | None = None
        self.zlib: Any = None
        self._zlib: Any = zlib
        self.kind = ""
        self.failed = ""  # reported by finish(), after the digest was checked
        self._broken = False  # the tool stopped reading its input: finish() asks why
        argv: list[str] | None = None
        if first[:2] == GZIP_MAGIC:
            self.kind = "gzip"
            tool = gzip_tool()
            if tool is not None:
                argv = [tool, "-dc"]
            else:
                self._zlib = _zlib_module()
                self.zlib = self._zlib.decompressobj(wbits=47)
        elif first[:4] == ZSTD_MAGIC:
            self.kind = "zstd"
            exe = shutil.which("zstd")
            if exe is None:
                raise SquallError(f"layer {digest} is zstd-compressed and zstd is not "
                                  "installed: apt install zstd")
            argv = [exe, "-dc"]
        self._err: BinaryIO | None = None
        if argv is not None:
            out.flush()
            self._err = tempfile.TemporaryFile()  # a file: the tool never blocks on it
            # LC_ALL=C: its messages in English, for _tool_failed
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out,
                                         stderr=self._err, env={**os.environ, "LC_ALL": "C"})
            assert self.proc.stdin is not None
            grow_pipe(self.proc.stdin.fileno(), 1 << 20)

    def write(self, chunk: bytes) -> None:
        if self.failed or self._broken:
            return
        if self.proc is not None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(chunk)
            except BrokenPipeError:
                self._broken = True
            return
        if self.zlib is None:
            self.out.write(chunk)
            return
        try:
            while chunk:
                self.out.write(self.zlib.decompress(chunk))
                if self.zlib.eof:  # multi-member gzip
                    chunk = self.zlib.unused_data
                    self.zlib = self._zlib.decompressobj(wbits=47)
                else:
                    chunk = b""
        except (zlib.error, self._zlib.error):
            self.failed = "gzip"

    def finish(self) -> None:
        if self.failed:
            self._bad(self.failed)
        if self.proc is not None:
            self._close_input()
            if self.proc.wait() != 0 or self._broken:
                self._tool_failed(str(self.proc.args[0]))  # type: ignore[index]
            self.proc = None
        elif self.zlib is not None:
            self.out.write(self.zlib.flush())

    def _tool_failed(self, tool: str) -> None:
        """Bad data, or the tool could not write the tar (disk or quota full): OSError for
        the latter, so that the caller reports it as a disk problem. The tool's message is
        read in English (LC_ALL=C); igzip says only that writing failed, so the file is
        then asked whether it can still grow."""
        assert self._err is not None
        self._err.seek(0)
        text = self._err.read(4096).decode(errors="replace").strip()
        low = text.lower()
        code = 0
        if "no space" in low:
            code = errno.ENOSPC
        elif "quota" in low:
            code = errno.EDQUOT
        elif "writ" in low:
            fd = self.out.fileno()
            code = _no_room(fd) or (errno.ENOSPC if _nearly_full(fd) else errno.EIO)
        if code:
            raise OSError(code, f"{os.path.basename(tool)} could not write the layer "
                                f"({text.splitlines()[-1]})")
        self._bad(self.kind)

    def close(self) -> None:
        """Stop the tool, if one still runs (the download failed)."""
        if self.proc is not None:
            self._close_input()
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self._err is not None:
            self._err.close()
            self._err = None

    def _close_input(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def _bad(self, kind: str) -> None:
        raise SquallError(f"layer {self.digest} is not valid {kind} data: the image is "
                          "corrupt; re-push it")
