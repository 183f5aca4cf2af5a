"""Bounds on everything a registry sends (issue 19), through a fault-injecting proxy in front
of the real docker-registry: a layer whose descriptor gives no size is bounded by the
server's Content-Length and SQSHBUILD_MAX_BLOB_SIZE, a descriptor above that maximum is
refused before anything is downloaded, a layer's inflated size is bounded by
SQSHBUILD_MAX_INFLATED_SIZE and SQSHBUILD_MAX_INFLATE_RATIO, a redirect's body is never
read, and a full disk is "disk full" naming the directory whatever decoder ran (igzip, zlib,
zstd). Each violation is one line naming the layer, the limit and the setting."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import tarfile
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import one_error_line, run_env, sqshbuild_cmd
from faults import FaultProxy, Rule
from imagekit import Blobs, Image, layer, sha
from sqfs import cat

from gate import need_root, need_tool

pytestmark = pytest.mark.registry

MANIFEST = r"/manifests/"
OCTETS = "application/octet-stream"


@dataclass
class BoundsProxy(FaultProxy):
    """:class:`faults.FaultProxy` with two more answers, each counting in ``sent`` the body
    bytes that went out before the client stopped reading:

    * ``("length", n)``: 200 with ``Content-Length: n`` and zeros;
    * ``("chunked", n)``: 200 with ``n`` zeros, chunked (no length), and no last chunk;
    * ``("redirect", location, n)``: a 302 to ``location`` with ``n`` bytes of body.

    Zeros: what the bytes are does not matter, no layer is read before its digest matched."""

    custom: list[Rule] = field(default_factory=list)
    sent: Counter[str] = field(default_factory=Counter)

    def answer(self, pattern: str, *action: object, times: int | None = 1) -> None:
        self.custom.append(Rule(pattern, tuple(action), times))

    def _handle(self, h, method: str) -> None:
        rule = next((r for r in self.custom if r.take(h.path)), None)
        if rule is None:
            return super()._handle(h, method)
        kind = rule.action[0]
        self.log.append((time.monotonic(), h.path, kind))
        h.send_response(302 if kind == "redirect" else 200)
        if kind == "redirect":
            h.send_header("Location", rule.action[1])
        n = rule.action[-1]
        h.send_header("Content-Type", OCTETS)
        if kind == "chunked":
            h.send_header("Transfer-Encoding", "chunked")
        else:
            h.send_header("Content-Length", str(n))
        h.end_headers()
        block = bytes(64 << 10)
        frame = f"{len(block):x}\r\n".encode() + block + b"\r\n"
        try:
            while self.sent[kind] < n and not self.stopping.is_set():
                h.wfile.write(frame if kind == "chunked" else block[:n - self.sent[kind]])
                self.sent[kind] += min(len(block), n - self.sent[kind])
        except OSError:
            pass
        h.close_connection = True


@pytest.fixture
def faulty(registry):
    p = BoundsProxy(registry.base)
    yield p
    p.close()


def sqshbuild(args: list[str], home: Path, timeout: float = 180,
              **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run([*sqshbuild_cmd(), *args], env={**run_env(home), **env},
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - start


def push(registry, image: Image) -> str:
    repo = f"bounds/{uuid.uuid4().hex[:8]}"
    registry.pusher.push(repo, "v1", image)
    return repo


def sizeless(image: Image, which: int | None = None) -> bytes:
    """The image's manifest with ``size`` taken out of layer ``which`` (None: every
    descriptor, the config's too); half of them 0, half missing."""
    doc = json.loads(image.manifest())
    descs = [doc["config"], *doc["layers"]] if which is None else [doc["layers"][which]]
    for i, d in enumerate(descs):
        if i % 2:
            d["size"] = 0
        else:
            del d["size"]
    return json.dumps(doc).encode()


def short(digest: str) -> str:
    return digest[:19]  # sha256: and 12 hex digits


def assert_nothing_left(cache: Path, digest: str, verified: bool = False) -> None:
    """No image, no temporary file, no tar of layer ``digest``; no partial blob of it
    either unless it was ``verified`` (its digest matched: kept, so that a build with a
    raised limit does not fetch it again)."""
    assert not list(cache.glob("*.sqsh"))
    layers = cache / "layers" / "sha256"
    assert not list(layers.glob("*.tmp")), list(layers.iterdir())
    assert not (layers / f"{digest[7:]}.tar").exists()
    assert (layers / f"{digest[7:]}.partial").exists() == verified


def zeros_layer(n: int) -> bytes:
    """A gzip layer with one file of ``n`` zero bytes (about 1000x), made a MiB at a time."""
    info = tarfile.TarInfo("zeros")
    info.size, info.mtime, info.mode = n, 1_700_000_000, 0o644
    head = info.tobuf(tarfile.PAX_FORMAT)
    tail = bytes(-n % 512 + 1024)
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    out = [z.compress(head)]
    block = bytes(1 << 20)
    out += [z.compress(block) for _ in range(n >> 20)]
    out += [z.compress(bytes(n & ((1 << 20) - 1)) + tail), z.flush()]
    return b"".join(out)


