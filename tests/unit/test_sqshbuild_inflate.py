"""Blob bytes to layer tar: every gzip backend (igzip, python-isal, zlib), zstd and plain
tars give the same bytes, and corrupt data is refused once the caller asks (finish)."""

from __future__ import annotations

import errno
import gzip
import random
import subprocess
import zlib
from pathlib import Path

import pytest

from gate import need_tool
from squall.errors import SquallError
from squall.sqshbuild import inflate

RAW = random.Random(3).randbytes(300_000) + b"text " * 200_000


def backends() -> list[str]:
    """igzip always (Debian's isal, which CI installs: a failure where it is missing);
    python-isal only where that Python module is installed (Debian packages none)."""
    try:
        import isal  # noqa: F401
        return ["zlib", "python-isal", "igzip"]
    except ImportError:
        return ["zlib", "igzip"]


def use_backend(name: str, monkeypatch) -> None:
    if name == "igzip":
        need_tool("igzip", "isal")
    if name == "zlib":
        monkeypatch.setenv("SQSHBUILD_NO_ISAL", "1")
    else:
        monkeypatch.delenv("SQSHBUILD_NO_ISAL", raising=False)
    if name == "python-isal":
        monkeypatch.setattr(inflate, "gzip_tool", lambda: None)
    assert inflate.describe() == name


@pytest.fixture(params=backends())
def backend(request, monkeypatch):
    use_backend(request.param, monkeypatch)
    return request.param


@pytest.fixture(params=[*(f"gzip-{b}" for b in backends()), "zstd"])
def kind(request, monkeypatch) -> str:
    """gzip through each backend, and zstd: one tool, whichever gzip backend is chosen."""
    if request.param == "zstd":
        need_tool("zstd", "zstd")
        return "zstd"
    use_backend(request.param.removeprefix("gzip-"), monkeypatch)
    return "gzip"


def decode(blob: bytes, out: Path, chunk: int = 65536) -> bytes:
    with open(out, "wb") as f:
        dec = inflate.Decoder(blob[:chunk], f, "sha256:" + "0" * 64)
        try:
            for i in range(0, len(blob), chunk):
                dec.write(blob[i:i + chunk])
            dec.finish()
        finally:
            dec.close()
    return out.read_bytes()


def test_gzip_multi_member(backend, tmp_path):
    blob = gzip.compress(RAW[:200_000]) + gzip.compress(RAW[200_000:], compresslevel=9)
    assert decode(blob, tmp_path / "t") == RAW


@pytest.mark.parametrize("where", [100, 5000, 150_000])
def test_gzip_corrupt_is_refused(backend, tmp_path, where):
    blob = bytearray(gzip.compress(RAW))
    blob[where:where + 64] = bytes(64)
    with pytest.raises(SquallError, match="is not valid gzip data: the image is corrupt"):
        decode(bytes(blob), tmp_path / "t")


def test_igzip_output_skips_the_interpreter(monkeypatch, tmp_path):
    need_tool("igzip", "isal")
    monkeypatch.delenv("SQSHBUILD_NO_ISAL", raising=False)
    with open(tmp_path / "t", "wb") as f:
        dec = inflate.Decoder(gzip.compress(b"x"), f, "sha256:" + "0" * 64)
        assert dec.proc is not None and dec.zlib is None
        dec.close()


