"""A layer blob's bytes turned into the uncompressed layer tar as they arrive.

gzip goes through ``igzip -dc`` (Debian's ``isal``: ISA-L, 2-3x faster than zlib) when it is
installed, else in-process with python-isal's zlib when that is installed, else the standard
zlib; zstd through ``zstd -dc``; a plain tar is copied as is. The tools write the tar file
themselves, so the inflated bytes never pass through the interpreter and the inflate runs
beside the download thread's hashing instead of taking turns with it for the GIL.
``SQSHBUILD_NO_ISAL=1`` forces the standard zlib (for benchmarks).
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
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out,
                                         stderr=self._err)
            assert self.proc.stdin is not None
            grow_pipe(self.proc.stdin.fileno(), 1 << 20)

    def write(self, chunk: bytes) -> None:
        if self.failed:
            return
        if self.proc is not None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(chunk)
            except BrokenPipeError:
                self.failed = self.kind
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
            if self.proc.wait() != 0:
                self._tool_failed(str(self.proc.args[0]))  # type: ignore[index]
            self.proc = None
        elif self.zlib is not None:
            self.out.write(self.zlib.flush())

    def _tool_failed(self, tool: str) -> None:
        """Bad data, or the tool could not write the tar (disk full): OSError for the latter,
        so that the caller reports it as a disk problem."""
        assert self._err is not None
        self._err.seek(0)
        text = self._err.read(4096).decode(errors="replace").strip()
        if "writ" in text.lower() or "no space" in text.lower():
            full = "no space" in text.lower() or _nearly_full(self.out.fileno())
            raise OSError(errno.ENOSPC if full else errno.EIO,
                          f"{os.path.basename(tool)} could not write the layer "
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
