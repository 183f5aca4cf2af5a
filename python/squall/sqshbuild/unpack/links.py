"""Hard links: kept as the merge goes down, written once every layer is read.

A hard link links the file its own layer saw under its target: that layer's member of the
name, else the topmost lower layer's, found as the merge goes down. A link whose target
was deleted or replaced above keeps the content its layer linked, as overlay keeps the
inode (umoci's result): the first such link of a file becomes a file of its own, the
others link to it. A link to a symlink or a FIFO is written as another symlink with the
same target, or another FIFO, as link(2) leaves them when Docker or Enroot extract.
"""

from __future__ import annotations

import copy
import tarfile
from dataclasses import dataclass
from typing import BinaryIO, cast

from squall.errors import SquallError
from squall.sqshbuild.unpack.entries import Entry, Layer, Sink, Span
from squall.sqshbuild.unpack.reading import open_layer
from squall.sqshbuild.unpack.tree import ImageTree, LayerSeen


@dataclass
class HardLink:
    """A kept hard link, written at the end. ``saved``: the header and data of the file it
    links, ``source``: that file's layer (reopened when a streamed layer's member is needed
    again). ``pending`` while no layer has said what ``target`` was."""

    entry: Entry
    target: str
    source: Layer
    saved: tuple[tarfile.TarInfo, Span | None] | None = None
    pending: bool = True


def settle(links: list[HardLink], own_from: int, layer: Layer, seen: LayerSeen) -> None:
    """After a layer is read: the pending links whose target this layer decides (the
    layer's own links are ``links[own_from:]``). Its file of that name is the one linked;
    for a link from above, a hard link of this layer is a file too (its target); a
    directory, symlink, whiteout or opaque parent of that name means no file was there when
    the link was made (dangling)."""
    for i, link in enumerate(links):
        if not link.pending:
            continue
        if i < own_from and link.target in seen.hard_links:
            link.target = seen.hard_links[link.target]
        if link.target in seen.files:
            link.saved, link.source, link.pending = seen.files[link.target], layer, False
        elif seen.decides(link.target):
            link.pending = False


class _LinkWriter:
    """Writes the links in order: those to the image's own file, copies of files no
    longer in the image, and links to those copies after them."""

    def __init__(self, tree: ImageTree, sink: Sink) -> None:
        self.tree, self.sink = tree, sink
        self.copies: dict[tuple[str, str], str] = {}  # (layer, target) -> the copy's path
        self.reread: dict[str, tuple[Layer, list[tuple[Entry, tarfile.TarInfo]]]] = {}
        self.followers: list[Entry] = []  # links to those copies, written after them

    def add(self, link: HardLink) -> None:
        entry, saved = link.entry, link.saved
        if saved is None:
            raise SquallError(
                f"layer {entry.layer} has a hard link {entry.path!r} to {entry.info.linkname!r}, "
                "which is not a file in the image: rebuild the image without the dangling link")
        if saved[0].issym() or saved[0].isfifo():
            # a hard link to a symlink is a symlink with its target, one to a FIFO a FIFO:
            # written as such, nothing is followed or read
            info = copy.copy(saved[0])
            info.name = entry.path
            self.sink.add(Entry(entry.path, info, entry.layer), None)
            return
        key = (link.source.digest, link.target)
        first = self.copies.get(key)
        info = copy.copy(entry.info)
        if self.tree.origin.get(link.target) == link.source.digest:
            info.linkname = link.target  # the file in the image is the one this link linked
            self.sink.add(Entry(entry.path, info, entry.layer), None)
        elif first is not None:
            info.linkname = first
            self.followers.append(Entry(entry.path, info, entry.layer))
        else:
            self.copies[key] = entry.path
            info = copy.copy(saved[0])
            info.name = entry.path
            if saved[1] is not None:
                self.sink.add(Entry(entry.path, info, entry.layer), None, saved[1])
            else:  # a streamed layer: its data is read again in finish()
                self.reread.setdefault(link.source.digest, (link.source, []))[1].append(
                    (Entry(entry.path, info, entry.layer), saved[0]))

    def finish(self) -> None:
        for layer, wanted in self.reread.values():
            _copy_from_stream(layer, wanted, self.sink)
        for entry in self.followers:
            self.sink.add(entry, None)


def write_links(links: list[HardLink], tree: ImageTree, sink: Sink) -> None:
    writer = _LinkWriter(tree, sink)
    for link in links:
        writer.add(link)
    writer.finish()


def _copy_from_stream(layer: Layer, wanted: list[tuple[Entry, tarfile.TarInfo]],
                      sink: Sink) -> None:
    """Write each entry with the data of its member (by header offset) of a streamed layer,
    read once more from the start."""
    by_offset: dict[int, list[Entry]] = {}
    for entry, member in wanted:
        by_offset.setdefault(member.offset, []).append(entry)
    stream, members, tar = open_layer(Layer(layer.digest, layer.open))
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
