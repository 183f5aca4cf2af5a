"""The merge reading a layer while its download still writes it (growing.py): it starts
before the layer is complete, never reads bytes that are not there yet, fails with the
download's own error, and starts over when the download did (never keeping unverified
bytes)."""

from __future__ import annotations

import io
import tarfile
import threading
import time
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.sqshbuild.growing import LayerStream, StreamRestart
from squall.sqshbuild.unpack import Layer, TarSink, merge_layers


def tar_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def merged(layers: list[Layer]) -> dict[str, bytes]:
    out = io.BytesIO()
    merge_layers(layers, TarSink(out))
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


class Download:
    """Plays a download's part by hand: begin, write, end (with or without an error)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stream = LayerStream("sha256:" + "a" * 64)
        self.f: io.BufferedWriter | None = None

    def begin(self) -> None:
        self.path.unlink(missing_ok=True)  # a new attempt writes a new file, as layers.py
        self.f = open(self.path, "wb", buffering=0)
        self.stream.begin(self.path)

    def write(self, data: bytes) -> None:
        assert self.f is not None
        self.f.write(data)

    def layer(self) -> Layer:
        return Layer(self.stream.name, resolve=lambda: self.path, stream=self.stream)


def in_thread(fn) -> tuple[threading.Thread, list[object]]:
    result: list[object] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the test
            result.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def test_the_merge_starts_before_the_layer_is_complete_and_reads_only_written_bytes(tmp_path):
    files = {f"f{i}": bytes([i]) * (3000 + i) for i in range(40)}
    data = tar_of(files)
    dl = Download(tmp_path / "l.tar")
    dl.begin()
    t, result = in_thread(lambda: merged([dl.layer()]))
    half = len(data) // 2
    dl.write(data[:half])
    time.sleep(0.3)
    assert t.is_alive()           # waiting for the rest, not failing on a short file
    dl.write(data[half:])
    dl.stream.end()
    t.join(10)
    assert result == [files]


def test_a_download_that_fails_fails_the_merge_with_its_own_error(tmp_path):
    data = tar_of({"big": b"x" * 100_000})
    dl = Download(tmp_path / "l.tar")
    dl.begin()
    t, result = in_thread(lambda: merged([dl.layer()]))
    dl.write(data[:5000])
    time.sleep(0.1)
    dl.stream.end(SquallError("download of the layer from reg kept failing: check the network"))
    t.join(10)
    assert isinstance(result[0], SquallError) and "kept failing" in str(result[0])


@pytest.mark.parametrize("when", ["while reading", "after the last member"])
def test_a_download_started_over_makes_the_merge_start_over(tmp_path, when):
    """A mirror served other (valid tar) bytes: whatever the merge read of them, it must not
    go on as if they were the layer."""
    evil = tar_of({"who": b"mirror"})
    good = tar_of({"who": b"origin"})
    dl = Download(tmp_path / "l.tar")
    dl.begin()
    t, result = in_thread(lambda: merged([dl.layer()]))
    if when == "while reading":
        dl.write(evil[:700])
    else:
        dl.write(evil)
    time.sleep(0.2)
    dl.begin()                    # digest mismatch: the next source, a new file
    dl.write(good)
    dl.stream.end()
    t.join(10)
    assert len(result) == 1 and isinstance(result[0], StreamRestart), result
    # merged again from the verified layer, the result is the origin's
    assert merged([Layer(dl.stream.name, path=dl.path)]) == {"who": b"origin"}


def test_a_layer_no_download_writes_is_read_from_the_cache(tmp_path):
    """Cached already, or fetched by another build: the stream ends without a file."""
    path = tmp_path / "cached.tar"
    path.write_bytes(tar_of({"a": b"cached"}))
    stream = LayerStream("sha256:" + "b" * 64)
    stream.end()
    t, result = in_thread(lambda: merged([Layer(stream.name, resolve=lambda: path,
                                                 stream=stream)]))
    t.join(10)            # a merge waiting for a download that never starts fails here
    assert result == [{"a": b"cached"}]


def test_layers_are_merged_top_first_while_the_lower_ones_download(tmp_path):
    lower, upper = Download(tmp_path / "lower.tar"), Download(tmp_path / "upper.tar")
    lower.begin()
    upper.begin()
    t, result = in_thread(lambda: merged([lower.layer(), upper.layer()]))
    upper.write(tar_of({"a": b"upper", "b": b"upper"}))
    upper.stream.end()
    lower.write(tar_of({"a": b"lower", "c": b"lower"}))
    time.sleep(0.1)
    assert t.is_alive()
    lower.stream.end()
    t.join(10)
    assert result == [{"a": b"upper", "b": b"upper", "c": b"lower"}]
