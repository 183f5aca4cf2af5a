"""Tar headers read and written fast, with :mod:`tarfile` as the reference and the fallback.

The merge reads every header of every layer and writes one header per kept entry; with
:mod:`tarfile` that costs about 60 us an entry (most of it Python-level checksums and octal
fields), which on a 2-CPU host competes with the squash for the same cores. Here a plain
header (the ustar/GNU types 0-7, octal numbers, an unsigned checksum that matches) is parsed
or written directly; everything else (PAX and GNU long-name records, sparse files, base-256
numbers, global PAX headers, the end of the archive, a bad or signed checksum) goes through
:mod:`tarfile` itself, so the results are :mod:`tarfile`'s in every case
(``tests/unit/test_sqshbuild_tarhead.py`` compares them).
"""

from __future__ import annotations

import functools
import os
import struct
import tarfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

BLOCK = tarfile.BLOCKSIZE
_ENC = tarfile.ENCODING
_FAST_TYPES = frozenset(b"01234567\0")
_REGULAR = frozenset(b"07\0")  # REGTYPE, CONTTYPE, AREGTYPE: data blocks follow
_SPACES = b" " * 8
# name mode uid gid size mtime chksum type linkname magic+version uname gname major minor prefix
_FIELDS = struct.Struct("100s8s8s8s12s12s8sc100s8s32s32s8s8s155s")


def _sum(buf: bytes) -> int:
    """Sum of the bytes of ``buf`` (at most 512): adler32's low half is 1 + that sum modulo
    65521, exact for up to 256 bytes (256 * 255 < 65521), so it is taken in two halves."""
    return (zlib.adler32(buf[:256]) & 0xFFFF) + (zlib.adler32(buf[256:]) & 0xFFFF) - 2


def checksum(block: bytes) -> int:
    """The unsigned header checksum: every byte, the checksum field counted as spaces."""
    return _sum(block[:148] + _SPACES + block[156:])


def _octal(field: bytes) -> int:
    """An octal number field; ValueError for anything :func:`tarfile.nti` treats specially."""
    try:  # the usual "0000644\0": digits, then NULs or spaces
        return int(field.rstrip(b"\0 ") or b"0", 8)
    except ValueError:
        pass
    if field[0] & 0x80:
        raise ValueError("base-256")
    end = field.find(0)
    if end >= 0:
        field = field[:end]
    if not field.isascii():
        raise ValueError("not ASCII")
    return int(field.strip() or b"0", 8)


def _text(field: bytes) -> str:
    end = field.find(0)
    if end >= 0:
        field = field[:end]
    return field.decode(_ENC, "surrogateescape")


def parse(block: bytes) -> tarfile.TarInfo | None:
    """A plain header as :meth:`tarfile.TarInfo.frombuf` reads it, or None when this block
    needs :mod:`tarfile` (any other type, base-256 numbers, checksum mismatch, zeros)."""
    if len(block) != BLOCK or block[156] not in _FAST_TYPES:
        return None
    (name_b, mode, uid, gid, size, mtime, chk, type_, link_b, _magic, uname, gname, major,
     minor, prefix) = _FIELDS.unpack_from(block)
    try:
        chksum = _octal(chk)
        if chksum != checksum(block):
            return None
        info = tarfile.TarInfo()
        info.mode = _octal(mode)
        info.uid = _octal(uid)
        info.gid = _octal(gid)
        info.size = _octal(size)
        info.mtime = _octal(mtime)
        info.devmajor = _octal(major)
        info.devminor = _octal(minor)
    except ValueError:
        return None
    if info.size < 0:
        return None
    info.chksum = chksum
    info.type = type_
    name = _text(name_b)
    info.linkname = _text(link_b)
    info.uname = _text(uname)
    info.gname = _text(gname)
    if info.type == tarfile.AREGTYPE and name.endswith("/"):
        info.type = tarfile.DIRTYPE
    if info.type == tarfile.DIRTYPE:
        name = name.rstrip("/")
    if prefix[0] != 0:
        name = _text(prefix) + "/" + name
    info.name = name
    return info


