"""The layer tar a download writes, across its attempts (layerfiles.LayerTar)."""

from __future__ import annotations

import gzip
import hashlib

import pytest

from squall.sqshbuild.layerfiles import LayerTar, Mismatch

BLOB = b"a plain layer tar's bytes " * 200  # neither gzip nor zstd: copied as is


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_restart_neither_counts_a_byte_twice_nor_keeps_the_first_bytes(tmp_path):
    seen: list[int] = []
    tar = LayerTar(tmp_path / "l.tar.tmp", digest(BLOB), seen.append)
    tar.start()
    tar.feed(BLOB[:3000])
    tar.start()  # the registry could not resume: from the first byte again
    tar.feed(BLOB[:1000])
    tar.feed(BLOB[1000:])
    tar.publish(tmp_path / "l.tar", "test")
    tar.close()
    assert sum(seen) == len(BLOB)
    assert (tmp_path / "l.tar").read_bytes() == BLOB
    assert not (tmp_path / "l.tar.tmp").exists()


def test_a_cut_goes_on_into_the_same_file(tmp_path):
    tar = LayerTar(tmp_path / "l.tar.tmp", digest(BLOB), None)
    tar.start()
    tar.feed(BLOB[:2000])
    inode = (tmp_path / "l.tar.tmp").stat().st_ino
    tar.feed(BLOB[2000:])  # the next attempt, resumed with Range, feeds the rest
    assert (tmp_path / "l.tar.tmp").stat().st_ino == inode
    tar.publish(tmp_path / "l.tar", "test")
    assert (tmp_path / "l.tar").read_bytes() == BLOB


def test_other_bytes_are_not_published_and_leave_nothing(tmp_path):
    tar = LayerTar(tmp_path / "l.tar.tmp", digest(BLOB), None)
    tar.start()
    tar.feed(BLOB[:-1] + b"!")
    with pytest.raises(Mismatch):
        tar.publish(tmp_path / "l.tar", "test")
    tar.close()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("piece", [1, 3, 4096])
def test_a_gzip_blob_in_small_pieces_is_inflated(tmp_path, piece):
    """A slow link may bring the first bytes one by one: the format is told from enough."""
    blob = gzip.compress(BLOB)
    tar = LayerTar(tmp_path / "l.tar.tmp", digest(blob), None)
    tar.start()
    for i in range(0, len(blob), piece):
        tar.feed(blob[i:i + piece])
    tar.publish(tmp_path / "l.tar", "test")
    tar.close()
    assert (tmp_path / "l.tar").read_bytes() == BLOB


def test_a_blob_shorter_than_a_magic_number_is_kept(tmp_path):
    tar = LayerTar(tmp_path / "l.tar.tmp", digest(b"ab"), None)
    tar.start()
    tar.feed(b"a")
    tar.feed(b"b")
    tar.publish(tmp_path / "l.tar", "test")
    assert (tmp_path / "l.tar").read_bytes() == b"ab"
