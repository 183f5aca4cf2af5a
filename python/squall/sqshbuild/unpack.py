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

import copy
import errno
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol, cast

from squall.errors import SquallError
from squall.sqshbuild import tarhead
from squall.sqshbuild.growing import GrowingFile, LayerStream

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
    # The download in progress, read while it writes the file (else ``resolve`` waits)
    stream: LayerStream | None = None


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


def _ancestors(path: str) -> Iterator[str]:
    while True:
        path = posixpath.dirname(path)
        if not path:
            return
        yield path


@dataclass
class _State:
    present: dict[str, bool] = field(default_factory=dict)  # path -> is a directory
    # Paths at which some layer above had a non-directory: nothing of the layers below lies
    # under them, even when a layer higher still made them a directory again.
    cut: set[str] = field(default_factory=set)
    whiteouts: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)
    implicit_dirs: set[str] = field(default_factory=set)  # parents of kept entries
    # Parents a layer's tar implies without an entry of their own ("a" of "a/b"), not hidden
    # by a layer above: directories of the image even when everything below them is
    # whited out above; made at the end unless a kept entry made them.
    implied: set[str] = field(default_factory=set)
    origin: dict[str, str] = field(default_factory=dict)  # kept regular file -> its layer
    # What the image holds (kept entries only): symlinks with their targets, other
    # non-directories, and directories (made, or parents of kept entries). Paths are
    # resolved against this tree, never the host's (the working directory).
    links: dict[str, str] = field(default_factory=dict)
    nondirs: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    open_files: list[BinaryIO] = field(default_factory=list)  # layer files, closed at the end


@dataclass
class _Deferred:
    """A kept hard link, written at the end. It links the file its own layer saw under
    ``target``: that layer's member of the name, else the topmost lower layer's, found as
    the merge goes down (``saved``: its header and data, ``source``: its layer, reopened
    when a streamed layer's member is needed again). ``pending`` while no layer has said."""

    entry: Entry
    target: str
    source: Layer
    saved: tuple[tarfile.TarInfo, Span | None] | None = None
    pending: bool = True


def _hidden(state: _State, path: str) -> bool:
    if path in state.present or path in state.whiteouts:
        return True
    for parent in _ancestors(path):
        if parent in state.whiteouts or parent in state.opaque:
            return True
        if state.present.get(parent) is False or parent in state.cut:
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
        _keep(state, path, None)
        state.implicit_dirs.update(_ancestors(path))
        kept += 1
    deferred_links: list[_Deferred] = []
    try:
        for layer in reversed(layers):
            kept += _merge_one(layer, state, sink, deferred_links, observer)
        _write_links(deferred_links, state, sink)
        for d in sorted(state.implied - state.dirs):
            sink.ensure_dir(d)
            state.dirs.add(d)
    finally:
        for f in state.open_files:
            f.close()
    for path in ensure_dirs or []:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise SquallError(f"the image's working directory {path!r} has a '..' component: "
                              "fix WORKDIR in the image")
        norm = resolve_in_image(state, "/".join(parts), path)
        if norm and norm not in state.dirs:
            sink.ensure_dir(norm)
            state.dirs.add(norm)
            state.dirs.update(_ancestors(norm))
    sink.close()
    return kept


def _keep(state: _State, path: str, info: tarfile.TarInfo | None) -> None:
    """Record a kept entry (``info`` None: a synthetic file) in the image's tree."""
    if info is not None and info.type == tarfile.DIRTYPE:
        state.dirs.add(path)
    elif info is not None and info.type == tarfile.SYMTYPE:
        state.links[path] = info.linkname
    else:
        state.nondirs.add(path)
    for parent in _ancestors(path):
        if parent in state.dirs:
            break
        state.dirs.add(parent)


MAX_SYMLINKS = 40  # as the kernel's ELOOP limit