class Reader:
    """The members of an uncompressed tar file, read with ``pread`` at known offsets: the
    same :class:`tarfile.TarInfo` objects (``offset``, ``offset_data`` included) and the same
    errors as iterating ``tarfile.open(fileobj=f, mode="r:")``."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._fd = f.fileno()
        self._tar: tarfile.TarFile | None = None
        self._pread: Callable[[int, int], bytes] = functools.partial(os.pread, self._fd)
        self._first = parse(self._pread(BLOCK, 0))
        if self._first is None:  # not plain, or not a tar at all: tarfile says which
            f.seek(0)
            self._tar = tarfile.open(fileobj=f, mode="r:")

    def _slow(self, offset: int) -> tarfile.TarInfo | None:
        # firstmember and members are TarFile's own attributes, missing from typeshed
        if offset == 0:
            assert self._tar is not None
            first: Any = self._tar
            info: tarfile.TarInfo | None = first.firstmember
            first.firstmember = None
            return info
        if self._tar is None:
            self._f.seek(0)
            self._tar = tarfile.open(fileobj=self._f, mode="r:")
        tar: Any = self._tar
        tar.firstmember = None
        tar.members = []
        tar.offset = offset
        # TarFile.next reads the byte before a member it has to seek to: that is how a
        # file cut inside a member's data is reported ("unexpected end of data").
        self._f.seek(offset - 1)
        member: tarfile.TarInfo | None = tar.next()
        return member

    def __iter__(self) -> Iterator[tarfile.TarInfo]:
        offset = 0
        while True:
            info = None
            if offset == 0:
                info = self._first
            elif self._tar is None or not self._tar.pax_headers:  # global PAX: tarfile only
                info = parse(self._pread(BLOCK, offset))
            if info is not None:
                info.offset = offset
                info.offset_data = offset + BLOCK
                offset += BLOCK
                if info.type[0] in _REGULAR:
                    offset += -(-info.size // BLOCK) * BLOCK
            else:
                info = self._slow(offset)
                if info is None:
                    return
                assert self._tar is not None
                offset = self._tar.offset
            yield info


def _octal_field(n: int, digits: int) -> bytes:
    return b"%0*o\0" % (digits - 1, n)


_HEAD_TAIL = tarfile.GNU_MAGIC + b"root".ljust(32, b"\0") * 2 + b"\0" * (16 + 155 + 12)
_ZERO_ID = _octal_field(0, 8) * 2


def gnu_header(name: str, type_: bytes, mode: int, size: int, mtime: int | float,
               linkname: str = "") -> bytes:
    """What :meth:`tarfile.TarInfo.tobuf` gives in GNU format (UTF-8 names) for an entry
    owned by root:root, built directly when every field fits one plain header block."""
    if type_ == tarfile.DIRTYPE and not name.endswith("/"):
        name += "/"
    bname = name.encode("utf-8", "surrogateescape")
    blink = linkname.encode("utf-8", "surrogateescape")
    if (len(bname) > 100 or len(blink) > 100 or type_ in (tarfile.CHRTYPE, tarfile.BLKTYPE)
            or not 0 <= size < 8 ** 11 or type(mtime) is not int or not 0 <= mtime < 8 ** 11):
        return _slow_header(name, type_, mode, size, mtime, linkname)
    head = (bname.ljust(100, b"\0") + _octal_field(mode & 0o7777, 8) + _ZERO_ID
            + _octal_field(size, 12) + _octal_field(mtime, 12))
    rest = type_ + blink.ljust(100, b"\0") + _HEAD_TAIL
    return head + b"%06o\0 " % (_sum(head) + 256 + _sum(rest)) + rest


def _slow_header(name: str, type_: bytes, mode: int, size: int, mtime: int | float,
                 linkname: str) -> bytes:
    out = tarfile.TarInfo(name)
    out.type, out.mode, out.size, out.mtime, out.linkname = type_, mode, size, mtime, linkname
    out.uname = out.gname = "root"
    return out.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