def random_tar(name: str, n: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mtime = n, 1_700_000_000
        tar.addfile(info, io.BytesIO(random.Random(n).randbytes(n)))
    return buf.getvalue()


# -- the blob's length ------------------------------------------------------------------------
def test_a_layer_without_a_size_or_a_length_stops_at_the_site_maximum(
        registry, faulty, cache_dir, clean_env):
    """size 0 / missing and an endless chunked body: cut at SQSHBUILD_MAX_BLOB_SIZE (was: no
    bound at all; one build wrote 40 GB before its digest check failed)."""
    image = Image([layer(("file", "a", "a")), layer(("file", "b", "b"))], {"Cmd": ["x"]})
    repo = push(registry, image)
    top = sha(image.layers[1])
    faulty.add(MANIFEST, "replace", sizeless(image, 1), image.media_type, times=None)
    faulty.answer(top, "chunked", 512 << 20, times=None)  # a broken build stops there
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/{repo}:v1"],
                           clean_env, SQSHBUILD_MAX_BLOB_SIZE="4M", SQSHBUILD_RETRIES="1")
    err = one_error_line(proc)
    assert f"layer {short(top)} of {faulty.host}/{repo} names no size" in err, err
    assert "4194304 (4 MiB) allowed by SQSHBUILD_MAX_BLOB_SIZE" in err, err
    assert "raise SQSHBUILD_MAX_BLOB_SIZE" in err
    assert took < 30
    assert_nothing_left(cache_dir, top)


def test_a_layer_without_a_size_is_bounded_by_its_content_length(registry, faulty, cache_dir,
                                                                  clean_env):
    """A Content-Length beyond the maximum is refused before the body is read."""
    image = Image([layer(("file", "a", "a"))], {"Cmd": ["x"]})
    repo = push(registry, image)
    top = sha(image.layers[0])
    faulty.add(MANIFEST, "replace", sizeless(image), image.media_type, times=None)
    faulty.answer(top, "length", 512 << 20, times=None)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/{repo}:v1"],
                           clean_env, SQSHBUILD_MAX_BLOB_SIZE="8M", SQSHBUILD_RETRIES="1")
    err = one_error_line(proc)
    assert short(top) in err and f"is {512 << 20} bytes by the registry's Content-Length" in err
    assert "8388608 (8 MiB) allowed by SQSHBUILD_MAX_BLOB_SIZE" in err, err
    assert faulty.sent["length"] < 64 << 20, faulty.sent  # what the socket buffers took
    assert len(faulty.hits(top)) == 1  # not tried again
    assert_nothing_left(cache_dir, top)


def test_descriptors_without_sizes_still_build(registry, faulty, cache_dir, clean_env):
    """No size is not refused: the server's length and the site maximum bound it."""
    image = Image([layer(("file", "a", "a" * 5000)), layer(("file", "b", "bee"))],
                  {"Cmd": ["x"]})
    repo = push(registry, image)
    faulty.add(MANIFEST, "replace", sizeless(image), image.media_type, times=None)
    proc, _ = sqshbuild(["-q", "--cache-dir", str(cache_dir), f"{faulty.host}/{repo}:v1"],
                        clean_env)
    assert proc.returncode == 0, proc.stderr
    out = Path(proc.stdout.strip())
    assert cat(out, "b") == "bee" and cat(out, "a") == "a" * 5000


def test_a_descriptor_above_the_site_maximum_is_refused_before_downloading(
        registry, faulty, cache_dir, clean_env):
    image = Image([layer(("file", "a", "a")),
                   layer(("file", "big", os.urandom(3 << 20)), compress=False)],
                  {"Cmd": ["x"]})
    repo = push(registry, image)
    top = sha(image.layers[1])
    proc, _ = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/{repo}:v1"],
                        clean_env, SQSHBUILD_MAX_BLOB_SIZE="2M")
    err = one_error_line(proc)
    assert f"layer {short(top)} of {faulty.host}/{repo} is {len(image.layers[1])} bytes" in err
    assert "by its manifest, more than the 2097152 (2 MiB) allowed by SQSHBUILD_MAX_BLOB_SIZE" \
        in err, err
    assert faulty.hits(top) == []
    assert_nothing_left(cache_dir, top)


def test_a_bad_setting_is_one_line(registry, cache_dir, clean_env):
    repo = push(registry, Image([layer(("file", "a", "a"))], {"Cmd": ["x"]}))
    proc, _ = sqshbuild(["--cache-dir", str(cache_dir), f"{registry.host}/{repo}:v1"],
                        clean_env, SQSHBUILD_MAX_BLOB_SIZE="a lot")
    assert "SQSHBUILD_MAX_BLOB_SIZE='a lot' is not a size" in one_error_line(proc)


