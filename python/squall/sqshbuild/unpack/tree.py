"""What the merge knows as it goes down the layers: :class:`ImageTree`, what the layers
above hold and what the image keeps, and :class:`LayerSeen`, what the layer being read
holds. Paths are resolved against this tree, never the host's."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from typing import BinaryIO

from squall.errors import SquallError
from squall.sqshbuild.unpack.entries import Span, ancestors

MAX_SYMLINKS = 40  # as the kernel's ELOOP limit


@dataclass
class LayerSeen:
    """One layer's entries as read so far (whatever upper layers hide of them)."""

    here: dict[str, bool] = field(default_factory=dict)  # path -> is a directory
    files: dict[str, tuple[tarfile.TarInfo, Span | None]] = field(default_factory=dict)
    hard_links: dict[str, str] = field(default_factory=dict)  # path -> target
    whiteouts: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)
    # Ancestors of the paths in ``here``. A directory in it passed the check that nothing
    # above it is a non-directory of this layer, and none can become one (that is refused).
    parents: set[str] = field(default_factory=set)
    marked: set[str] = field(default_factory=set)  # parents of whiteouts: directories too

    def decides(self, path: str) -> bool:
        """Whether this layer says what ``path`` was for the layers below it: it has the
        name, a whiteout of it, or a non-directory, whiteout or opaque marker above it."""
        return (path in self.here or path in self.whiteouts
                or any(self.here.get(a) is False or a in self.whiteouts or a in self.opaque
                       for a in ancestors(path)))


@dataclass
class ImageTree:
    """The layers above the one being read, and what the merged image holds so far."""

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
    # non-directories, and directories (made, or parents of kept entries).
    links: dict[str, str] = field(default_factory=dict)
    nondirs: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    open_files: list[BinaryIO] = field(default_factory=list)  # layer files, closed at the end

    def hidden(self, path: str) -> bool:
        """Whether a layer above has ``path`` or hides it (whiteout, opaque, non-directory)."""
        if path in self.present or path in self.whiteouts:
            return True
        for parent in ancestors(path):
            if parent in self.whiteouts or parent in self.opaque:
                return True
            if self.present.get(parent) is False or parent in self.cut:
                return True
        return False

    def dir_hides(self, d: str, memo: dict[str, bool]) -> bool:
        """Whether directory ``d`` or one of its ancestors hides what lies below it (a
        whiteout, an opaque marker, a non-directory above); ``memo`` is valid for one layer."""
        if not d:
            return False
        hides = memo.get(d)
        if hides is None:
            hides = (d in self.whiteouts or d in self.opaque or self.present.get(d) is False
                     or d in self.cut or self.dir_hides(d.rpartition("/")[0], memo))
            memo[d] = hides
        return hides

    def keep(self, path: str, info: tarfile.TarInfo | None) -> None:
        """Record a kept entry (``info`` None: a synthetic file) in the image's tree."""
        if info is not None and info.type == tarfile.DIRTYPE:
            self.dirs.add(path)
        elif info is not None and info.type == tarfile.SYMTYPE:
            self.links[path] = info.linkname
        else:
            self.nondirs.add(path)
        for parent in ancestors(path):
            if parent in self.dirs:
                break
            self.dirs.add(parent)

    def fold(self, seen: LayerSeen) -> None:
        """After a layer is read: what it holds shadows the layers below it."""
        for path, is_dir in seen.here.items():
            self.present.setdefault(path, is_dir)
            if not is_dir:
                self.cut.add(path)
        self.implicit_dirs |= seen.parents | (seen.marked - seen.here.keys())
        self.whiteouts |= seen.whiteouts
        self.opaque |= seen.opaque

    def resolve(self, path: str, shown: str) -> str:
        """``path`` (relative to the root, no ``..``) with every symlink of the image
        resolved against the image's own root, as a lookup inside the container would: an
        absolute target starts again at the image root and ``..`` stops there, so the result
        never leaves the image. Refused: a component that is a file, or a symlink loop."""
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
            target = self.links.get(cur)
            if target is not None:
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise SquallError(f"the image's working directory {shown!r} passes through "
                                      f"a symlink loop at {cur!r}: fix WORKDIR or the link in "
                                      "the image")
                if target.startswith("/"):
                    out = []
                todo.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
                continue
            if cur in self.nondirs:
                raise SquallError(f"the image's working directory {shown!r} passes through "
                                  f"{cur!r}, which is a file in the image, not a directory: "
                                  "fix WORKDIR in the image")
            out.append(part)
        return "/".join(out)