def test_zstd_and_plain(tmp_path):
    assert decode(RAW, tmp_path / "plain") == RAW
    blob = subprocess.run([need_tool("zstd", "zstd"), "-c", "-3"], input=RAW, capture_output=True,
                          check=True).stdout
    assert decode(blob, tmp_path / "z") == RAW
    with pytest.raises(SquallError, match="not valid zstd data"):
        decode(blob[: len(blob) // 2] + bytes(1000), tmp_path / "z2")


def test_a_full_disk_is_a_disk_error_not_corrupt_data(tmp_path, kind):
    blob = (gzip.compress(RAW) if kind == "gzip" else
            subprocess.run(["zstd", "-c"], input=RAW, capture_output=True, check=True).stdout)
    with open("/dev/full", "wb") as f:
        dec = inflate.Decoder(blob[:65536], f, "sha256:" + "0" * 64)
        try:
            with pytest.raises(OSError) as exc:
                for i in range(0, len(blob), 65536):
                    dec.write(blob[i:i + 65536])
                dec.finish()
        finally:
            dec.close()
    assert not isinstance(exc.value, SquallError)


# -- bounds and full disks (issue 19) -----------------------------------------------------------
BIG = random.Random(4).randbytes(6 << 20)  # incompressible: far more than the tool's pipe holds


def compress(kind: str, data: bytes) -> bytes:
    if kind == "gzip":
        return gzip.compress(data, compresslevel=1)
    return subprocess.run([need_tool("zstd", "zstd"), "-c", "-1"], input=data, capture_output=True,
                          check=True).stdout


def zeros_gzip(n: int) -> bytes:
    """gzip of ``n`` zero bytes, made a MiB at a time (never ``n`` bytes in memory)."""
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [z.compress(block) for _ in range(n >> 20)]
    return b"".join([*parts, z.compress(bytes(n & ((1 << 20) - 1))), z.flush()])


def feed(blob: bytes, out, compressed: int | None = None, chunk: int = 1 << 20) -> None:
    """``compressed``: the size the descriptor gave (None: the Decoder's default)."""
    extra = {} if compressed is None else {"compressed": compressed}
    dec = inflate.Decoder(blob[:chunk], out, "sha256:" + "ab" * 32, **extra)
    try:
        for i in range(0, len(blob), chunk):
            dec.write(blob[i:i + chunk])
        dec.finish()
    finally:
        dec.close()


def test_a_disk_that_fills_while_input_is_pending_is_a_disk_error(kind):
    """The tool dies on its write error while megabytes of input still wait for it: the
    writes to it fail with EPIPE. That is the full disk, not bad data (was: "not valid gzip
    data ... re-push it" with igzip and zstd)."""
    blob = compress(kind, BIG)
    with open("/dev/full", "wb") as f, pytest.raises(OSError) as exc:
        feed(blob, f)
    assert not isinstance(exc.value, SquallError), exc.value
    assert exc.value.errno == errno.ENOSPC, exc.value


def test_a_full_quota_is_told_apart_from_bad_data(monkeypatch, tmp_path):
    """A tool that says its write failed, on a disk with room: the file is asked whether it
    can grow (a quota full for this user: EDQUOT)."""
    tool = tmp_path / "fake-igzip"
    tool.write_text("#!/bin/sh\nhead -c 100 >/dev/null\n"
                    "echo 'igzip: Error encountered while writing to file (null)' >&2\nexit 252\n")
    tool.chmod(0o755)
    monkeypatch.setattr(inflate, "gzip_tool", lambda: str(tool))
    monkeypatch.setattr(inflate, "_no_room", lambda fd: errno.EDQUOT)
    with open(tmp_path / "t", "wb") as f, pytest.raises(OSError) as exc:
        feed(gzip.compress(BIG, compresslevel=1), f)
    assert exc.value.errno == errno.EDQUOT and "igzip could not write" in str(exc.value)
    # a tool that names the reason itself (zstd prints strerror)
    tool.write_text("#!/bin/sh\ncat >/dev/null\necho 'zstd: error 70 : Write error : cannot "
                    "write block : Disk quota exceeded' >&2\nexit 70\n")
    monkeypatch.setattr(inflate, "_no_room", lambda fd: 0)
    with open(tmp_path / "t", "wb") as f, pytest.raises(OSError) as exc:
        feed(gzip.compress(BIG, compresslevel=1), f)
    assert exc.value.errno == errno.EDQUOT


def test_corrupt_data_is_still_corrupt_with_the_input_pending(backend, tmp_path):
    blob = bytearray(gzip.compress(BIG, compresslevel=1))
    blob[300_000:300_064] = bytes(64)
    with open(tmp_path / "t", "wb") as f, pytest.raises(SquallError,
                                                        match="is not valid gzip data"):
        feed(bytes(blob), f)


def test_the_inflated_size_is_bounded_by_the_site_maximum(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("SQSHBUILD_MAX_INFLATED_SIZE", "8M")
    blob = compress(kind, bytes(40 << 20))
    with open(tmp_path / "t", "wb") as f, pytest.raises(SquallError) as exc:
        feed(blob, f, len(blob))
    msg = str(exc.value)
    assert msg.startswith("layer sha256:abababababab inflates to more than 8388608 bytes "
                          "(8 MiB)"), msg
    assert "SQSHBUILD_MAX_INFLATED_SIZE" in msg and "\n" not in msg
    assert (tmp_path / "t").stat().st_size <= (8 << 20) + 1  # stopped there, not after


def test_the_inflated_size_is_bounded_by_a_ratio(backend, tmp_path, monkeypatch):
    """A small blob of zeros (about 1000x): past RATIO_FLOOR and 100 times its size, it is
    stopped; the message names the ratio setting."""
    monkeypatch.setattr(inflate, "RATIO_FLOOR", 1 << 20)
    blob = zeros_gzip(64 << 20)
    limit = 100 * len(blob)
    with open(tmp_path / "t", "wb") as f, pytest.raises(SquallError) as exc:
        feed(blob, f, len(blob))
    msg = str(exc.value)
    assert f"inflates to more than {limit} bytes" in msg and "SQSHBUILD_MAX_INFLATE_RATIO" in msg
    assert f"100 times its {len(blob)} compressed bytes" in msg, msg
    assert (tmp_path / "t").stat().st_size <= limit + 1
    # the floor: a small layer with a zero-filled file is no bomb
    monkeypatch.setattr(inflate, "RATIO_FLOOR", 128 << 20)
    with open(tmp_path / "t", "wb") as f:
        feed(blob, f, len(blob))
    assert (tmp_path / "t").stat().st_size == 64 << 20
    # a higher ratio lets it through
    monkeypatch.setattr(inflate, "RATIO_FLOOR", 1 << 20)
    monkeypatch.setenv("SQSHBUILD_MAX_INFLATE_RATIO", "2000")
    with open(tmp_path / "t", "wb") as f:
        feed(blob, f, len(blob))


def test_the_ratio_holds_when_the_size_was_not_known(backend, tmp_path, monkeypatch):
    """A descriptor without a size: the tar is bounded by the site maximum while it comes,
    and by the ratio to the bytes that came once they are all there."""
    monkeypatch.setattr(inflate, "RATIO_FLOOR", 1 << 20)
    blob = zeros_gzip(16 << 20)
    with open(tmp_path / "t", "wb") as f, pytest.raises(SquallError,
                                                        match="SQSHBUILD_MAX_INFLATE_RATIO"):
        feed(blob, f, compressed=0)


def test_real_layers_pass_the_default_bounds(backend, tmp_path):
    """Libraries, sources and text inflate 2-10x (this text: about 10x)."""
    assert decode(gzip.compress(RAW), tmp_path / "t") == RAW
    text = b"".join(b"%d: the quick brown fox\n" % i for i in range(400_000))
    blob = gzip.compress(text)
    with open(tmp_path / "t", "wb") as f:
        feed(blob, f, len(blob))
    assert (tmp_path / "t").read_bytes() == text


def test_bad_settings_are_one_line(monkeypatch):
    monkeypatch.setenv("SQSHBUILD_MAX_INFLATED_SIZE", "lots")
    with pytest.raises(SquallError, match="SQSHBUILD_MAX_INFLATED_SIZE='lots' is not a size"):
        inflate.inflate_limit(1000)
    monkeypatch.setenv("SQSHBUILD_MAX_INFLATED_SIZE", "1G")
    monkeypatch.setenv("SQSHBUILD_MAX_INFLATE_RATIO", "0.5")
    with pytest.raises(SquallError, match="at least 1"):
        inflate.inflate_limit(1000)
    monkeypatch.setenv("SQSHBUILD_MAX_INFLATE_RATIO", "10")
    assert inflate.inflate_limit(0)[0] == 1 << 30
    assert inflate.inflate_limit(1 << 20)[0] == inflate.RATIO_FLOOR
    assert inflate.inflate_limit(64 << 20)[0] == 640 << 20
    assert inflate.inflate_limit(1 << 30)[0] == 1 << 30


def test_the_ratio_holds_while_the_bytes_arrive(backend, tmp_path, monkeypatch):
    """A descriptor without a size (issue 26): the tar is bounded by the ratio to the bytes
    fed so far, not by the site maximum until the end (16 MiB of zeros made 15 GB of tar
    that way), and the caller is told at once (``too_big``)."""
    monkeypatch.setattr(inflate, "RATIO_FLOOR", 1 << 20)
    blob = zeros_gzip(256 << 20)
    chunk = 16 << 10
    with open(tmp_path / "t", "wb") as f:
        dec = inflate.Decoder(blob[:chunk], f, "sha256:" + "ab" * 32, compressed=0)
        try:
            fed = 0
            for i in range(0, len(blob), chunk):
                dec.write(blob[i:i + chunk])
                fed += len(blob[i:i + chunk])
                if dec.too_big:
                    break
            assert dec.too_big or backend == "igzip", "never stopped while the bytes came"
            with pytest.raises(SquallError) as exc:
                dec.finish()
        finally:
            dec.close()
    msg = str(exc.value)
    assert "SQSHBUILD_MAX_INFLATE_RATIO" in msg and "\n" not in msg, msg
    assert (tmp_path / "t").stat().st_size <= max(1 << 20, 100 * fed) + 1
    assert (tmp_path / "t").stat().st_size < 128 << 20