def test_a_redirect_body_is_never_read(registry, faulty, cache_dir, clean_env):
    """requests reads a redirect's body whole before following it; a hostile registry can
    make that endless (here 256 MiB): it is not read, the redirect is followed."""
    image = Image([layer(("file", "a", "redirected"))], {"Cmd": ["x"]})
    repo = push(registry, image)
    top = sha(image.layers[0])
    faulty.answer(top, "redirect", f"{registry.base}/v2/{repo}/blobs/{top}", 256 << 20)
    proc, _ = sqshbuild(["-q", "--cache-dir", str(cache_dir), f"{faulty.host}/{repo}:v1"],
                        clean_env)
    assert proc.returncode == 0, proc.stderr
    assert cat(Path(proc.stdout.strip()), "a") == "redirected"
    assert faulty.sent["redirect"] < 64 << 20, faulty.sent


# -- the inflated size ------------------------------------------------------------------------
@pytest.fixture(params=["igzip", "zlib"])
def decoder(request) -> dict[str, str]:
    if request.param == "igzip":
        need_tool("igzip", "isal")
    return {"SQSHBUILD_NO_ISAL": "1"} if request.param == "zlib" else {}


def test_a_gzip_bomb_is_stopped_by_the_ratio(registry, cache_dir, clean_env, decoder):
    """512 MiB of zeros in a 0.5 MB layer (about 1000x): stopped at 256 MiB, the most any
    layer may inflate to beyond 100 times its size (was: no bound; a 3 MB layer inflated to
    3 GiB)."""
    bomb = zeros_layer(512 << 20)
    image = Blobs([layer(("file", "a", "a")), bomb], {"Cmd": ["x"]})
    repo = push(registry, image)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{registry.host}/{repo}:v1"],
                           clean_env, **decoder)
    err = one_error_line(proc)
    assert f"layer {short(sha(bomb))} inflates to more than 268435456 bytes (256 MiB)" in err
    assert f"100 times its {len(bomb)} compressed bytes" in err, err
    assert "raise SQSHBUILD_MAX_INFLATE_RATIO" in err
    assert_nothing_left(cache_dir, sha(bomb), verified=True)


def test_the_inflated_size_has_a_site_maximum(registry, cache_dir, clean_env, decoder):
    big = zlib.compress(random_tar("r", 24 << 20), 1, wbits=31)
    image = Blobs([layer(("file", "a", "a")), big], {"Cmd": ["x"]})
    repo = push(registry, image)
    proc, _ = sqshbuild(["--cache-dir", str(cache_dir), f"{registry.host}/{repo}:v1"],
                        clean_env, SQSHBUILD_MAX_INFLATED_SIZE="16M", **decoder)
    err = one_error_line(proc)
    assert f"layer {short(sha(big))} inflates to more than 16777216 bytes (16 MiB)" in err
    assert "raise SQSHBUILD_MAX_INFLATED_SIZE" in err, err
    assert_nothing_left(cache_dir, sha(big), verified=True)


# -- a full disk, whatever the decoder --------------------------------------------------------
@pytest.fixture
def tiny(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "tmpfs", str(mnt)],
                       check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        need_root("mounting a small tmpfs")
        raise AssertionError(f"cannot mount a tmpfs: {exc}") from None
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("kind", ["igzip", "zlib", "zstd"])
def test_a_full_disk_is_disk_full_whatever_the_decoder(registry, clean_env, tiny, kind):
    """A killed download left the whole blob (6 MiB) on a disk with 2 MiB left: the next
    build inflates it from there and the disk fills with megabytes of input still to go
    (was, with igzip and zstd: "not valid gzip data ... re-push it")."""
    env = {"SQSHBUILD_NO_ISAL": "1"} if kind == "zlib" else {}
    if kind == "igzip":
        need_tool("igzip", "isal")
    if kind == "zstd":
        need_tool("zstd", "zstd")
    tar = random_tar("r", 6 << 20)
    big = (subprocess.run(["zstd", "-c", "-1"], input=tar, capture_output=True,
                          check=True).stdout if kind == "zstd"
           else zlib.compress(tar, 1, wbits=31))
    small = Image([layer(("file", "s", "s"))], {"Cmd": ["x"]})
    first = sqshbuild(["-q", "--cache-dir", str(tiny),
                       f"{registry.host}/{push(registry, small)}:v1"], clean_env, **env)[0]
    assert first.returncode == 0, first.stderr  # the cache's directories, made by sqshbuild
    for p in tiny.glob("*.sqsh"):
        p.unlink()
    layers = tiny / "layers" / "sha256"
    (layers / f"{sha(big)[7:]}.partial").write_bytes(big)
    image = Blobs([layer(("file", "s", "s")), big], {"Cmd": ["x"]})
    proc, _ = sqshbuild(["--cache-dir", str(tiny), f"{registry.host}/{push(registry, image)}:v1"],
                        clean_env, **env)
    err = one_error_line(proc)
    assert err.startswith("sqshbuild: error: disk full ") and str(tiny) in err, err
    assert "re-push" not in err
