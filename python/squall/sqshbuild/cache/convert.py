"""``sqshbuild convert-cache``: an earlier squall's shared cache (``1777``, users' entries
in it) made into one that only root and the builder write.

Nothing of another user's is opened, followed, chmodded or removed: a new cache is made
beside the old one (owned by the builder, 0755), the images, sidecars and layers that
root or the builder made (regular files with one link) are renamed into it through
directory descriptors, and the old directory, with whatever users left in it, is renamed
``<cache>.old-<time>`` for the admin to look at and remove.

A name proves nothing in a directory another user could write (hers, or writable by a
group or everyone without the sticky bit): she may have swapped two of root's files
there (issue 39: the base layer then held the app layer). From such a directory only what
its bytes prove moves (:func:`_move_proven`): a file whose sha256 is its name (an image
config; a layer kept as its own uncompressed blob), re-hashed once, with a fresh ``.ok``.
An inflated layer (named by its compressed blob), an image and a sidecar cannot be proven
and stay in the old directory; the next build fetches or builds them again.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import safefs
from squall.sqshbuild.cache import dirs
from squall.sqshbuild.cache.layout import FILE_MODE
from squall.sqshbuild.noreplace import place_new
from squall.sqshbuild.trust import Trust, is_writer

_HEX = frozenset("0123456789abcdef")
_CHUNK = 1 << 20


@dataclass
class Converted:
    root: Path
    old: Path
    moved: list[str] = field(default_factory=list)
    left: int = 0
    # directories (within the old cache) that others could write: why, and how many
    # entries there could not be proven by their bytes and stayed
    unproven: dict[str, tuple[str, int]] = field(default_factory=dict)


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
            new_fd = safefs.make_new_dir(pfd, new_name, dirs.SHARED, dirs.builder_owner())
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
    for where, (why, n) in out.unproven.items():
        what = "layers and configs" if where else "images and sidecars"
        log.warning("note: %s, so a name there proves nothing: %d %s that their bytes do "
                    "not prove stay in %s; they are fetched or built again when asked for "
                    "(docs/security.md)", why, n, what, out.old / where)
    return out


def _move_all(old_fd: int, new_fd: int, trust: Trust, out: Converted) -> None:
    why = trust.why_not_dir(os.fstat(old_fd))
    why = f"{out.root.name} {why}" if why else ""
    if why:  # no image or sidecar is provable by its bytes
        _leave_all(old_fd, (".sqsh", ".json"), out, "", why)
    else:
        _move_trusted(old_fd, new_fd, trust, (".sqsh", ".json"), out, "")
    layers = _open_sub(old_fd, trust, "layers", "sha256")
    if layers is None:
        return
    fd, below = layers
    why = why or below
    try:
        dst = safefs.make_new_dir(new_fd, "layers", dirs.SHARED, dirs.builder_owner())
        try:
            dst2 = safefs.make_new_dir(dst, "sha256", dirs.SHARED, dirs.builder_owner())
            try:
                if why:
                    _move_proven(fd, dst2, trust, out, why)
                else:
                    _move_trusted(fd, dst2, trust, (".tar", ".ok", ".config"), out,
                                  "layers/sha256/", start="")
            finally:
                os.close(dst2)
        finally:
            os.close(dst)
    finally:
        os.close(fd)


def _leave_all(src_fd: int, keep: tuple[str, ...], out: Converted, where: str,
               why: str) -> None:
    n = sum(1 for e in os.scandir(src_fd) if e.name.endswith(keep))
    out.left += n
    if n:
        out.unproven[where] = (why, n)


def _move_proven(src_fd: int, dst_fd: int, trust: Trust, out: Converted, why: str) -> None:
    """From a directory others could write: the layers and configs whose bytes hash to
    their names, each with a fresh ``.ok`` (made once it is on disk); nothing else."""
    unproven = 0
    for name in sorted(os.listdir(src_fd)):  # listed first: entries move out meanwhile
        hexpart, _, ext = name.partition(".")
        ours = len(hexpart) == 64 and set(hexpart) <= _HEX and ext in ("tar", "config")
        if ours and _prove_and_move(src_fd, dst_fd, name, hexpart, trust):
            out.moved.append("layers/sha256/" + name)
            if ext == "tar":
                _mark_durable(dst_fd, f"{hexpart}.ok")
            continue
        out.left += 1  # its old .ok among them: a fresh one goes with a proven tar
        unproven += 1 if ours else 0
    if unproven:
        out.unproven["layers/sha256"] = (why, unproven)


def _prove_and_move(src_fd: int, dst_fd: int, name: str, hexpart: str, trust: Trust) -> bool:
    """Hash the trusted file ``name`` through a descriptor and move it when its sha256 is
    ``hexpart``; the file moved is checked to be the file hashed (a swap meanwhile is put
    back, and nothing moves)."""
    seen = safefs.lstat_at(src_fd, name)
    if seen is None or trust.why_not_file(seen):
        return False  # never opened: another user's, a FIFO, a link
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=src_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if trust.why_not_file(st) or _sha256(fd) != hexpart:
            return False
        os.fsync(fd)
        os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        now = safefs.lstat_at(dst_fd, name)
        if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
            return True
        # another file was put in its place between the hash and the rename: back to the
        # old directory, over nothing
        if not place_new(name, name, dst_fd, src_fd):
            place_new(name, f"{name}.unproven-{uuid.uuid4().hex[:8]}", dst_fd, src_fd)
        return False
    finally:
        os.close(fd)


def _sha256(fd: int) -> str:
    h = hashlib.sha256()
    while chunk := os.read(fd, _CHUNK):
        h.update(chunk)
    return h.hexdigest()


def _mark_durable(dir_fd: int, name: str) -> None:
    """A layer's ``.ok``: its tar is whole and on disk (fsynced when it was hashed)."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     FILE_MODE, dir_fd=dir_fd)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)  # whatever the umask
    finally:
        os.close(fd)


def _open_sub(fd: int, trust: Trust, *names: str) -> tuple[int, str] | None:
    """The directory ``names`` below ``fd`` (never through a link), and why one of those
    on the way could be written by another user ('' when none could)."""
    here = fd
    opened: list[int] = []
    why = ""
    try:
        for n in names:
            here = safefs.open_dir(n, dir_fd=here)
            opened.append(here)
            bad = "" if why else trust.why_not_dir(os.fstat(here))
            why = why or (f"{'/'.join(names[:len(opened)])} {bad}" if bad else "")
    except OSError:
        for o in opened:
            os.close(o)
        return None
    for o in opened[:-1]:
        os.close(o)
    return here, why
