"""The files of a layer download (:mod:`squall.sqshbuild.layers`): the layer tar being
written, hashed and inflated as the bytes arrive and resumed after a cut; its partial blob;
the fsync and the ``.ok`` marker; and the exceptions that steer a download's retries."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from squall.errors import SquallError
from squall.sqshbuild import safefs
from squall.sqshbuild.inflate import SNIFF_BYTES, Decoder
from squall.sqshbuild.noreplace import place_new
from squall.sqshbuild.registry import Descriptor
from squall.sqshbuild.transport import too_long

BEATEN_EVERY = 2.0  # how often a download looks whether another's copy was placed first

Progress = Callable[[int], None]


class LayerTar:
    """The layer tar a download writes (``<hex>.tar.tmp``): the blob's bytes hashed and
    inflated in order. It outlives one attempt, so that a download cut mid-body and resumed
    with ``Range`` goes on writing the same file; :meth:`reset` drops it when the bytes must
    be taken from the start again (a mismatch, a registry that cannot resume)."""

    def __init__(self, tmp: Path, digest: str, progress: Progress | None,
                 partial: Path | None = None) -> None:
        self.tmp = tmp
        self.partial = partial  # the blob being downloaded: a plain tar is published from it
        self.digest = digest
        self.progress = progress
        self.reported = 0  # bytes given to progress, kept across restarts: none counted twice
        self.have = 0
        self.compressed = 0  # the blob's length as known before it comes (0: not known)
        self.hasher = hashlib.sha256()
        self.decoder: Decoder | None = None
        self.out: BinaryIO | None = None  # open from start() until publish() or reset()
        self.head = b""  # the first bytes, until there are enough to tell the compression
        self.wire = 0  # the blob's bytes come so far, fed or not yet (progress, the lock)
        # says whether another's copy of the layer was placed: this download then stops
        self.beaten: Callable[[], bool] | None = None
        self._looked = time.monotonic()

    @property
    def started(self) -> bool:
        return self.out is not None

    def start(self) -> None:
        """Begin the tar again from the blob's first byte."""
        self.reset()
        # This user's leftovers (a killed download): started over; another user's names
        # were never handed to this tar (LayerCache._taken)
        safefs.unlink_own(self.tmp)
        self.out = os.fdopen(safefs.create(self.tmp, 0o644), "wb")

    def arrived(self, n: int) -> None:
        """``n`` bytes of the blob came (a chunk is fed once whole); every BEATEN_EVERY
        seconds, a look whether another's copy was placed first (:class:`Beaten`)."""
        self.wire += n
        self._report()
        if self.beaten is not None and time.monotonic() - self._looked >= BEATEN_EVERY:
            self._looked = time.monotonic()
            if self.beaten():
                raise Beaten

    def feed(self, chunk: bytes) -> None:
        assert self.out is not None
        self.hasher.update(chunk)
        if self.decoder is None:
            # the compression is told by the first bytes: a slow link may bring them one by one
            self.head += chunk
            if len(self.head) >= SNIFF_BYTES:
                self._decode_head()
        else:
            self.decoder.write(chunk)
        if self.decoder is not None and self.decoder.too_big:
            self.decoder.finish()  # says so: stopped now, whatever the blob still brings
        self.have += len(chunk)
        self.wire = max(self.wire, self.have)
        self._report()

    def _report(self) -> None:
        """Bytes as they come, not once a chunk is whole: a trickle moves the count too."""
        if self.progress and self.wire > self.reported:
            self.progress(self.wire - self.reported)
            self.reported = self.wire

    def publish(self, final: Path, source: str) -> None:
        """Check the digest and finish the tar; only then rename it to ``final``."""
        got = "sha256:" + self.hasher.hexdigest()
        if got != self.digest:
            raise Mismatch(f"hashes to {got}")
        if self.decoder is None and self.head:
            self._decode_head()  # a blob shorter than a magic number
        if self.decoder is None:
            raise SquallError(f"layer {self.digest} of {source} is empty: re-push the image")
        self.decoder.finish()
        assert self.out is not None
        self.out.close()
        self.out = None
        # Never over a copy that is there: another build's, verified, placed while this
        # one downloaded (it pulled around this one's lock): the same bytes, kept.
        if self.decoder.plain and self.partial is not None:
            if not place_new(self.partial, final):  # the blob is the tar: never copied
                safefs.unlink_own(self.partial)
            safefs.unlink_own(self.tmp)
            return
        if not place_new(self.tmp, final):
            safefs.unlink_own(self.tmp)

    def _decode_head(self) -> None:
        assert self.out is not None
        self.decoder = Decoder(self.head, self.out, self.digest, self.compressed,
                               copy_plain=self.partial is None)
        self.decoder.write(self.head)
        self.head = b""

    def reset(self) -> None:
        """Drop what was written (the file goes with :meth:`close` or the next start)."""
        self.head = b""
        if self.decoder is not None:
            self.decoder.close()
            self.decoder = None
        if self.out is not None:
            self.out.close()
            self.out = None
        self.have = self.wire = 0
        self.hasher = hashlib.sha256()

    def close(self) -> None:
        self.reset()
        safefs.unlink_own(self.tmp)


def open_partial(path: Path, append: bool) -> BinaryIO:
    """The partial blob to write: this user's own to append to, or a new file (O_EXCL: a
    name someone planted since is an error, never followed)."""
    if append:
        fd = safefs.open_own(path)
        if fd is None:
            raise SquallError(f"the partial download {path} is no longer this build's: "
                              "try again")
        return os.fdopen(fd, "ab")
    safefs.unlink_own(path)
    return os.fdopen(safefs.create(path, 0o644), "wb")


def ensure_dir(d: Path) -> None:
    """``d`` made when missing (its parent's mode, writable by nobody else), never
    through a link."""
    if safefs.lstat(d) is not None:
        return
    parent = safefs.open_dir(d.parent)
    try:
        fd, _created = safefs.make_dir_at(parent, d.name,
                                          stat.S_IMODE(os.fstat(parent).st_mode) & 0o755)
        os.close(fd)
    except OSError as exc:
        raise SquallError(f"cannot create cache directory {d}: {exc.strerror}") from None
    finally:
        os.close(parent)


def fsync_file(path: Path) -> None:
    fd = safefs.open_read(path)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def mark_ok(ok: Path) -> None:
    """The layer's ``.ok``; one already there (another build's) is as good."""
    try:
        os.close(safefs.create(ok, 0o644))
    except FileExistsError:
        pass


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


class Retry(Exception):
    pass


class Mismatch(Exception):
    pass


class Beaten(Exception):
    """Another build's verified copy of the layer was placed while this one downloaded."""


class TooLong(Exception):
    """A blob whose descriptor gives no size brings more than the site allows."""


def longer(desc: Descriptor, where: str, bound: int, length: int | None = None) -> Exception:
    """A blob that brings (or by its ``Content-Length`` would bring) more than ``bound``
    bytes: more than its descriptor says is a mismatch (the next source, or a second try);
    with no size there, the site maximum is the bound."""
    if desc.size:
        return Mismatch(f"is longer than the {desc.size} bytes the manifest gives")
    return TooLong(too_long(desc.digest, where, bound, length))
