"""One image cache: the shared one or a user's own, its entries, and whose ones are used.

Root and the builder write the shared cache; a user reads it and writes only the user's
own cache (docs/security.md). :func:`open_shared` is the writers' way in (it makes what is
missing, owned by the builder); :func:`open_reader` a user's (the shared cache as it is,
or the user's own cache given as ``--cache-dir``); :func:`open_private` the user's own.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squall.atomic_write import write_atomic
from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import safefs
from squall.sqshbuild.cache import dirs
from squall.sqshbuild.cache.layout import FILE_MODE, TMP_PREFIX, entry_name, temp_suffix
from squall.sqshbuild.jsonbound import loads as bounded_json
from squall.sqshbuild.lock import SharedLock
from squall.sqshbuild.trust import Trust, is_writer

METADATA_LIMIT = 1 << 20  # index records and sidecars are a few KiB


@dataclass
class ImageCache:
    root: Path
    layer_root: Path
    trust: Trust
    writable: bool = True
    shared: bool = True  # the shared cache (root's and the builder's), else a user's own
    problem: str = ""  # why a writer cannot write it (one line, with the fix)
    noted: set[str] = field(default_factory=set)

    # -- names ----------------------------------------------------------------------------
    def sqsh(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.sqsh"

    def sidecar(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.json"

    def used_marker(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.used"

    def lock(self, digest: str, variant: str = "") -> SharedLock:
        return SharedLock(self.root / "locks" / f"{entry_name(digest, variant)}.lock",
                          trust=self.trust)

    def temp_path(self, digest: str, variant: str = "") -> Path:
        """A new, empty file of this process beside the image, under a name nobody can
        guess (``.building-<entry>.<host>.<pid>~<random>``), created with O_EXCL."""
        p = self.root / f"{TMP_PREFIX}{entry_name(digest, variant)}{temp_suffix()}"
        os.close(safefs.create(p, 0o600))
        return p

    # -- what is used ---------------------------------------------------------------------
    def note(self, path: Path, why: str) -> None:
        """One line, once per path, for an entry that is not used."""
        if str(path) in self.noted:
            return
        self.noted.add(str(path))
        log.warning("note: ignoring %s: it %s (docs/security.md); an admin can remove it",
                    path, why)

    def usable(self, path: Path, quiet: bool = False) -> bool:
        """``path`` is a file of this cache that may be used: a trusted owner, one link,
        written by no one else. Anything else there gets one note."""
        st = safefs.lstat(path)
        if st is None:
            return False
        why = self.trust.why_not_file(st)
        if why and not quiet:
            self.note(path, why)
        return not why

    def has(self, digest: str, variant: str = "") -> bool:
        return self.usable(self.sqsh(digest, variant))

    def read_json(self, path: Path, what: str) -> dict[str, Any] | None:
        """A small JSON object of this cache, or None (absent, or bad: one note)."""
        try:
            raw = safefs.read_file(path, self.trust, limit=METADATA_LIMIT)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except safefs.Unsafe as exc:
            self.note(path, str(exc).removeprefix(f"{path} "))
            return None
        except OSError as exc:
            self.malformed(path, what, f"it cannot be read: {exc.strerror}")
            return None
        try:
            data = bounded_json(raw, f"{what} {path}")
        except SquallError as exc:
            self.malformed(path, what, str(exc))
            return None
        if not isinstance(data, dict):
            self.malformed(path, what, "it is not a JSON object")
            return None
        return data

    def malformed(self, path: Path, what: str, why: str) -> None:
        if str(path) not in self.noted:
            self.noted.add(str(path))
            log.warning("note: malformed %s %s (%s): treated as missing", what, path, why)

    def read_sidecar(self, digest: str, variant: str = "") -> dict[str, Any] | None:
        return self.read_json(self.sidecar(digest, variant), "sidecar")

    # -- uses -----------------------------------------------------------------------------
    def touch(self, digest: str, variant: str = "") -> None:
        """Record a use (gc evicts the least recently used); only the cache's writers do:
        a user's hit on the shared cache writes nothing there."""
        if not self.writable:
            return
        marker = self.used_marker(digest, variant)
        st = safefs.lstat(marker)
        if st is None:
            try:
                os.close(safefs.create(marker, FILE_MODE))
            except OSError:
                pass
        elif not self.trust.why_not_file(st):
            try:
                os.utime(marker, follow_symlinks=False)
            except OSError:
                pass

    def last_use(self, digest: str, variant: str = "") -> float:
        """The newest of the entry's trusted times, never past now."""
        times = [0.0]
        for p in (self.sidecar(digest, variant), self.sqsh(digest, variant),
                  self.used_marker(digest, variant)):
            st = safefs.lstat(p)
            if st is not None and not self.trust.why_not_file(st):
                times.append(st.st_mtime)
        return min(max(times), time.time())


