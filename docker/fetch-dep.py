#!/usr/bin/env python3
"""Get a release that squall builds from source (Enroot), checked against its pin.

Usage: fetch-dep.py NAME [DEST]

deps/pins.txt pins NAME's version, upstream URL and the sha256 of its uncompressed tar
stream (`gzip -dc FILE | sha256sum`, which survives another gzip of the same tar). The file
NAME-VERSION.tar.gz is taken from the first of:

  1. the file SQUALL_<NAME>_TARBALL names (an explicit override),
  2. the cache, build/deps/ (the file this step checked before, from any source),
  3. the mirror directory SQUALL_DEPS_MIRROR names (machines without internet; this
     project's machines and CI: ../shared/deps),
  4. the upstream URL (three tries, each bounded in time),

and refused, whatever the source, when its hash is not the pin; the checked file is kept in
the cache, and with DEST copied there too. Every file is written atomically (a temporary
file, checked, renamed: nothing half-written or unchecked is ever left). Prints the checked
file's path on stdout and one line on stderr: the source used, or why none worked.
SQUALL_DEPS_PINS and SQUALL_DEPS_CACHE name another pins file and cache (tests)."""

from __future__ import annotations

import argparse
import filecmp
import gzip
import hashlib
import http.client
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRIES = 3
RETRY_DELAYS = (1.0, 3.0)  # seconds before the second and the third try
SOCKET_TIMEOUT = 30.0  # seconds without a byte
TRY_SECONDS = 300.0  # a whole download, at most
MAX_BYTES = 1 << 30  # the compressed file
MAX_TAR_BYTES = 8 << 30  # its tar stream
CHUNK = 1 << 20


class Failed(Exception):
    """The step cannot give a checked file: the message is its one line."""


class Unavailable(Exception):
    """A source does not have the file (the next one is tried)."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    url: str
    sha256: str
    pins: str  # the pins file, as the messages show it
    without: str = ""  # a folder of the release left out of its hash (without=tests/)

    @property
    def file(self) -> str:
        return f"{self.name}-{self.version}.tar.gz"

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


def shown(path: Path) -> str:
    """PATH relative to the checkout when it is in it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def read_pin(pins: Path, name: str) -> Pin:
    try:
        text = pins.read_text()
    except OSError as e:
        raise Failed(f"cannot read the pins file {pins}: {e.strerror}") from None
    found: dict[str, Pin] = {}
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        without = words.pop()[len("without="):] if words[-1].startswith("without=") else ""
        if len(words) != 4 or len(words[3]) != 64 or words[3].strip("0123456789abcdef") \
                or without.strip("/") in (".", ".."):
            raise Failed(f"{pins}:{n}: not NAME VERSION URL SHA256 (64 hex digits) "
                         f"[without=FOLDER/]: {line}")
        name_, version, url, sha = words
        found[name_] = Pin(name_, version, url, sha, pins=shown(pins),
                           without=without.strip("/"))
    if name not in found:
        raise Failed(f"no pin for {name} in {shown(pins)} (pinned: {', '.join(found) or 'none'})")
    return found[name]


def tar_sha256(path: Path) -> str:
    """The sha256 of the tar stream inside the gzip file PATH."""
    digest, size = hashlib.sha256(), 0
    with gzip.open(path) as f:
        while chunk := f.read(CHUNK):
            size += len(chunk)
            if size > MAX_TAR_BYTES:
                raise ValueError(f"its tar is over {MAX_TAR_BYTES} bytes")
            digest.update(chunk)
    return digest.hexdigest()


def tree_sha256(path: Path, without: str) -> str:
    """The sha256 of the release's files but those under its folder WITHOUT: each member
    (the archive's top folder dropped) by name, type, mode and content, in name order. A
    mirror that left a folder out (Pyxis's tests/) and the upstream archive with it give
    the same hash; any other change does not."""
    digest, size = hashlib.sha256(), 0
    with tarfile.open(path, "r:gz") as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            name = m.name.split("/", 1)[1] if "/" in m.name else ""
            if not name or name == without or name.startswith(without + "/"):
                continue
            size += m.size
            if size > MAX_TAR_BYTES:
                raise ValueError(f"its tar is over {MAX_TAR_BYTES} bytes")
            f = tar.extractfile(m) if m.isfile() else None
            body = f.read() if f is not None else m.linkname.encode()
            digest.update(f"{m.type.decode()} {m.mode:o} {name}\0".encode())
            digest.update(hashlib.sha256(body).digest())
    return digest.hexdigest()


def check(path: Path, pin: Pin, source: str) -> None:
    """Failed unless PATH is a gzip file whose uncompressed tar (its tree without the
    pin's WITHOUT folder, where the pin names one) has the pinned hash."""
    try:
        got = tree_sha256(path, pin.without) if pin.without else tar_sha256(path)
    except (OSError, EOFError, zlib.error, tarfile.TarError) as e:
        raise Failed(f"refused {pin.label} from {source}: not a gzip file, or a truncated "
                     f"one ({e})") from None
    except ValueError as e:
        raise Failed(f"refused {pin.label} from {source}: {e}") from None
    if got != pin.sha256:
        raise Failed(f"refused {pin.label} from {source}: the sha256 of its uncompressed tar "
                     f"is not the pin in {pin.pins}: expected {pin.sha256}, got {got}")


