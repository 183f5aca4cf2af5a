"""The merge: every layer read once, from the top layer down, each by a :class:`LayerMerge`
that keeps the entries no upper layer shadows and hands them to the sink."""

from __future__ import annotations

import os
import posixpath
import tarfile
from typing import BinaryIO, cast

from squall.errors import SquallError
from squall.sqshbuild.unpack.entries import (
    OPAQUE_MARKER,
    WHITEOUT_PREFIX,
    Entry,
    EntryObserver,
    Layer,
    Sink,
    Span,
    ancestors,
    normalise_name,
    under_dev,
)
from squall.sqshbuild.unpack.links import HardLink, settle, write_links
from squall.sqshbuild.unpack.reading import open_layer
from squall.sqshbuild.unpack.tree import ImageTree, LayerSeen

_LINK_OR_FIFO = (tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE)


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
    tree = ImageTree()
    kept = 0
    for path, (data, mode) in (synthetic or {}).items():
        sink.add_synthetic(path, data, mode)
        tree.present[path] = False
        tree.keep(path, None)
        tree.implicit_dirs.update(ancestors(path))
        kept += 1
    links: list[HardLink] = []
    try:
        for layer in reversed(layers):
            kept += LayerMerge(layer, tree, sink, links, observer).run()
        write_links(links, tree, sink)
        for d in sorted(tree.implied - tree.dirs):
            sink.ensure_dir(d)
            tree.dirs.add(d)
    finally:
        for f in tree.open_files:
            f.close()
    for path in ensure_dirs or []:
        _ensure_dir(tree, sink, path)
    sink.close()
    return kept


