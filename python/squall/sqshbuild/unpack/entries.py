"""What the merge works on: layers, kept entries, the sinks they go to, and the rules that
normalise an entry's name and mode."""

from __future__ import annotations

import posixpath
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from squall.errors import SquallError

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
COPY_CHUNK = 1 << 20


@dataclass
class Layer:
    """One layer as the merge sees it: a name for errors and its uncompressed tar, either as a
    file on disk (``path``: read with random access, file data copied with ``sendfile`` /
    ``copy_file_range`` without passing through Python) or as a stream (``open``)."""

    digest: str
    open: Callable[[], BinaryIO] | None = None
    path: Path | None = None
    resolve: Callable[[], Path] | None = None  # blocks until the file is there (downloads)


Span = tuple[int, int]  # (fd of an uncompressed layer file, offset of the member's data)


@dataclass
class Entry:
    """A kept entry: normalised path (no leading ``./``), header, and the layer it comes from."""

    path: str
    info: tarfile.TarInfo
    layer: str


class Sink(Protocol):
    def add(self, entry: Entry, data: BinaryIO | None, span: Span | None = None) -> None: ...
    def add_synthetic(self, path: str, data: bytes, mode: int) -> None: ...
    def ensure_dir(self, path: str) -> None: ...
    def close(self) -> None: ...


class EntryObserver(Protocol):
    """Sees every kept entry (e.g. to find library versions); may ask for small files' data."""

    def wants_data(self, path: str, info: tarfile.TarInfo) -> bool: ...
    def observe(self, path: str, info: tarfile.TarInfo, data: bytes | None) -> None: ...


def normalise_name(name: str, layer: str) -> str | None:
    """The entry's path relative to the root, or None for the root itself; refuse escapes."""
    if name.startswith("/"):
        raise SquallError(
            f"layer {layer} has an absolute path entry {name!r}: refusing to unpack a layer "
            "that writes outside the image root; rebuild the image with relative paths")
    parts = []
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise SquallError(
                f"layer {layer} has an entry {name!r} with a '..' component: refusing to unpack "
                "a layer that writes outside the image root; rebuild the image without it")
        parts.append(part)
    if not parts:
        return None
    return "/".join(parts)


def normalise_mode(info: tarfile.TarInfo) -> int:
    """``chmod u+rX`` on everything, ``u+w`` on directories, as Enroot's import leaves them."""
    mode = info.mode & 0o7777
    mode |= 0o400
    if info.isdir():
        mode |= 0o700
    elif mode & 0o111:
        mode |= 0o100
    return mode


def ancestors(path: str) -> Iterator[str]:
    """``a/b`` and ``a`` for ``a/b/c``: the parents, nearest first, the root left out."""
    while True:
        path = posixpath.dirname(path)
        if not path:
            return
        yield path


def under_dev(path: str, is_dir: bool) -> bool:
    """Nothing under ``dev/`` is kept (Enroot mounts its own), nor a non-directory ``dev``."""
    return path == "dev" and not is_dir or path.startswith("dev/")
