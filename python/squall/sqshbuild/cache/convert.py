"""``sqshbuild convert-cache``: an earlier squall's shared cache (``1777``, users' entries
in it) made into one that only root and the builder write.

Nothing of another user's is opened, followed, chmodded or removed: a new cache is made
beside the old one (owned by the builder, 0755), the images, sidecars and layers that
root or the builder made (regular files with one link) are renamed into it through
directory descriptors, and the old directory, with whatever users left in it, is renamed
``<cache>.old-<time>`` for the admin to look at and remove.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from squall.errors import SquallError
from squall.sqshbuild import safefs
from squall.sqshbuild.cache import dirs
from squall.sqshbuild.trust import Trust, is_writer


@dataclass
class Converted:
    root: Path
    old: Path
    moved: list[str] = field(default_factory=list)
    left: int = 0


def _move_trusted(src_fd: int, dst_fd: int, trust: Trust, keep: tuple[str, ...],
                  out: Converted, prefix: str, start: str = "sha256-") -> None:
    """Rename the entries named ``start...keep`` that ``trust`` accepts; count the rest."""
    for entry in os.scandir(src_fd):
        name = entry.name
        if not name.startswith(start) or not name.endswith(keep):
            out.left += 1
            continue
        st = safefs.lstat_at(src_fd, name)
        if st is None or trust.why_not_file(st):
            out.left += 1
            continue
        os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        out.moved.append(prefix + name)


def convert(root: Path) -> Converted:
    if not is_writer():
        raise SquallError("convert-cache runs as root (or the builder): it moves the cache's "
                          "trusted images into a new directory")
    trust = Trust.shared()
    pfd, parent = safefs.walk(root.parent, trust, dirs=trust)
    try:
        st = safefs.lstat_at(pfd, root.name)
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise SquallError(f"{root} is not a directory: nothing to convert")
        stamp = time.strftime("%Y%m%dT%H%M%S")
        new_name, old_name = f"{root.name}.new-{stamp}", f"{root.name}.old-{stamp}"
        out = Converted(parent / root.name, parent / old_name)
        old_fd = safefs.open_dir(root.name, dir_fd=pfd)
        try:
            new_fd, _c = dirs.make_or_open(pfd, new_name, dirs.SHARED, dirs.builder_owner())
            try:
                _move_all(old_fd, new_fd, trust, out)
            finally:
                os.close(new_fd)
        finally:
            os.close(old_fd)
        os.rename(root.name, old_name, src_dir_fd=pfd, dst_dir_fd=pfd)
        os.rename(new_name, root.name, src_dir_fd=pfd, dst_dir_fd=pfd)
        os.fsync(pfd)
    finally:
        os.close(pfd)
    return out


def _move_all(old_fd: int, new_fd: int, trust: Trust, out: Converted) -> None:
    _move_trusted(old_fd, new_fd, trust, (".sqsh", ".json"), out, "")
    layers = _open_sub(old_fd, "layers", "sha256")
    if layers is None:
        return
    try:
        dst, _c = dirs.make_or_open(new_fd, "layers", dirs.SHARED, dirs.builder_owner())
        try:
            dst2, _c = dirs.make_or_open(dst, "sha256", dirs.SHARED, dirs.builder_owner())
            try:
                _move_trusted(layers, dst2, trust, (".tar", ".ok", ".config"), out,
                              "layers/sha256/", start="")
            finally:
                os.close(dst2)
        finally:
            os.close(dst)
    finally:
        os.close(layers)


def _open_sub(fd: int, *names: str) -> int | None:
    here = fd
    opened: list[int] = []
    try:
        for n in names:
            here = safefs.open_dir(n, dir_fd=here)
            opened.append(here)
    except OSError:
        for o in opened:
            os.close(o)
        return None
    for o in opened[:-1]:
        os.close(o)
    return here
