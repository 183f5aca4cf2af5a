"""Blob bytes to layer tar: every gzip backend (igzip, python-isal, zlib), zstd and plain
tars give the same bytes, and corrupt data is refused once the caller asks (finish)."""

from __future__ import annotations

import gzip
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.sqshbuild import inflate

RAW = random.Random(3).randbytes(300_000) + b"text " * 200_000


def backends() -> list[str]:
    out = ["zlib"]
    try:
        import isal  # noqa: F401
        out.append("python-isal")
    except ImportError:
        pass
    if shutil.which("igzip"):
        out.append("igzip")
    return out


@pytest.fixture(params=backends())
def backend(request, monkeypatch):
    if request.param == "zlib":
        monkeypatch.setenv("SQSHBUILD_NO_ISAL", "1")
    else:
        monkeypatch.delenv("SQSHBUILD_NO_ISAL", raising=False)
    if request.param == "python-isal":
        monkeypatch.setattr(inflate, "gzip_tool", lambda: None)
    assert inflate.describe() == request.param
    return request.param


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
    if not shutil.which("igzip"):
        pytest.skip("igzip (Debian package isal) is not installed")
    monkeypatch.delenv("SQSHBUILD_NO_ISAL", raising=False)
    with open(tmp_path / "t", "wb") as f:
        dec = inflate.Decoder(gzip.compress(b"x"), f, "sha256:" + "0" * 64)
        assert dec.proc is not None and dec.zlib is None
        dec.close()


def test_zstd_and_plain(tmp_path):
    assert decode(RAW, tmp_path / "plain") == RAW
    if not shutil.which("zstd"):
        pytest.skip("zstd is not installed")
    blob = subprocess.run(["zstd", "-c", "-3"], input=RAW, capture_output=True,
                          check=True).stdout
    assert decode(blob, tmp_path / "z") == RAW
    with pytest.raises(SquallError, match="not valid zstd data"):
        decode(blob[: len(blob) // 2] + bytes(1000), tmp_path / "z2")


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_a_full_disk_is_a_disk_error_not_corrupt_data(backend, tmp_path, kind):
    if kind == "zstd" and not shutil.which("zstd"):
        pytest.skip("zstd is not installed")
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