@contextmanager
def temporary(directory: Path, name: str) -> Iterator[Path]:
    """A new file in DIRECTORY (made if need be) for NAME, removed unless renamed away."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
    os.close(fd)
    os.chmod(tmp, 0o644)
    try:
        yield Path(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)


def install(src: Path, dest: Path, pin: Pin, source: str) -> None:
    """Copy SRC to DEST atomically, the copy itself checked; DEST is left alone when it
    already holds the same bytes."""
    with temporary(dest.parent, dest.name) as tmp:
        shutil.copyfile(src, tmp)
        check(tmp, pin, source)
        if not (dest.is_file() and filecmp.cmp(tmp, dest, shallow=False)):
            os.replace(tmp, dest)


def receive(url: str, out: Path) -> None:
    """One try at downloading URL into OUT: Unavailable for an answer that another try
    cannot change, OSError or http.client.HTTPException for one that it might."""
    request = urllib.request.Request(url, headers={"User-Agent": "squall-fetch-dep"})
    deadline = time.monotonic() + TRY_SECONDS
    try:
        response = urllib.request.urlopen(request, timeout=SOCKET_TIMEOUT)
    except urllib.error.HTTPError as e:
        e.close()
        if e.code >= 500 or e.code == 429:
            raise ConnectionError(f"HTTP Error {e.code}: {e.reason}") from None
        raise Unavailable(f"HTTP Error {e.code}: {e.reason}") from None
    with response, out.open("wb") as f:
        size = 0
        while chunk := response.read(CHUNK):
            size += len(chunk)
            if size > MAX_BYTES:
                raise Unavailable(f"the file is over {MAX_BYTES} bytes")
            if time.monotonic() > deadline:
                raise TimeoutError(f"not complete after {TRY_SECONDS:.0f} s")
            f.write(chunk)


def download(pin: Pin, cache: Path) -> Path:
    """PIN's file from its upstream URL, checked, in CACHE: Unavailable when no try got it."""
    why = ""
    for attempt in range(TRIES):
        if attempt:
            time.sleep(RETRY_DELAYS[min(attempt, len(RETRY_DELAYS)) - 1])
        with temporary(cache, pin.file) as tmp:
            try:
                receive(pin.url, tmp)
            except (OSError, http.client.HTTPException) as e:
                reason = getattr(e, "reason", None) or e
                why = str(reason) or type(e).__name__
                continue
            check(tmp, pin, pin.url)
            os.replace(tmp, cache / pin.file)
            return cache / pin.file
    raise Unavailable(f"{why} ({TRIES} tries)")


def obtain(pin: Pin, cache: Path, env: Mapping[str, str]) -> tuple[Path, str]:
    """PIN's release, checked, in CACHE, and the source it came from, in words."""
    cached = cache / pin.file
    variable = f"SQUALL_{pin.name.upper()}_TARBALL"
    if env.get(variable):
        path = Path(os.path.abspath(env[variable]))
        source = f"{variable}={path}"
        if not path.is_file():
            raise Failed(f"no {pin.label} at {source}: no such file")
        install(path, cached, pin, source)
        return cached, source
    if cached.is_file():
        try:
            check(cached, pin, "the cache")
            return cached, f"the cache {shown(cached)}"
        except Failed:  # another pin's, or damaged: got again
            cached.unlink()
    if env.get("SQUALL_DEPS_MIRROR"):
        mirrored = Path(os.path.abspath(env["SQUALL_DEPS_MIRROR"])) / pin.file
        if mirrored.is_file():
            install(mirrored, cached, pin, f"the mirror {mirrored}")
            return cached, f"the mirror {mirrored}"
        mirror = f"not in the mirror ({mirrored}: no such file)"
    else:
        mirror = "SQUALL_DEPS_MIRROR is not set"
    try:
        return download(pin, cache), pin.url
    except Unavailable as e:
        raise Failed(f"no {pin.label}: {mirror}, and not from {pin.url}: {e}; on a machine "
                     f"without internet set SQUALL_DEPS_MIRROR=DIR, a directory holding "
                     f"{pin.file} (this project's machines: ../shared/deps)") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fetch-dep.py", description="Get a pinned release (deps/pins.txt), checked.")
    parser.add_argument("name", help="the release's name in the pins file (enroot)")
    parser.add_argument("dest", nargs="?", type=Path, help="copy the checked file here")
    args = parser.parse_args(argv)
    env = os.environ
    pins = Path(env.get("SQUALL_DEPS_PINS") or REPO / "deps" / "pins.txt")
    cache = Path(os.path.abspath(env.get("SQUALL_DEPS_CACHE") or REPO / "build" / "deps"))
    try:
        pin = read_pin(pins, args.name)
        path, source = obtain(pin, cache, env)
        if args.dest is not None:
            dest = Path(os.path.abspath(args.dest))
            install(path, dest, pin, source)
            path = dest
    except Failed as e:
        print(f"fetch-dep: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the cache or DEST cannot be written
        print(f"fetch-dep: {args.name}: {e}", file=sys.stderr)
        return 1
    print(f"fetch-dep: {pin.label} from {source}, its uncompressed tar's sha256 as pinned "
          f"in {pin.pins}", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