def resolve_in_image(state: _State, path: str, shown: str) -> str:
    """``path`` (relative to the root, no ``..``) with every symlink of the image resolved
    against the image's own root, as a lookup inside the container would: an absolute
    target starts again at the image root and ``..`` stops there, so the result never
    leaves the image. Refused: a component that is a file, or a symlink loop."""
    todo = [p for p in path.split("/") if p not in ("", ".")]
    todo.reverse()
    out: list[str] = []
    hops = 0
    while todo:
        part = todo.pop()
        if part == "..":
            if out:
                out.pop()
            continue
        cur = "/".join([*out, part])
        target = state.links.get(cur)
        if target is not None:
            hops += 1
            if hops > MAX_SYMLINKS:
                raise SquallError(f"the image's working directory {shown!r} passes through a "
                                  f"symlink loop at {cur!r}: fix WORKDIR or the link in the "
                                  "image")
            if target.startswith("/"):
                out = []
            todo.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
            continue
        if cur in state.nondirs:
            raise SquallError(f"the image's working directory {shown!r} passes through "
                              f"{cur!r}, which is a file in the image, not a directory: fix "
                              "WORKDIR in the image")
        out.append(part)
    return "/".join(out)


def _resolve_links(deferred_links: list[_Deferred], own_from: int, layer: Layer,
                   files_here: dict[str, tuple[tarfile.TarInfo, Span | None]],
                   links_here: dict[str, str], here: dict[str, bool], whiteouts: set[str],
                   opaque: set[str]) -> None:
    """After a layer is read: the pending links whose target this layer decides (the
    layer's own links are ``deferred_links[own_from:]``). Its file of that name is the one
    linked; for a link from above, a hard link of this layer is a file too (its target); a
    directory, symlink, whiteout or opaque parent of that name means no file was there when
    the link was made (dangling)."""
    for i, d in enumerate(deferred_links):
        if not d.pending:
            continue
        if i < own_from and d.target in links_here:
            d.target = links_here[d.target]
        if d.target in files_here:
            d.saved, d.source, d.pending = files_here[d.target], layer, False
        elif (d.target in here or d.target in whiteouts
              or any(here.get(a) is False or a in whiteouts or a in opaque
                     for a in _ancestors(d.target))):
            d.pending = False


def _write_links(deferred_links: list[_Deferred], state: _State, sink: Sink) -> None:
    # A link whose target was deleted or replaced above keeps the content its layer linked,
    # as overlay keeps the inode (umoci's result): the first such link of a file becomes a
    # file of its own, the others link to it.
    copies: dict[tuple[str, str], str] = {}
    reread: dict[str, tuple[Layer, list[tuple[Entry, tarfile.TarInfo]]]] = {}
    followers: list[Entry] = []  # links to those copies, written after them
    for d in deferred_links:
        entry, saved = d.entry, d.saved
        if saved is None:
            raise SquallError(
                f"layer {entry.layer} has a hard link {entry.path!r} to {entry.info.linkname!r}, "
                "which is not a file in the image: rebuild the image without the dangling link")
        key = (d.source.digest, d.target)
        first = copies.get(key)
        info = copy.copy(entry.info)
        if state.origin.get(d.target) == d.source.digest:
            info.linkname = d.target  # the file in the image is the one this link linked
            sink.add(Entry(entry.path, info, entry.layer), None)
        elif first is not None:
            info.linkname = first
            followers.append(Entry(entry.path, info, entry.layer))
        else:
            copies[key] = entry.path
            info = copy.copy(saved[0])
            info.name = entry.path
            if saved[1] is not None:
                sink.add(Entry(entry.path, info, entry.layer), None, saved[1])
            else:  # a streamed layer: its data is read again below
                reread.setdefault(d.source.digest, (d.source, []))[1].append(
                    (Entry(entry.path, info, entry.layer), saved[0]))
    for layer, wanted in reread.values():
        _copy_from_stream(layer, wanted, sink)
    for entry in followers:
        sink.add(entry, None)


def _copy_from_stream(layer: Layer, wanted: list[tuple[Entry, tarfile.TarInfo]],
                      sink: Sink) -> None:
    """Write each entry with the data of its member (by header offset) of a streamed layer,
    read once more from the start."""
    by_offset: dict[int, list[Entry]] = {}
    for entry, member in wanted:
        by_offset.setdefault(member.offset, []).append(entry)
    stream, members, tar = _open_layer(Layer(layer.digest, layer.open))
    try:
        assert tar is not None
        for info in members:
            for entry in by_offset.pop(info.offset, []):
                sink.add(entry, cast("BinaryIO | None", tar.extractfile(info)), None)
            if not by_offset:
                break
    except tarfile.TarError as exc:
        raise SquallError(f"layer {layer.digest} is truncated or corrupt ({exc}): "
                          "delete it from the layer cache and build again") from None
    finally:
        stream.close()
    if by_offset:
        raise SquallError(f"layer {layer.digest} changed while it was read: build again")


