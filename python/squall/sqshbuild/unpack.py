"""Merge image layers into one root filesystem, top layer first, exactly as overlay semantics say.

The layers are read once each, from the top layer down. An entry of a lower layer is kept
only if no upper layer shadows it: the same path present above, a whiteout (``.wh.NAME``) for
it or one of its parents, an opaque marker (``.wh..wh..opq``) on one of its parents, or a
parent replaced by a non-directory. Every kept entry is final, so the merged result can be
written in one pass either as a tar stream (for ``tar2sqfs``) or into a directory (for
``mksquashfs``): see :class:`TarSink` and :class:`DirSink`.

Normalisation follows what ``enroot import`` produces: every file owned by root (the squash
step also says ``-all-root``), ``u+r`` on everything and ``u+x`` where any execute bit is set
(``chmod u+rX``), ``u+w`` on directories, setuid/setgid bits kept as they are (Enroot mounts
the root filesystem ``nosuid``), extended attributes dropped, device nodes skipped and
nothing under ``dev/`` kept.

Entries that would escape the root are refused with the layer digest and the entry named:
absolute names, ``..`` components, and a path written through a symlink (or other
non-directory) that the same layer created. Hard links are written last, once their target
is known to be in the image.
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from squall.errors import SquallError

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
COPY_CHUNK = 1 << 20


@dataclass
class Layer:
    """One layer as the merge sees it: a name for errors and a way to open its tar stream."""

    digest: str
    open: Callable[[], BinaryIO]  # returns an uncompressed tar stream


@dataclass
class Entry:
    """A kept entry: normalised path (no leading ``./``), header, and the layer it comes from."""

    path: str
    info: tarfile.TarInfo
    layer: str


class Sink(Protocol):
    def add(self, entry: Entry, data: BinaryIO | None) -> None: ...
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


def _ancestors(path: str) -> Iterator[str]:
    while True:
        path = posixpath.dirname(path)
        if not path:
            return
        yield path


@dataclass
class _State:
    present: dict[str, bool] = field(default_factory=dict)  # path -> is a directory
    whiteouts: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)
    implicit_dirs: set[str] = field(default_factory=set)  # parents of kept entries


def _hidden(state: _State, path: str) -> bool:
    if path in state.present or path in state.whiteouts:
        return True
    for parent in _ancestors(path):
        if parent in state.whiteouts or parent in state.opaque:
            return True
        is_dir = state.present.get(parent)
        if is_dir is False:
            return True
    return False


def merge_layers(
    layers: list[Layer],
    sink: Sink,
    synthetic: dict[str, tuple[bytes, int]] | None = None,
    ensure_dirs: list[str] | None = None,
    observer: EntryObserver | None = None,
) -> int:
    """Merge ``layers`` (bottom first, as in the manifest) into ``sink``; return entries kept.

    ``synthetic`` files (path -> (data, mode)) sit above every layer (``/etc/rc`` and friends);
    ``ensure_dirs`` are created at the end if no layer made them (the working directory).
    """
    state = _State()
    kept = 0
    for path, (data, mode) in (synthetic or {}).items():
        sink.add_synthetic(path, data, mode)
        state.present[path] = False
        state.implicit_dirs.update(_ancestors(path))
        kept += 1
    deferred_links: list[Entry] = []
    for layer in reversed(layers):
        kept += _merge_one(layer, state, sink, deferred_links, observer)
    for entry in deferred_links:
        target = normalise_name(entry.info.linkname, entry.layer)
        if target is None or state.present.get(target) is not False:
            raise SquallError(
                f"layer {entry.layer} has a hard link {entry.path!r} to {entry.info.linkname!r}, "
                "which is not a file in the image: rebuild the image without the dangling link")
        sink.add(entry, None)
    for path in ensure_dirs or []:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise SquallError(f"the image's working directory {path!r} has a '..' component: "
                              "fix WORKDIR in the image")
        norm = "/".join(parts)
        if norm and norm not in state.present:
            sink.ensure_dir(norm)
    sink.close()
    return kept


def _merge_one(layer: Layer, state: _State, sink: Sink, deferred_links: list[Entry],
               observer: EntryObserver | None) -> int:
    here: dict[str, bool] = {}
    whiteouts: set[str] = set()
    opaque: set[str] = set()
    here_parents: set[str] = set()
    kept = 0
    stream = layer.open()
    try:
        try:
            tar = tarfile.open(fileobj=stream, mode="r|")
        except tarfile.TarError as exc:
            raise SquallError(f"layer {layer.digest} is not a tar archive ({exc}): "
                              "the image is corrupt; rebuild or re-push it") from None
        try:
            for info in tar:
                path = normalise_name(info.name, layer.digest)
                if path is None:
                    continue
                base = posixpath.basename(path)
                parent = posixpath.dirname(path)
                for anc in _ancestors(path):
                    if here.get(anc) is False:
                        raise SquallError(
                            f"layer {layer.digest} writes {info.name!r} through "
                            f"{anc!r}, which the same layer made a symlink or file: refusing a "
                            "layer that could write outside the image root")
                if not info.isdir() and path in here_parents:
                    raise SquallError(
                        f"layer {layer.digest} turns {info.name!r} into a symlink or file after "
                        "writing below it: refusing a layer that could write outside the root")
                if base == OPAQUE_MARKER:
                    if parent:
                        opaque.add(parent)
                    else:
                        opaque.add("")
                    continue
                if base.startswith(WHITEOUT_PREFIX):
                    target = posixpath.join(parent, base[len(WHITEOUT_PREFIX):])
                    whiteouts.add(target)
                    continue
                if info.islnk():
                    normalise_name(info.linkname, layer.digest)
                here[path] = info.isdir()
                here_parents.update(_ancestors(path))
                if _hidden(state, path) or path in state.implicit_dirs and not info.isdir():
                    continue
                if "" in state.opaque:
                    continue
                if path == "dev" and not info.isdir() or path.startswith("dev/"):
                    continue
                if info.ischr() or info.isblk():
                    continue
                if not (info.isfile() or info.isdir() or info.issym() or info.islnk()
                        or info.isfifo()):
                    continue
                entry = Entry(path, info, layer.digest)
                kept += 1
                if info.islnk():
                    deferred_links.append(entry)
                    continue
                data = tar.extractfile(info) if info.isfile() else None
                if observer is not None and observer.wants_data(path, info):
                    blob = data.read() if data is not None else None
                    observer.observe(path, info, blob)
                    sink.add(entry, _BytesReader(blob) if blob is not None else None)
                else:
                    if observer is not None:
                        observer.observe(path, info, None)
                    sink.add(entry, data)
        except tarfile.TarError as exc:
            raise SquallError(f"layer {layer.digest} is truncated or corrupt ({exc}): "
                              "delete it from the layer cache and build again") from None
    finally:
        stream.close()
    for path, is_dir in here.items():
        state.present.setdefault(path, is_dir)
        state.implicit_dirs.update(_ancestors(path))
    state.whiteouts |= whiteouts
    state.opaque |= opaque
    return kept


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = len(self._data) - self._pos
        chunk = self._data[self._pos:self._pos + n]
        self._pos += len(chunk)
        return chunk


def _root_header(info: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
    out = tarfile.TarInfo(path)
    out.type = info.type
    out.mode = normalise_mode(info)
    out.mtime = info.mtime
    out.uid = out.gid = 0
    out.uname = out.gname = "root"
    out.size = info.size if info.isfile() else 0
    if info.issym():
        out.linkname = info.linkname
    elif info.islnk():
        out.linkname = normalise_name(info.linkname, "") or ""
    return out


class TarSink:
    """Writes the merged tree as one uncompressed tar stream (fed to ``tar2sqfs``)."""

    def __init__(self, out: BinaryIO, on_bytes: Callable[[int], None] | None = None) -> None:
        self._tar = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)
        self._on_bytes = on_bytes

    def add(self, entry: Entry, data: BinaryIO | None) -> None:
        header = _root_header(entry.info, entry.path)
        self._tar.addfile(header, data if header.isfile() else None)
        if self._on_bytes is not None and header.size:
            self._on_bytes(header.size)

    def add_synthetic(self, path: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mode = mode
        info.mtime = 0
        self._tar.addfile(info, _BytesReader(data))

    def ensure_dir(self, path: str) -> None:
        info = tarfile.TarInfo(path)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        self._tar.addfile(info)

    def close(self) -> None:
        self._tar.close()

    def abort(self) -> None:
        """Forget the stream without flushing (the reader is gone or the build failed)."""
        stream = self._tar.fileobj
        self._tar.closed = True
        if stream is not None:
            stream.closed = True  # type: ignore[attr-defined]


class DirSink:
    """Writes the merged tree into a directory (fed to ``mksquashfs -all-root``)."""

    def __init__(self, root: Path, on_bytes: Callable[[int], None] | None = None) -> None:
        self.root = root
        self._on_bytes = on_bytes
        self._dir_times: list[tuple[str, int, int]] = []
        root.mkdir(parents=True, exist_ok=True)

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path)

    def _parents(self, full: str) -> None:
        parent = os.path.dirname(full)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755, exist_ok=True)

    def add(self, entry: Entry, data: BinaryIO | None) -> None:
        info = entry.info
        full = self._full(entry.path)
        mode = normalise_mode(info)
        try:
            self._parents(full)
            if info.isdir():
                if not os.path.isdir(full):
                    os.mkdir(full, 0o700)
                os.chmod(full, mode)
                self._dir_times.append((full, info.mtime, mode))
                return
            if info.isfile():
                with open(full, "wb") as out:
                    if data is not None:
                        shutil.copyfileobj(data, out, COPY_CHUNK)
                if self._on_bytes is not None:
                    self._on_bytes(info.size)
            elif info.issym():
                os.symlink(info.linkname, full)
            elif info.islnk():
                target = self._full(normalise_name(info.linkname, entry.layer) or "")
                os.link(target, full)
                return
            elif info.isfifo():
                os.mkfifo(full)
            if not info.issym():
                os.chmod(full, mode)
            os.utime(full, (info.mtime, info.mtime), follow_symlinks=False)
        except OSError as exc:
            raise _os_error(exc, full) from None

    def add_synthetic(self, path: str, data: bytes, mode: int) -> None:
        full = self._full(path)
        self._parents(full)
        with open(full, "wb") as out:
            out.write(data)
        os.chmod(full, mode)
        os.utime(full, (0, 0))

    def ensure_dir(self, path: str) -> None:
        os.makedirs(self._full(path), mode=0o755, exist_ok=True)

    def close(self) -> None:
        for full, mtime, _mode in reversed(self._dir_times):
            os.utime(full, (mtime, mtime), follow_symlinks=False)


def _os_error(exc: OSError, path: str) -> SquallError:
    if exc.errno == errno.ENOSPC:
        return SquallError(f"disk full while writing {path}: free space there or point "
                           "--work-dir (or TMPDIR) at a larger filesystem")
    return SquallError(f"cannot write {path}: {exc.strerror}")

