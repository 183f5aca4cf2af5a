"""Layer streams bounded while they arrive, written once (issue 26, "Reads without bounds"):
an unsized layer (``size: 0``, the body chunked, no length) was bounded by the ratio only
at its end (16 MiB of zeros made 15 GB of ``.tar.tmp`` in 60 s), and an unsized plain body
was written twice (the ``.partial`` blob and a copy of it as ``.tar.tmp``). The cache sits
on a small tmpfs, so what the disk had to hold shows (these tests run as root)."""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import one_error_line, run_env, sqshbuild_cmd
from faults import FaultProxy, Rule
from imagekit import Blobs, Image, layer, sha
from sqfs import cat

from gate import need_root

pytestmark = pytest.mark.registry


@dataclass
class ChunkedProxy(FaultProxy):
    """:class:`faults.FaultProxy` that serves the blobs named in ``chunked`` with their
    real bytes, chunked: no Content-Length, so nothing tells their size before the end."""

    chunked: dict[str, bytes] = field(default_factory=dict)
    custom: list[Rule] = field(default_factory=list)

    def _handle(self, h, method: str) -> None:
        digest = next((d for d in self.chunked if d in h.path), None)
        if digest is None or method != "GET":
            return super()._handle(h, method)
        self.log.append((time.monotonic(), h.path, "chunked"))
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        data = self.chunked[digest]
        try:
            for i in range(0, len(data), 64 << 10):
                piece = data[i:i + (64 << 10)]
                h.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        h.close_connection = True


@pytest.fixture
def chunky(registry):
    p = ChunkedProxy(registry.base)
    yield p
    p.close()


@pytest.fixture
def small_disk(tmp_path):
    def mount(size: str) -> Path:
        mnt = tmp_path / f"disk-{size}"
        mnt.mkdir()
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                            str(mnt)], check=True, capture_output=True)
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            need_root("mounting a small tmpfs")
            raise AssertionError(f"cannot mount a tmpfs: {exc}") from None
        mounted.append(mnt)
        return mnt

    mounted: list[Path] = []
    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def zeros_layer(n: int) -> bytes:
    """A gzip layer with one file of ``n`` zero bytes, about 1000x (level 9), made a MiB at
    a time."""
    info = tarfile.TarInfo("zeros")
    info.size, info.mtime, info.mode = n, 1_700_000_000, 0o644
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [z.compress(info.tobuf(tarfile.PAX_FORMAT))]
    block = bytes(1 << 20)
    out += [z.compress(block) for _ in range(n >> 20)]
    out += [z.compress(bytes(-n % 512 + 1024)), z.flush()]
    return b"".join(out)


def unsized(image: Image, which: int) -> bytes:
    doc = json.loads(image.manifest())
    doc["layers"][which]["size"] = 0
    return json.dumps(doc).encode()


def sqshbuild(args: list[str], home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sqshbuild_cmd(), *args], env={**run_env(home), **env},
                          capture_output=True, text=True, timeout=300)


def serve_unsized(registry, chunky: ChunkedProxy, image: Image, which: int) -> str:
    repo = f"streams/{uuid.uuid4().hex[:8]}"
    registry.pusher.push(repo, "v1", image)
    chunky.add(r"/manifests/", "replace", unsized(image, which), image.media_type, times=None)
    chunky.chunked[sha(image.layers[which])] = image.layers[which]
    return f"{chunky.host}/{repo}:v1"


def test_an_unsized_bomb_is_stopped_by_the_ratio_while_it_arrives(registry, chunky, clean_env,
                                                                  small_disk):
    """1 GiB of zeros in about 1 MB of gzip, with no size anywhere: the ratio bound (here
    its floor, 256 MiB) holds while the bytes come. Before, the tar grew to the site
    maximum until the blob ended, and this 320 MiB disk filled."""
    disk = small_disk("320m")
    bomb = zeros_layer(1 << 30)
    assert len(bomb) < (256 << 20) // 100  # the floor is the bound all along
    image = Blobs([layer(("file", "a", "a")), bomb], {"Cmd": ["x"]})
    ref = serve_unsized(registry, chunky, image, 1)
    proc = sqshbuild(["--cache-dir", str(disk), ref], clean_env, SQSHBUILD_RETRIES="1")
    err = one_error_line(proc)
    assert f"layer {sha(bomb)[:19]} inflates to more than 268435456 bytes (256 MiB)" in err, err
    assert "raise SQSHBUILD_MAX_INFLATE_RATIO" in err, err
    layers = disk / "layers" / "sha256"
    assert not list(layers.glob("*.tar.tmp")), list(layers.iterdir())  # its partial tar: gone
    assert not (layers / f"{sha(bomb)[7:]}.tar").exists()


def test_an_unsized_plain_layer_is_written_once(registry, chunky, clean_env, small_disk):
    """A 48 MiB plain tar on a 80 MiB disk: once as the blob, which is the tar, fits; twice
    (the blob and a copy of it) did not."""
    disk = small_disk("80m")
    text = b"".join(b"%08d the same line of text, squashed well\n" % i
                    for i in range((48 << 20) // 48))
    plain = layer(("file", "big.txt", text), compress=False)
    image = Image([layer(("file", "a", "a")), plain], {"Cmd": ["x"]})
    ref = serve_unsized(registry, chunky, image, 1)
    proc = sqshbuild(["-q", "--cache-dir", str(disk), ref], clean_env)
    assert proc.returncode == 0, proc.stderr
    out = Path(proc.stdout.strip())
    assert cat(out, "a") == "a"
    layers = disk / "layers" / "sha256"
    assert (layers / f"{sha(plain)[7:]}.tar").read_bytes() == plain
    assert not list(layers.glob("*.tar.tmp")) and not list(layers.glob("*.partial"))


def test_a_killed_builds_partial_tar_is_removed_by_the_next_build(registry, chunky, clean_env,
                                                                  cache_dir):
    """A killed build's ``<hex>.tar.tmp`` (here 15 GB, sparse) goes with the next build of
    that layer."""
    image = Image([layer(("file", "a", "a")), layer(("file", "b", "bee"))], {"Cmd": ["x"]})
    ref = serve_unsized(registry, chunky, image, 1)
    first = sqshbuild(["-q", "--cache-dir", str(cache_dir), ref], clean_env)
    assert first.returncode == 0, first.stderr
    layers = cache_dir / "layers" / "sha256"
    top = sha(image.layers[1])[7:]
    for name in (f"{top}.tar", f"{top}.ok"):
        (layers / name).unlink()
    for p in cache_dir.glob("*.sqsh"):
        p.unlink()
    with open(layers / f"{top}.tar.tmp", "wb") as f:
        f.truncate(15 << 30)
    proc = sqshbuild(["-q", "--cache-dir", str(cache_dir), ref], clean_env)
    assert proc.returncode == 0, proc.stderr
    assert not (layers / f"{top}.tar.tmp").exists()
    assert cat(Path(proc.stdout.strip()), "b") == "bee"
