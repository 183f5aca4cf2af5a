"""The fast tar header reader and writer give exactly what tarfile gives, on every kind of
archive: plain, GNU long names, PAX records, global PAX headers, ustar prefixes, base-256
numbers, V7 directories, signed checksums, cut and corrupt archives."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import pytest

from squall.sqshbuild import tarhead

ATTRS = ("name", "type", "size", "mode", "uid", "gid", "mtime", "linkname", "uname", "gname",
         "devmajor", "devminor", "offset", "offset_data", "pax_headers", "chksum")


def archive(fmt: int, entries: list[tuple[str, bytes, str, bytes]], uid: int = 1000,
            mtime: float = 1_600_000_000, global_pax: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, pax_headers=global_pax) as tar:
        for name, type_, link, data in entries:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.uid, info.gid = type_, link, uid, uid + 1
            info.uname, info.gname, info.mtime, info.mode = "user", "group", mtime, 0o4755
            info.size = len(data) if type_ == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if info.size else None)
    return buf.getvalue()


def members_tarfile(path: Path) -> list[tuple[object, ...]] | str:
    try:
        with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tar:
            return [tuple(getattr(m, a) for a in ATTRS) for m in tar]
    except tarfile.TarError as exc:
        return f"{type(exc).__name__}: {exc}"


def members_fast(path: Path) -> list[tuple[object, ...]] | str:
    try:
        with open(path, "rb") as f:
            return [tuple(getattr(m, a) for a in ATTRS) for m in tarhead.Reader(f)]
    except tarfile.TarError as exc:
        return f"{type(exc).__name__}: {exc}"


LONG = "d" * 60 + "/" + "n" * 70
ENTRIES = [
    ("dir", tarfile.DIRTYPE, "", b""),
    ("dir/file", tarfile.REGTYPE, "", b"x" * 1000),
    ("dir/empty", tarfile.REGTYPE, "", b""),
    ("dir/link", tarfile.SYMTYPE, "../elsewhere", b""),
    ("dir/hard", tarfile.LNKTYPE, "dir/file", b""),
    ("dir/fifo", tarfile.FIFOTYPE, "", b""),
    ("dir/ünïcode", tarfile.REGTYPE, "", b"u"),
    (LONG, tarfile.REGTYPE, "", b"long"),
    ("dir/longlink", tarfile.SYMTYPE, "t" * 150, b""),
    ("dir/block-exact", tarfile.REGTYPE, "", b"b" * 512),
]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
def test_reader_matches_tarfile(tmp_path, fmt):
    entries = ENTRIES if fmt != tarfile.USTAR_FORMAT else [
        e for e in ENTRIES if e[0] != "dir/longlink" and "ü" not in e[0]]
    p = tmp_path / "a.tar"
    p.write_bytes(archive(fmt, entries))
    got = members_fast(p)
    assert got == members_tarfile(p)
    assert len(got) == len(entries)


@pytest.mark.parametrize("kw", [
    {"uid": 8 ** 8},                        # base-256 uid (GNU) or a PAX record
    {"mtime": 1_600_000_000.25},            # fractional mtime: a PAX record
    {"mtime": -5},                          # negative mtime
    {"global_pax": {"comment": "global"}},  # global header applies to every member
])
def test_reader_matches_tarfile_on_unusual_fields(tmp_path, kw):
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        if "global_pax" in kw and fmt != tarfile.PAX_FORMAT:
            continue
        try:
            data = archive(fmt, ENTRIES[:4], **kw)
        except ValueError:
            continue  # the format cannot hold it
        p = tmp_path / f"{fmt}.tar"
        p.write_bytes(data)
        assert members_fast(p) == members_tarfile(p)


def header(name: str, type_: bytes = tarfile.REGTYPE, size: int = 0, prefix: bytes = b"",
           signed: bool = False) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = type_, size
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    block[156:157] = type_
    block[345:345 + len(prefix)] = prefix
    block[148:156] = b" " * 8
    total = sum(b - 256 if signed and b > 127 else b for b in block)
    block[148:156] = b"%06o\0 " % total
    return bytes(block)


def test_reader_matches_tarfile_on_v7_dirs_prefixes_and_signed_checksums(tmp_path):
    data = (header("v7dir/", tarfile.AREGTYPE) + header("v7file", tarfile.AREGTYPE, 3)
            + b"abc".ljust(512, b"\0") + header("name", prefix=b"pre/fix")
            + header("h\xe9", signed=True) + header("after") + bytes(1024))
    p = tmp_path / "a.tar"
    p.write_bytes(data)
    got = members_fast(p)
    assert got == members_tarfile(p)
    assert [m[0] for m in got] == ["v7dir", "v7file", "pre/fix/name", "h\xe9", "after"]
    assert got[0][1] == tarfile.DIRTYPE


def test_reader_matches_tarfile_on_cut_and_corrupt_archives(tmp_path):
    data = archive(tarfile.GNU_FORMAT, ENTRIES)
    rng = random.Random(7)
    cuts = [0, 100, 512, 700, 1024, 1536, 2000, len(data) - 1024, len(data) - 1]
    cuts += [rng.randrange(len(data)) for _ in range(30)]
    p = tmp_path / "a.tar"
    for cut in cuts:
        p.write_bytes(data[:cut])
        assert members_fast(p) == members_tarfile(p), cut
    for _ in range(60):
        bad = bytearray(data)
        pos = rng.randrange(len(bad))
        bad[pos] = rng.randrange(256)
        p.write_bytes(bytes(bad))
        assert members_fast(p) == members_tarfile(p), pos


def test_reader_refuses_what_tarfile_refuses(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"not a tar archive at all " * 40)
    with pytest.raises(tarfile.ReadError), open(p, "rb") as f:
        tarhead.Reader(f)


@pytest.mark.parametrize("name,type_,mode,size,mtime,link", [
    ("usr/bin/python3", tarfile.REGTYPE, 0o755, 12345, 1_700_000_000, ""),
    ("usr", tarfile.DIRTYPE, 0o755, 0, 0, ""),
    ("usr/", tarfile.DIRTYPE, 0o700, 0, 5, ""),
    ("l", tarfile.SYMTYPE, 0o777, 0, 1, "../target/here"),
    ("h", tarfile.LNKTYPE, 0o644, 0, 1, "usr/bin/python3"),
    ("p", tarfile.FIFOTYPE, 0o600, 0, 1, ""),
    ("s", tarfile.REGTYPE, 0o4755 | 0o170000, 1, 1, ""),
    ("é/ü/€", tarfile.REGTYPE, 0o644, 1, 1, ""),
    ("bad\udcff", tarfile.REGTYPE, 0o644, 1, 1, ""),  # surrogate-escaped byte
    ("n" * 100, tarfile.REGTYPE, 0o644, 1, 1, ""),
    ("n" * 101, tarfile.REGTYPE, 0o644, 1, 1, ""),
    ("d" * 100, tarfile.DIRTYPE, 0o755, 0, 1, ""),
    ("l2", tarfile.SYMTYPE, 0o777, 0, 1, "t" * 100),
    ("l3", tarfile.SYMTYPE, 0o777, 0, 1, "t" * 101),
    ("big", tarfile.REGTYPE, 0o644, 8 ** 11, 1, ""),
    ("big2", tarfile.REGTYPE, 0o644, 8 ** 11 - 1, 8 ** 11 - 1, ""),
    ("future", tarfile.REGTYPE, 0o644, 1, 8 ** 11, ""),
    ("past", tarfile.REGTYPE, 0o644, 1, -1, ""),
    ("frac", tarfile.REGTYPE, 0o644, 1, 1.5, ""),
])
def test_writer_matches_tarfile(name, type_, mode, size, mtime, link):
    ref = tarfile.TarInfo(name)
    ref.type, ref.mode, ref.size, ref.mtime, ref.linkname = type_, mode, size, mtime, link
    ref.uname = ref.gname = "root"
    want = ref.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
    assert tarhead.gnu_header(name, type_, mode, size, mtime, link) == want


def test_checksum_is_the_byte_sum():
    rng = random.Random(1)
    for _ in range(200):
        block = bytes(rng.choice([0, 255, rng.randrange(256)]) for _ in range(512))
        assert tarhead.checksum(block) == sum(block[:148]) + 256 + sum(block[156:])