def _dir_hides(state: _State, d: str, memo: dict[str, bool]) -> bool:
    """Whether directory ``d`` or one of its ancestors hides what lies below it (a whiteout,
    an opaque marker, a non-directory above); ``memo`` is valid for one layer."""
    if not d:
        return False
    hides = memo.get(d)
    if hides is None:
        hides = (d in state.whiteouts or d in state.opaque or state.present.get(d) is False
                 or d in state.cut or _dir_hides(state, d.rpartition("/")[0], memo))
        memo[d] = hides
    return hides


def _open_layer(layer: Layer) -> tuple[BinaryIO, Iterable[tarfile.TarInfo], tarfile.TarFile | None]:
    """The layer's stream, its members, and the TarFile when members come from a stream."""
    # a layer still downloading is read as the file it will be (growing.py)
    growing = layer.stream.open() if layer.path is None and layer.stream is not None else None
    if growing is None and layer.path is None and layer.resolve is not None:
        layer.path = layer.resolve()
    if growing is not None:
        stream = cast(BinaryIO, growing)
    elif layer.path is not None:
        try:
            stream = open(layer.path, "rb")
        except OSError as exc:
            raise SquallError(f"cannot read layer {layer.digest} at {layer.path}: "
                              f"{exc.strerror}") from None
    elif layer.open is not None:
        stream = layer.open()
    else:
        raise SquallError(f"layer {layer.digest} has no data")
    try:
        if growing is not None or layer.path is not None:
            return stream, tarhead.Reader(stream), None
        tar = tarfile.open(fileobj=stream, mode="r|", bufsize=COPY_CHUNK)
        return stream, tar, tar
    except tarfile.TarError as exc:
        stream.close()
        raise SquallError(f"layer {layer.digest} is not a tar archive ({exc}): "
                          "the image is corrupt; rebuild or re-push it") from None
    except BaseException:
        stream.close()
        raise