def open_shared(root: Path, must_write: bool = True) -> ImageCache:
    """The shared cache for root or the builder to write: made when missing (owned by the
    builder, 0755), refused in one line when unsafe or an earlier squall's. Without
    ``must_write``, one this writer cannot write (a read-only file system) is returned to
    read, ``problem`` saying why."""
    if not is_writer():
        raise SquallError(f"only root and the builder write the shared image cache {root}")
    trust = Trust.shared()
    try:
        real, layers = dirs.open_tree(root, trust, dirs.SHARED, dirs.builder_owner(),
                                      create=True)
    except safefs.Unsafe as exc:
        raise SquallError(f"the image cache {root} is not safe to use: {exc}; it is neither "
                          "read nor written (docs/security.md): fix it as root or use "
                          "another --cache-dir") from None
    except OSError as exc:
        sub = str(exc.filename or "")
        where = f"{root} ({sub})" if sub.startswith("/") and sub != str(root) else root
        raise SquallError(f"cannot create the image cache {where}: {exc.strerror}; pass "
                          "--cache-dir (or set SQSHBUILD_CACHE) to a writable place") from None
    if not os.access(real, os.W_OK | os.X_OK):
        if must_write:
            raise SquallError(dirs.not_writable(real))
        return ImageCache(real, layers, trust, writable=False, problem=dirs.not_writable(real))
    return ImageCache(real, layers, trust)


def open_private(root: Path) -> ImageCache:
    """A user's own cache (0700, the user's), made when missing."""
    trust = Trust.private()
    try:
        real, layers = dirs.open_tree(root, trust, dirs.PRIVATE, None, create=True)
    except (safefs.Unsafe, dirs.LegacyCache) as exc:
        raise SquallError(f"your image cache {root} is not safe to use: {exc}: remove it or "
                          "set XDG_CACHE_HOME elsewhere") from None
    except OSError as exc:
        raise SquallError(f"cannot create your image cache {root}: {exc.strerror}; set "
                          "XDG_CACHE_HOME to a writable place") from None
    return ImageCache(real, layers, trust, writable=True, shared=False)


def open_reader(root: Path, make_own: bool = False) -> ImageCache | None:
    """For a user: the shared cache at ``root`` to read (None when it is missing, or not
    safe: one note), or, when ``root`` is this user's own private directory, that cache
    to write. With ``make_own``, a missing ``root`` whose parent is this user's alone (a
    directory no one else can write) is made as this user's own cache: no other user's
    path can be taken that way."""
    st = safefs.lstat(root)
    if st is None:
        return open_private(root) if make_own and _mine_alone(root.parent) else None
    mine = st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode)
    trust = Trust.private() if mine else Trust.shared()
    try:
        real, layers = dirs.open_tree(root, trust, dirs.PRIVATE if mine else dirs.SHARED,
                                      None, create=mine)
    except FileNotFoundError:
        return None
    except (safefs.Unsafe, dirs.LegacyCache, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        log.warning("note: ignoring the image cache %s: %s (docs/security.md)", root, why)
        return None
    return ImageCache(real, layers, trust, writable=mine, shared=not mine)


def _mine_alone(path: Path) -> bool:
    """``path`` is a directory (not a link) of this user's that no one else may write."""
    st = safefs.lstat(path)
    return st is not None and not Trust.private().why_not_cache_dir(st)


def write_json(cache: ImageCache, path: Path, data: dict[str, Any], fsync: bool) -> None:
    """A small record of this cache's, replaced atomically (only its writers call it)."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", FILE_MODE,
                 tmp=path.with_name(f"{TMP_PREFIX}{path.name}{temp_suffix()}"), fsync=fsync)
