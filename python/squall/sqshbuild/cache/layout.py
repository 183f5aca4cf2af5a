"""Where a cache keeps what, and the names of its entries.

Layout (default ``/fsx/squall/images``, env ``SQSHBUILD_CACHE``)::

    sha256-<hex>[-<variant>].sqsh  the image; its presence is what "complete" means
    sha256-<hex>[-<variant>].json  sidecar: reference, digests, size, created, versions
    sha256-<hex>[-<variant>].used  last use (mtime), written by the cache's writers only
    index/<sha256 of ref>.json     reference (+ platform) -> manifest digest, offline hits
    locks/sha256-<hex>[-<variant>].lock  the build lock (see lock.py)
    layers/sha256/<hex>.tar        the layer cache, uncompressed (env SQSHBUILD_LAYER_CACHE)
    .building-*                    temporary files; never end in .sqsh

``<variant>`` names squash options other than the default (zstd level 3, 128K blocks):
``lzo-b128k-noD`` for Enroot's format, ``gzip9-b128k``, ``zstd3-b64k``...: the same
manifest squashed another way is another file.
"""

from __future__ import annotations

import errno
import os
import socket
import uuid
from pathlib import Path

from squall.errors import SquallError

DEFAULT_CACHE = "/fsx/squall/images"
CACHE_ENV = "SQSHBUILD_CACHE"
LAYER_CACHE_ENV = "SQSHBUILD_LAYER_CACHE"
TMP_PREFIX = ".building-"
WORK_PREFIX = "sqshbuild-"  # scratch directories in --work-dir / TMPDIR
FILE_MODE = 0o644
SHARED_DIR_MODE = 0o755  # the shared cache: the builder writes, everyone reads
PRIVATE_DIR_MODE = 0o700  # a user's own cache
SUBDIRS = ("index", "locks", "layers", "pins", "shares")


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def user_cache_dir() -> Path:
    """A user's own cache: ``$XDG_CACHE_HOME/squall/images`` (default
    ``~/.cache/squall/images``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "squall" / "images"


def entry_name(digest: str, variant: str = "") -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not _is_hex(hexpart):
        raise SquallError(f"malformed digest {digest!r}")
    return f"sha256-{hexpart}-{variant}" if variant else f"sha256-{hexpart}"


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def temp_suffix() -> str:
    """``.<host>.<pid>~<random>``: whose it is stays readable (a cleanup can tell a dead
    build's file from a live one's) and the name cannot be guessed ahead."""
    return f".{socket.gethostname()}.{os.getpid()}~{uuid.uuid4().hex}"


def work_dir_prefix(kind: str) -> str:
    """mkdtemp prefix of a scratch directory: ``sqshbuild-KIND-<host>.<pid>.`` (mkdtemp
    appends a random part without dots): a later run finds a dead one again."""
    return f"{WORK_PREFIX}{kind}-{socket.gethostname()}.{os.getpid()}."


def disk_error(exc: OSError, path: Path | str, doing: str = "writing") -> SquallError:
    """One line for an OSError while writing ``path``: "disk full" naming the directory."""
    path = Path(path)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "disk full" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return SquallError(f"{what} in {path.parent} ({doing} {path.name}): free space there "
                           "or point --cache-dir / --work-dir / -o elsewhere")
    return SquallError(f"cannot {doing.removesuffix('ing')} {path}: {exc.strerror or exc}")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``500M``, ``2G``, ``1.5T``, ``1024`` (bytes); KiB-based units."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B") if text.strip() else ""
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    num = t[:-1] if unit else t
    try:
        value = float(num)
    except ValueError:
        raise SquallError(f"size {text!r} is not a number with an optional K, M, G or T suffix:"
                          " write e.g. 500G") from None
    if value < 0:
        raise SquallError(f"size {text!r} is negative: give a positive size like 500G")
    return int(value * _UNITS[unit])