def _merge_one(layer: Layer, state: _State, sink: Sink, deferred_links: list[_Deferred],
               observer: EntryObserver | None) -> int:
    files_here: dict[str, tuple[tarfile.TarInfo, Span | None]] = {}
    links_here: dict[str, str] = {}  # this layer's hard links: path -> target
    here: dict[str, bool] = {}
    whiteouts: set[str] = set()
    opaque: set[str] = set()
    # Ancestors of the paths in ``here``. A directory in it passed the check that nothing
    # above it is a non-directory of this layer, and none can become one (that is refused).
    here_parents: set[str] = set()
    marked: set[str] = set()  # parents of this layer's whiteouts: directories of the layer too
    hides: dict[str, bool] = {}
    kept = 0
    own_from = len(deferred_links)
    stream, members, tar = _open_layer(layer)
    fd = stream.fileno() if tar is None else -1
    digest = layer.digest
    present, root_opaque = state.present, "" in state.opaque
    try:
        for info in members:
            path = normalise_name(info.name, digest)
            if path is None:
                continue
            parent, _, base = path.rpartition("/")
            is_dir = info.type == tarfile.DIRTYPE
            if parent and parent not in here_parents:
                for anc in _ancestors(path):
                    if here.get(anc) is False:
                        raise SquallError(
                            f"layer {digest} writes {info.name!r} through "
                            f"{anc!r}, which the same layer made a symlink or file: refusing a "
                            "layer that could write outside the image root")
            if not is_dir and path in here_parents:
                raise SquallError(
                    f"layer {digest} turns {info.name!r} into a symlink or file after "
                    "writing below it: refusing a layer that could write outside the root")
            if base.startswith(WHITEOUT_PREFIX):
                if parent:
                    marked.add(parent)
                    marked.update(_ancestors(parent))
                if base == OPAQUE_MARKER:
                    opaque.add(parent)
                else:
                    whiteouts.add(posixpath.join(parent, base[len(WHITEOUT_PREFIX):]))
                continue
            if path in here:
                continue  # a second entry for the same path in one layer: first wins
            is_file = info.isfile()
            if info.type == tarfile.LNKTYPE:
                target = normalise_name(info.linkname, digest) or ""
                # a link to an earlier link of the layer links that one's file (tar's order)
                links_here[path] = links_here.get(target, target)
            elif is_file:
                # streamed layers: no span; the layer is read again if a link needs it
                files_here.setdefault(path, (info, (fd, info.offset_data) if fd >= 0 else None))
            here[path] = is_dir
            if parent and parent not in here_parents:
                here_parents.add(parent)
                here_parents.update(_ancestors(parent))
            if (path in present or path in state.whiteouts or _dir_hides(state, parent, hides)
                    or path in state.implicit_dirs and not is_dir):
                continue
            if root_opaque:
                continue
            if path == "dev" and not is_dir or path.startswith("dev/"):
                continue
            if not (is_file or is_dir or info.type in _LINK_OR_FIFO):
                continue  # device nodes and anything else exotic are skipped
            entry = Entry(path, info, digest)
            kept += 1
            _keep(state, path, info)
            if info.type == tarfile.LNKTYPE:
                deferred_links.append(_Deferred(entry, links_here[path], layer))
                continue
            if is_file:
                state.origin[path] = digest
            span = (fd, info.offset_data) if is_file and fd >= 0 else None
            if observer is not None and observer.wants_data(path, info):
                # a small file whose content tells a version
                if span is not None:
                    blob = os.pread(fd, info.size, info.offset_data)
                else:
                    assert tar is not None
                    member = tar.extractfile(info)
                    blob = member.read() if member is not None else b""
                observer.observe(path, info, blob)
                sink.add(entry, cast(BinaryIO, _BytesReader(blob)), None)
                continue
            if observer is not None:
                observer.observe(path, info, None)
            if span is None and is_file:
                assert tar is not None
                sink.add(entry, cast("BinaryIO | None", tar.extractfile(info)), None)
            else:
                sink.add(entry, None, span)
        if isinstance(stream, GrowingFile):
            stream.verified()  # read while downloading: the digest must match before going on
        _resolve_links(deferred_links, own_from, layer, files_here, links_here, here,
                       whiteouts, opaque)
    except tarfile.TarError as exc:
        if isinstance(stream, GrowingFile):
            stream.verified()  # a download that failed says so, rather than "corrupt"
        raise SquallError(f"layer {digest} is truncated or corrupt ({exc}): "
                          "delete it from the layer cache and build again") from None
    finally:
        if tar is None:
            state.open_files.append(stream)  # hard links may still copy from it
        else:
            stream.close()
    if not root_opaque:
        for d in (here_parents | marked) - here.keys():
            if not (d == "dev" or d.startswith("dev/") or _hidden(state, d)):
                state.implied.add(d)
    for path, is_dir in here.items():
        present.setdefault(path, is_dir)
        if not is_dir:
            state.cut.add(path)
    state.implicit_dirs |= here_parents | (marked - here.keys())
    state.whiteouts |= whiteouts
    state.opaque |= opaque
    return kept


_LINK_OR_FIFO = (tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE)


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


_ZEROS = bytes(tarfile.BLOCKSIZE * 2)


def _copy_span(span: Span, size: int, out_fd: int) -> None:
    """Copy ``size`` bytes of a layer file to ``out_fd`` in the kernel (sendfile)."""
    in_fd, offset = span
    while size > 0:
        sent = os.sendfile(out_fd, in_fd, offset, min(size, 1 << 30))
        if sent == 0:
            raise SquallError("a layer file is shorter than its tar headers say: delete the "
                              "layer cache entry and build again")
        offset += sent
        size -= sent


