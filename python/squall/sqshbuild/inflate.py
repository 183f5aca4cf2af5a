"""A layer blob's bytes turned into the uncompressed layer tar as they arrive.

gzip goes through ``igzip -dc`` (Debian's ``isal``: ISA-L, 2-3x faster than zlib) when it is
installed, else in-process with python-isal's zlib when that is installed, else the standard
zlib; zstd through ``zstd -dc``; a plain tar is copied as is. The tools write the tar file
themselves, so the inflated bytes never pass through the interpreter and the inflate runs
beside the download thread's hashing instead of taking turns with it for the GIL.
``SQSHBUILD_NO_ISAL=1`` forces the standard zlib (for benchmarks).

What a layer inflates to is bounded (:func:`inflate_limit`): at most
``SQSHBUILD_MAX_INFLATED_SIZE`` bytes, and at most ``SQSHBUILD_MAX_INFLATE_RATIO`` times its
compressed size (a layer may always reach :data:`RATIO_FLOOR`), and that ratio holds for the
compressed bytes seen so far while they arrive: a layer whose descriptor gives no size is
stopped as soon as its tar outgrows them, not once the blob ended (16 MiB of zeros made
15 GB of tar that way). The tools get the bound as their soft ``RLIMIT_FSIZE``, raised as
the input comes, so the kernel stops them at it; in-process inflating never asks zlib for
more than :data:`PIECE` bytes at a time. A plain tar is copied to ``out`` only when asked
(``copy_plain``): the layer cache keeps its blob as the tar instead, written once. A tool
that fails is asked why before its data is called bad: a layer over the bound, a full
disk or quota (``OSError`` with ``ENOSPC`` or ``EDQUOT``, which the caller reports as a full
disk), then bad data.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import tempfile
import zlib
from typing import Any, BinaryIO

from squall.errors import SquallError
from squall.sqshbuild import site
from squall.sqshbuild.pipe import grow_pipe
from squall.sqshbuild.transport import env_number, human, short_digest

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SNIFF_BYTES = max(len(GZIP_MAGIC), len(ZSTD_MAGIC))  # what Decoder needs to tell the format
MAX_INFLATED_ENV = "SQSHBUILD_MAX_INFLATED_SIZE"
RATIO_ENV = "SQSHBUILD_MAX_INFLATE_RATIO"
# The biggest layers of real images (nvcr.io's PyTorch: one of 20+ GB) with room to spare:
# this is the site's disk to protect, not a format limit.
DEFAULT_MAX_INFLATED = site.DEFAULTS["max_inflated_size"]
# Layers of files, libraries and sources inflate 2-10x; 100x leaves room for text-heavy
# ones, and still stops a gzip bomb (zeros inflate about 1000x) early.
DEFAULT_RATIO = 100.0
# What any layer may inflate to whatever its ratio: small layers with a zero-filled file
# (useradd's sparse /var/log/lastlog, a preallocated file) are about 1000x.
RATIO_FLOOR = 256 << 20
PIECE = 1 << 20  # the most in-process inflating asks for at a time (memory)
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


def inflate_limit(compressed: int) -> tuple[int, str]:
    """The most bytes a layer of ``compressed`` bytes (0: not known yet) may inflate to,
    and what sets that bound, for the message."""
    most, setting = site.load().limit("max_inflated_size", MAX_INFLATED_ENV)
    ratio = env_number(RATIO_ENV, DEFAULT_RATIO)
    if ratio < 1:
        raise SquallError(f"{RATIO_ENV}={ratio:g}: give a ratio of at least 1 (a plain tar "
                          "layer inflates 1x)")
    by_ratio = max(RATIO_FLOOR, int(compressed * ratio))
    if compressed > 0 and by_ratio < most:
        return by_ratio, (f"the most is {ratio:g} times its {compressed} compressed bytes, "
                          f"and never less than {human(RATIO_FLOOR)} ({RATIO_ENV}): a "
                          f"decompression bomb, or raise {RATIO_ENV} if the image is real")
    return most, f"the most {setting} allows: raise {setting} if the image is real"


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
    digest matched: a blob that is not what the manifest says is reported as such.

    ``compressed`` is the blob's length as far as it is known before it arrives (its
    descriptor's size, else the server's; 0: not known): the tar is stopped at
    :func:`inflate_limit` of it, and checked against the limit for the bytes that came in
    the end."""

    def __init__(self, first: bytes, out: BinaryIO, digest: str, compressed: int = 0,
                 copy_plain: bool = True) -> None:
        self.out = out
        self._copy_plain = copy_plain  # False: a plain blob is the tar, the caller keeps it
        self.digest = digest
        self.proc: subprocess.Popen[bytes] | None = None
        self.zlib: Any = None
        self._zlib: Any = zlib
        self.kind = ""
        self.failed = ""  # reported by finish(), after the digest was checked
        self.fed = 0  # blob bytes given to write()
        self.written = 0  # tar bytes written (by the tool: known at finish())
        # the bound the descriptor's (or server's) size sets, if it gave one
        self._given = inflate_limit(compressed) if compressed > 0 else None
        self.limit, self._why = self._bound()
        self._broken = False  # the tool stopped reading its input: finish() asks why
        self._watch = False  # the tool's size bound could not be set or raised
        self._tool_limit = self._tool_top = 0  # the tool's soft and hard RLIMIT_FSIZE
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
        self.plain = not self.kind  # an uncompressed tar
        self._err: BinaryIO | None = None
        if argv is not None:
            out.flush()
            self._err = tempfile.TemporaryFile()  # a file: the tool never blocks on it
            # restore_signals=False: the tool keeps this interpreter's SIG_IGN for SIGXFSZ,
            # so a write past its RLIMIT_FSIZE fails (EFBIG) instead of dumping core;
            # LC_ALL=C: its messages in English, for _tool_failed
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out,
                                         stderr=self._err, restore_signals=False,
                                         env={**os.environ, "LC_ALL": "C"})
            self._bound_tool()
            assert self.proc.stdin is not None
            grow_pipe(self.proc.stdin.fileno(), 1 << 20)

    def _bound(self) -> tuple[int, str]:
        """The most the tar may hold now: the ratio to the bytes fed so far (at least the
        floor), never more than the descriptor's size allows; a tie names the latter."""
        now = inflate_limit(max(self.fed, 1))
        if self._given is not None and self._given[0] <= now[0]:
            return self._given
        return now

    def _bound_tool(self) -> None:
        """The tool may not make the tar longer than one byte past the limit (the tar starts
        empty, and the tool writes nothing before its first input): the soft limit follows
        the bound as input comes (:meth:`_raise_tool_bound`), up to the hard one."""
        assert self.proc is not None
        most = self._given[0] if self._given is not None else inflate_limit(0)[0]
        try:
            hard = resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE)[1]
            top = most + 1 if hard == resource.RLIM_INFINITY else min(most + 1, hard)
            self._tool_limit = min(self.limit + 1, top)
            resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (self._tool_limit, top))
            resource.prlimit(self.proc.pid, resource.RLIMIT_CORE, (0, 0))
            self._tool_top = top
        except (OSError, ValueError):
            self._watch = True

    def _raise_tool_bound(self) -> None:
        assert self.proc is not None
        want = min(self.limit + 1, self._tool_top)
        if self._watch or want <= self._tool_limit:
            return
        try:
            resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (want, self._tool_top))
            self._tool_limit = want
        except (OSError, ValueError):
            self._watch = True  # it exited (finish() asks why), or it cannot be raised

    def write(self, chunk: bytes) -> None:
        if self.failed or self._broken:
            return
        self.fed += len(chunk)
        self.limit, self._why = self._bound()
        if self.proc is not None:
            assert self.proc.stdin is not None
            self._raise_tool_bound()  # before the tool has the bytes that allow it
            try:
                self.proc.stdin.write(chunk)
            except BrokenPipeError:
                self._broken = True
            if os.fstat(self.out.fileno()).st_size > self.limit:
                self.proc.kill()
                self.failed = "big"
            return
        if self.zlib is None:
            if self._copy_plain:
                self._put(chunk)
            else:
                self.written += len(chunk)  # the caller's blob is the tar: written once
            return
        try:
            while not self.failed:
                data = self.zlib.decompress(chunk, PIECE)
                self._put(data)
                if self.zlib.eof:  # multi-member gzip
                    chunk = self.zlib.unused_data
                    self.zlib = self._zlib.decompressobj(wbits=47)
                    if not chunk:
                        break
                    continue
                chunk = self.zlib.unconsumed_tail
                # python-isal may hold output back with an empty tail: ask until it is short
                if not chunk and len(data) < PIECE:
                    break
        except (zlib.error, self._zlib.error):
            self.failed = "gzip"

    def _put(self, data: bytes) -> None:
        """Write inflated bytes, up to the limit."""
        if self.written + len(data) > self.limit:
            self.failed = "big"
            return
        self.out.write(data)
        self.written += len(data)

    @property
    def too_big(self) -> bool:
        """The tar outgrew its bound: the caller stops the download (:meth:`finish` says
        so), whatever is still to come."""
        return self.failed == "big"

    def finish(self) -> None:
        self.limit, self._why = self._bound()
        if self.failed == "big":
            self._too_big()
        if self.failed:
            self._bad(self.failed)
        if self.proc is not None:
            self._close_input()
            rc = self.proc.wait()
            self.written = os.fstat(self.out.fileno()).st_size
            if self.written > self.limit:
                self._too_big()
            if rc != 0 or self._broken:
                self._tool_failed(str(self.proc.args[0]))  # type: ignore[index]
            self.proc = None
        elif self.zlib is not None:
            self._put(self.zlib.flush())
            if self.failed:
                self._too_big()
        # the bound for the bytes that came (the descriptor may have given no size)
        limit, why = inflate_limit(self.fed)
        if self.written > limit:
            self.limit, self._why = limit, why
            self._too_big()

    def _too_big(self) -> None:
        raise SquallError(f"layer {short_digest(self.digest)} inflates to more than "
                          f"{self.limit} bytes ({human(self.limit)}): {self._why}")

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