def _ensure_dir(tree: ImageTree, sink: Sink, path: str) -> None:
    """The image's working directory, made (through the image's own symlinks) if missing."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SquallError(f"the image's working directory {path!r} has a '..' component: "
                          "fix WORKDIR in the image")
    norm = tree.resolve("/".join(parts), path)
    if norm and norm not in tree.dirs:
        sink.ensure_dir(norm)
        tree.dirs.add(norm)
        tree.dirs.update(ancestors(norm))


class LayerMerge:
    """One layer's pass: read its members once, keep what no upper layer shadows, then fold
    what the layer holds into the tree for the layers below it.

    Refused, with the layer and entry named: a path written through a symlink (or other
    non-directory) the same layer made, or a name made a non-directory after the layer
    wrote below it. Kept hard links go to ``links``, written once every layer is read."""

    def __init__(self, layer: Layer, tree: ImageTree, sink: Sink, links: list[HardLink],
                 observer: EntryObserver | None) -> None:
        self.layer, self.tree, self.sink, self.links = layer, tree, sink, links
        self.observer = observer
        self.digest = layer.digest
        self.seen = LayerSeen()
        self.hides: dict[str, bool] = {}  # tree.dir_hides memo, valid for this layer
        self.own_from = len(links)  # this layer's links are links[own_from:]
        self.root_opaque = "" in tree.opaque  # a layer above hid everything below it
        self.kept = 0
        self.fd = -1  # the layer file's, when members come with spans
        self.tar: tarfile.TarFile | None = None  # when they come from a stream

    def run(self) -> int:
        """Merge the layer; the number of entries kept."""
        stream, members, self.tar = open_layer(self.layer)
        self.fd = stream.fileno() if self.tar is None else -1
        try:
            for info in members:
                self._member(info)
            settle(self.links, self.own_from, self.layer, self.seen)
        except tarfile.TarError as exc:
            raise SquallError(f"layer {self.digest} is truncated or corrupt ({exc}): "
                              "delete it from the layer cache and build again") from None
        finally:
            if self.tar is None:
                self.tree.open_files.append(stream)  # hard links may still copy from it
            else:
                stream.close()
        self._fold()
        return self.kept

    def _member(self, info: tarfile.TarInfo) -> None:
        path = normalise_name(info.name, self.digest)
        if path is None:
            return
        parent, _, base = path.rpartition("/")
        is_dir = info.type == tarfile.DIRTYPE
        self._refuse_escape(info, path, parent, is_dir)
        if base.startswith(WHITEOUT_PREFIX):
            self._whiteout(parent, base)
        elif path not in self.seen.here:  # a second entry for one path: the first wins
            self._record(info, path, parent, is_dir)
            if not (self._shadowed(path, parent, is_dir) or self._skipped(info, path, is_dir)):
                self._keep(Entry(path, info, self.digest))

    def _refuse_escape(self, info: tarfile.TarInfo, path: str, parent: str,
                       is_dir: bool) -> None:
        seen = self.seen
        if parent and parent not in seen.parents:
            for anc in ancestors(path):
                if seen.here.get(anc) is False:
                    raise SquallError(
                        f"layer {self.digest} writes {info.name!r} through "
                        f"{anc!r}, which the same layer made a symlink or file: refusing a "
                        "layer that could write outside the image root")
        if not is_dir and path in seen.parents:
            raise SquallError(
                f"layer {self.digest} turns {info.name!r} into a symlink or file after "
                "writing below it: refusing a layer that could write outside the root")

    def _whiteout(self, parent: str, base: str) -> None:
        seen = self.seen
        if parent:
            seen.marked.add(parent)
            seen.marked.update(ancestors(parent))
        if base == OPAQUE_MARKER:
            seen.opaque.add(parent)
        else:
            seen.whiteouts.add(posixpath.join(parent, base[len(WHITEOUT_PREFIX):]))

    def _record(self, info: tarfile.TarInfo, path: str, parent: str, is_dir: bool) -> None:
        """What this layer holds at ``path``, shadowed above or not."""
        seen = self.seen
        if info.type == tarfile.LNKTYPE:
            target = normalise_name(info.linkname, self.digest) or ""
            # a link to an earlier link of the layer links that one's file (tar's order)
            seen.hard_links[path] = seen.hard_links.get(target, target)
        elif info.isfile():
            # streamed layers: no span; the layer is read again if a link needs it
            seen.files.setdefault(path, (info, self._span(info)))
        elif info.issym() or info.isfifo():
            # link(2) links a symlink or FIFO itself (Docker, Enroot): a link to it is one
            seen.files.setdefault(path, (info, None))
        seen.here[path] = is_dir
        if parent and parent not in seen.parents:
            seen.parents.add(parent)
            seen.parents.update(ancestors(parent))

    def _shadowed(self, path: str, parent: str, is_dir: bool) -> bool:
        """Whether a layer above has ``path``, hides it, or put a file where it is a parent."""
        tree = self.tree
        return (path in tree.present or path in tree.whiteouts
                or tree.dir_hides(parent, self.hides)
                or path in tree.implicit_dirs and not is_dir or self.root_opaque)

    @staticmethod
    def _skipped(info: tarfile.TarInfo, path: str, is_dir: bool) -> bool:
        """``dev/`` (Enroot mounts its own), device nodes and anything else exotic."""
        return under_dev(path, is_dir) or not (
            info.isfile() or is_dir or info.type in _LINK_OR_FIFO)

    def _span(self, info: tarfile.TarInfo) -> Span | None:
        return (self.fd, info.offset_data) if self.fd >= 0 else None

    def _keep(self, entry: Entry) -> None:
        info = entry.info
        self.kept += 1
        self.tree.keep(entry.path, info)
        if info.type == tarfile.LNKTYPE:
            self.links.append(HardLink(entry, self.seen.hard_links[entry.path], self.layer))
            return
        is_file = info.isfile()
        if is_file:
            self.tree.origin[entry.path] = self.digest
        span = self._span(info) if is_file else None
        if self.observer is not None and self.observer.wants_data(entry.path, info):
            blob = self._read_small(info, span)  # a small file whose content tells a version
            self.observer.observe(entry.path, info, blob)
            self.sink.add(entry, cast(BinaryIO, _BytesReader(blob)), None)
            return
        if self.observer is not None:
            self.observer.observe(entry.path, info, None)
        if span is None and is_file:
            assert self.tar is not None
            self.sink.add(entry, cast("BinaryIO | None", self.tar.extractfile(info)), None)
        else:
            self.sink.add(entry, None, span)

    def _read_small(self, info: tarfile.TarInfo, span: Span | None) -> bytes:
        if span is not None:
            return os.pread(self.fd, info.size, info.offset_data)
        assert self.tar is not None
        member = self.tar.extractfile(info)
        return member.read() if member is not None else b""

    def _fold(self) -> None:
        """Directories this layer implies, then everything it holds, into the tree."""
        seen, tree = self.seen, self.tree
        if not self.root_opaque:
            for d in (seen.parents | seen.marked) - seen.here.keys():
                if not (d == "dev" or d.startswith("dev/") or tree.hidden(d)):
                    tree.implied.add(d)
        tree.fold(seen)


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