class TarSink:
    """Writes the merged tree as one uncompressed tar stream (fed to ``tar2sqfs``).

    Headers are written by Python; file data from layer files on disk goes from the page
    cache to the pipe with ``sendfile`` and never enters the interpreter."""

    def __init__(self, out: BinaryIO, on_bytes: Callable[[int], None] | None = None) -> None:
        self._out = out
        try:
            self._fd = out.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = -1
        self._on_bytes = on_bytes
        self._closed = False

    def _header(self, info: tarfile.TarInfo) -> None:
        self._out.write(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))

    def _pad(self, size: int) -> None:
        rest = size % tarfile.BLOCKSIZE
        if rest:
            self._out.write(bytes(tarfile.BLOCKSIZE - rest))

    def add(self, entry: Entry, data: BinaryIO | None, span: Span | None = None) -> None:
        """The entry owned by root, its mode normalised, its data from ``span`` or ``data``."""
        info = entry.info
        size = info.size if info.isfile() else 0
        link = ""
        if info.type == tarfile.SYMTYPE:
            link = info.linkname
        elif info.type == tarfile.LNKTYPE:
            link = normalise_name(info.linkname, "") or ""
        self._out.write(tarhead.gnu_header(entry.path, info.type, normalise_mode(info), size,
                                           info.mtime, link))
        if not size:
            return
        if span is not None and self._fd >= 0:
            self._out.flush()
            _copy_span(span, size, self._fd)
        elif span is not None:
            in_fd, offset = span
            left = size
            while left:
                chunk = os.pread(in_fd, min(left, COPY_CHUNK), offset)
                if not chunk:
                    raise SquallError("a layer file is shorter than its tar headers say")
                self._out.write(chunk)
                offset += len(chunk)
                left -= len(chunk)
        elif data is not None:
            left = size
            while left:
                chunk = data.read(min(left, COPY_CHUNK))
                if not chunk:
                    raise SquallError(f"layer {entry.layer} ends inside {entry.path!r}: the "
                                      "layer is truncated; delete it and build again")
                self._out.write(chunk)
                left -= len(chunk)
        self._pad(size)
        if self._on_bytes is not None:
            self._on_bytes(size)

    def add_synthetic(self, path: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mode = mode
        info.mtime = 0
        self._header(info)
        self._out.write(data)
        self._pad(len(data))

    def ensure_dir(self, path: str) -> None:
        info = tarfile.TarInfo(path)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        self._header(info)

    def close(self) -> None:
        if not self._closed:
            self._out.write(_ZEROS)
            self._out.flush()
            self._closed = True

    def abort(self) -> None:
        """Stop without writing the end of the archive (the build failed)."""
        self._closed = True


class DirSink:
    """Writes the merged tree into a directory (fed to ``mksquashfs -all-root``)."""

    def __init__(self, root: Path, on_bytes: Callable[[int], None] | None = None) -> None:
        self.root = root
        self._on_bytes = on_bytes
        self._dir_times: list[tuple[str, float, int]] = []
        root.mkdir(parents=True, exist_ok=True)

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path)

    def _parents(self, full: str) -> None:
        parent = os.path.dirname(full)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755, exist_ok=True)

    def _write_file(self, full: str, size: int, data: BinaryIO | None, span: Span | None
                    ) -> None:
        with open(full, "wb") as out:
            if span is not None:
                in_fd, offset = span
                left = size
                while left:
                    try:
                        n = os.copy_file_range(in_fd, out.fileno(), left, offset)
                    except OSError:
                        n = out.write(os.pread(in_fd, min(left, COPY_CHUNK), offset))
                    if n == 0:
                        raise SquallError("a layer file is shorter than its tar headers say")
                    offset += n
                    left -= n
            elif data is not None:
                shutil.copyfileobj(data, out, COPY_CHUNK)

    def add(self, entry: Entry, data: BinaryIO | None, span: Span | None = None) -> None:
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
                self._write_file(full, info.size, data, span)
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
        """Make ``path`` (resolved in the image: see :func:`resolve_in_image`) one component
        at a time, never through a symlink, so nothing is created outside the root."""
        full = str(self.root)
        for part in path.split("/"):
            full = os.path.join(full, part)
            try:
                os.mkdir(full, 0o755)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(full).st_mode):
                    raise SquallError(f"cannot make the working directory {path!r}: {full} "
                                      "is not a directory") from None
            except OSError as exc:
                raise _os_error(exc, full) from None

    def close(self) -> None:
        for full, mtime, _mode in reversed(self._dir_times):
            os.utime(full, (mtime, mtime), follow_symlinks=False)


def _os_error(exc: OSError, path: str) -> SquallError:
    if exc.errno == errno.ENOSPC:
        return SquallError(f"disk full while writing {path}: free space there or point "
                           "--work-dir (or TMPDIR) at a larger filesystem")
    return SquallError(f"cannot write {path}: {exc.strerror}")

