"""The shared image cache: ``<cache>/sha256-<hex>.sqsh`` + sidecar, a reference index, gc.

Layout (default ``/fsx/squall/images``, env ``SQSHBUILD_CACHE``)::

    sha256-<hex>[-<variant>].sqsh  the image; its presence is what "complete" means
    sha256-<hex>[-<variant>].json  sidecar: reference, digests, size, created, versions
    sha256-<hex>[-<variant>].used  last use (mtime), writable by every user (0666, empty)
    index/<sha256 of ref>.json     reference (+ platform) -> manifest digest, offline hits
    locks/sha256-<hex>[-<variant>].lock  the build lock (see lock.py)
    layers/sha256/<hex>.tar        the layer cache, uncompressed (env SQSHBUILD_LAYER_CACHE)
    .building-*                    temporary files; never end in .sqsh

``<variant>`` names squash options other than the default (zstd level 3, 128K blocks):
``lzo-b128k-noD`` for Enroot's format, ``gzip9-b128k``, ``zstd3-b64k``...: the same
manifest squashed another way is another file.

Permissions (docs/sqshbuild.md, "Permissions") and trust (docs/security.md): directories
sqshbuild creates inside a cache root get the root's mode, sticky wherever others may
write (a ``1777`` root: ``1777``; a ``2775`` root: ``3775``), set explicitly whatever the
umask through descriptors that follow no link, and, when sqshbuild runs as root, the
root's owner and group; every file it publishes is ``0644``. An entry is used only when
its owner is root, a builder (:mod:`.trust`) or this user; every directory from ``/``
down is checked before use (:mod:`.safefs`). A cache this user cannot write (a read-only
one, or one made by an older version as root) still serves hits; :meth:`ImageCache.open`
says why it is not writable, and the build goes to the per-user cache
(:func:`user_cache_dir`).

Publishing writes ``.building-sha256-<hex>.<host>.<pid>`` beside the target, fsyncs it,
renames the sidecar then the image into place and fsyncs the directory, so a reader sees
either no image or a complete one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import stat
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squall.atomic_write import temp_name, write_atomic
from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import safefs
from squall.sqshbuild.lock import SharedLock, pid_alive
from squall.sqshbuild.trust import Trust, may_remove, who

DEFAULT_CACHE = "/fsx/squall/images"
CACHE_ENV = "SQSHBUILD_CACHE"
LAYER_CACHE_ENV = "SQSHBUILD_LAYER_CACHE"
TMP_PREFIX = ".building-"
WORK_PREFIX = "sqshbuild-"  # scratch directories in --work-dir / TMPDIR
FILE_MODE = 0o644
SHARED_ROOT_MODE = 0o1777  # a cache root sqshbuild creates: any user, sticky, like /tmp
PRIVATE_ROOT_MODE = 0o700
DEAD_TEMP_AGE = 24 * 3600  # a temporary file of another host this old is a dead build's


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def user_cache_dir() -> Path:
    """The per-user cache a build falls back to: ``$XDG_CACHE_HOME/squall/images``
    (default ``~/.cache/squall/images``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "squall" / "images"


def entry_name(digest: str, variant: str = "") -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64:
        raise SquallError(f"malformed digest {digest!r}")
    return f"sha256-{hexpart}-{variant}" if variant else f"sha256-{hexpart}"


def disk_error(exc: OSError, path: Path | str, doing: str = "writing") -> SquallError:
    """One line for an OSError while writing ``path``: "disk full" naming the directory."""
    path = Path(path)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "disk full" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return SquallError(f"{what} in {path.parent} ({doing} {path.name}): free space there "
                           "or point --cache-dir / --work-dir / -o elsewhere")
    return SquallError(f"cannot {doing.removesuffix('ing')} {path}: {exc.strerror or exc}")


def sub_dir_mode(root_mode: int) -> int:
    """The mode of a directory sqshbuild creates inside a cache root of ``root_mode``: the
    root's permission and setgid bits, always usable by its owner, and sticky wherever
    others may write (docs/security.md: nobody may rename or remove another user's entry)."""
    mode = (stat.S_IMODE(root_mode) & ~stat.S_ISVTX & ~stat.S_ISUID) | 0o700
    return mode | stat.S_ISVTX if mode & 0o022 else mode


def _owner_of(st: os.stat_result) -> tuple[int, int]:
    return st.st_uid, st.st_gid


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _dead_here(stem: str) -> bool | None:
    """For a name ending ``<host>.<pid>`` (and an optional ``~<random>``): True when the
    host is this one and the process is gone, False when it lives, None when the name is
    another host's or has no owner."""
    stem = stem.split("~", 1)[0]
    head, _, pid = stem.rpartition(".")
    host = socket.gethostname()
    if not pid.isdigit() or not (head.endswith("." + host) or head.endswith("-" + host)):
        return None
    return int(pid) != os.getpid() and not pid_alive(int(pid))


def is_dead_temp(path: Path, now: float | None = None) -> bool:
    """A temporary file whose build is gone: made on this host by a process that no
    longer exists, or not written for a day (another host's)."""
    dead = _dead_here(path.name)
    if dead is not None:
        return dead
    try:
        return (now or time.time()) - path.lstat().st_mtime > DEAD_TEMP_AGE
    except OSError:
        return False


def remove_dead_temps(directory: Path, pattern: str) -> list[tuple[Path, int]]:
    """Remove the files matching ``pattern`` in ``directory`` that dead builds of this
    user left (root: of trusted owners too); other users' are theirs. Returns (path,
    bytes)."""
    removed: list[tuple[Path, int]] = []
    try:
        candidates = list(directory.glob(pattern))
    except OSError:
        return removed
    for p in candidates:
        st = safefs.lstat(p)
        if st is None or not may_remove(st) or not is_dead_temp(p):
            continue
        try:
            if stat.S_ISDIR(st.st_mode):
                size = _tree_size(p)
                rmtree_forced(p)
            else:
                size = st.st_size
                p.unlink()
            removed.append((p, size))
        except OSError:
            pass
    return removed


def rmtree_forced(path: Path) -> None:
    """rmtree that also removes what a build made read-only (``chmod u+w`` first, on the
    directory rmtree holds, which is never reached through a link)."""
    def onerror(func: Any, p: str, _exc: Any) -> None:
        try:
            fd = safefs.open_dir(os.path.dirname(p))
            try:
                os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=onerror)
    if os.path.lexists(path):
        raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), str(path))


def work_dir_prefix(kind: str) -> str:
    """mkdtemp prefix of a scratch directory: ``sqshbuild-KIND-<host>.<pid>.`` (mkdtemp
    appends a random part without dots): :func:`remove_dead_work_dirs` finds it again."""
    return f"{WORK_PREFIX}{kind}-{socket.gethostname()}.{os.getpid()}."


def remove_dead_work_dirs(directory: Path) -> list[tuple[Path, int]]:
    """Scratch trees (unpack roots, dockerd:// exports) that killed builds of this host
    left in ``directory`` (``--work-dir`` or TMPDIR). Returns (path, bytes)."""
    removed: list[tuple[Path, int]] = []
    try:
        candidates = [p for p in directory.glob(f"{WORK_PREFIX}*")
                      if p.is_dir() and not p.is_symlink()]
    except OSError:
        return removed
    euid = os.geteuid()
    for p in candidates:
        if _dead_here(p.name.rpartition(".")[0]) is not True:
            continue
        try:
            if euid != 0 and p.lstat().st_uid != euid:
                continue
            size = _tree_size(p)
            rmtree_forced(p)
            removed.append((p, size))
        except OSError:
            pass
    return removed


def _tree_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def _missing_part(path: Path) -> tuple[Path, list[str]]:
    """The deepest existing ancestor of ``path`` (resolved) and the names below it."""
    names: list[str] = []
    here = path
    while not os.path.lexists(here) and here != here.parent:
        names.insert(0, here.name)
        here = here.parent
    return safefs.resolve(here), names


@dataclass
class ImageCache:
    root: Path
    layer_root: Path
    writable: bool = True
    problem: str = ""  # why this user cannot write it: one line, with the fix
    trusted: bool = True  # its directories are safe: its trusted entries may be used
    trust: Trust = field(default_factory=Trust.current)
    noted: set[str] = field(default_factory=set)

    @classmethod
    def open(cls, root: Path | None = None, private: bool = False,
             must_write: bool = True, layer_root: Path | None = None) -> ImageCache:
        """The cache at ``root`` (default: env SQSHBUILD_CACHE or /fsx/squall/images),
        created if missing (``1777``, or ``0700`` for a ``private`` per-user cache). With
        ``must_write`` a cache this user cannot write is an error; without, the result
        says so (``writable``, ``problem``) and still serves hits, unless its directories
        are not safe (``trusted``: docs/security.md)."""
        root = Path(root) if root is not None else default_cache_dir()
        if layer_root is None:
            layer_root = Path(os.environ.get(LAYER_CACHE_ENV) or root / "layers")
        cache = cls(root.absolute(), layer_root.absolute())
        problem = cache._prepare(PRIVATE_ROOT_MODE if private else SHARED_ROOT_MODE)
        if problem:
            if must_write:
                raise SquallError(problem)
            cache.writable, cache.problem = False, problem
        return cache

    def _prepare(self, root_mode: int) -> str:
        """Check (and create what is missing of) the cache's directories, through
        descriptors that follow no link; '' when this user can write every directory a
        build writes, else the one-line reason (naming the directory and the fix)."""
        try:
            self.root = self._make_root(self.root, root_mode)
        except safefs.Unsafe as exc:
            self.trusted = False
            return (f"the image cache {self.root} is not safe to use: {exc}; it is neither "
                    "read nor written (docs/security.md): use another --cache-dir")
        except OSError as exc:
            self.trusted = False  # nothing to read from a cache that cannot be opened
            return (f"cannot create cache directory {self.root}: {exc.strerror}; pass "
                    "--cache-dir (or set SQSHBUILD_CACHE) to a writable place")
        root = self.root
        if not os.access(root, os.W_OK | os.X_OK):
            return self._not_writable(root, SHARED_ROOT_MODE)
        root_st = os.stat(root)
        mode = sub_dir_mode(root_st.st_mode)
        inside = self.layer_root == root / "layers"
        try:
            if not inside:
                self.layer_root = self._make_root(self.layer_root, root_mode)
            fd = safefs.open_dir(root)
            try:
                for name in ("index", "locks", *(("layers",) if inside else ())):
                    self._sub(fd, root / name, mode, _owner_of(root_st))
            finally:
                os.close(fd)
            fd = safefs.open_dir(self.layer_root)
            try:
                layer_st = os.fstat(fd)
                self._sub(fd, self.layer_root / "sha256", sub_dir_mode(layer_st.st_mode),
                          _owner_of(root_st) if inside else None)
            finally:
                os.close(fd)
        except _NotWritable as exc:
            return self._not_writable(exc.path, exc.mode)
        except safefs.Unsafe as exc:
            return (f"the image cache directory {exc} is not safe to write: builds go "
                    "elsewhere; an admin can remove it (docs/security.md)")
        except OSError as exc:
            return f"cannot create cache directory {exc.filename or root}: {exc.strerror}"
        return ""

    def _make_root(self, path: Path, root_mode: int) -> Path:
        """``path`` resolved, its chain checked, created when missing; Unsafe/OSError."""
        top, names = _missing_part(path)
        safefs.check_chain(top, self.trust)
        if not names:
            if not top.is_dir():
                raise safefs.Unsafe(f"{top} is not a directory")
            return top
        fd = safefs.open_dir(top)
        try:
            for i, name in enumerate(names):
                last = i + 1 == len(names)
                parent = os.fstat(fd)
                mode = 0o755
                if last:
                    mode = (0o2775 if parent.st_mode & stat.S_ISGID and root_mode != 0o700
                            else root_mode)
                nfd, _created = safefs.make_dir_at(fd, name, mode)
                os.close(fd)
                fd = nfd
                why = self.trust.why_not_dir(os.fstat(fd))
                if why:
                    raise safefs.Unsafe(f"{Path(top, *names[:i + 1])} {why}")
        finally:
            os.close(fd)
        return Path(top, *names)

    def _sub(self, parent_fd: int, d: Path, mode: int, owner: tuple[int, int] | None) -> None:
        """A directory of the cache below ``parent_fd``: made or repaired, then checked."""
        try:
            fd, _created = safefs.make_dir_at(parent_fd, d.name, mode, owner)
        except PermissionError:
            raise _NotWritable(d.parent if not os.path.lexists(d) else d, mode) from None
        except OSError as exc:
            if exc.errno == errno.EROFS:
                raise _NotWritable(d.parent if not os.path.lexists(d) else d, mode) from None
            raise
        except safefs.Unsafe as exc:
            raise safefs.Unsafe(f"{d.parent}/{exc}") from None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        why = self.trust.why_not_dir(st)
        if why:
            raise safefs.Unsafe(f"{d} {why}")
        if not os.access(d, os.W_OK | os.X_OK):
            raise _NotWritable(d, mode)

    def _not_writable(self, d: Path, mode: int) -> str:
        """Why ``d`` is not writable, and the admin's fix: ``chmod`` to the mode of the
        permission model, or ``chown`` like the root where the mode is right but the owner
        is not (a directory an older version made as root in a user's cache)."""
        if not _fs_writable(d):
            return f"the image cache {self.root} is on a read-only filesystem"
        try:
            st = d.stat()
            how = f"owner {who(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}"
            root = self.root.stat()
        except OSError as exc:
            return f"cannot use the image cache directory {d}: {exc.strerror}"
        fix = f"chmod {mode:04o} {d}"
        if d != self.root and not mode & 0o002 and st.st_uid != root.st_uid:
            fix = f"chown --reference={self.root} {d}"
        return (f"the image cache directory {d} is not writable by {who(os.geteuid())} "
                f"({how}): an admin can fix it with {fix}")

    def note(self, path: Path, why: str) -> None:
        """One line, once per path, for an entry that is not used."""
        if str(path) in self.noted:
            return
        self.noted.add(str(path))
        log.warning("note: ignoring %s: it %s (docs/security.md); an admin can remove it",
                    path, why)

    def sqsh(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.sqsh"

    def sidecar(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.json"

    def used_marker(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.used"

    def lock(self, digest: str, variant: str = "") -> SharedLock:
        return SharedLock(self.root / "locks" / f"{entry_name(digest, variant)}.lock",
                          trust=self.trust)

    def usable(self, path: Path, quiet: bool = False) -> bool:
        """``path`` is a file of this cache that may be used: safe directories, a trusted
        owner, one link, written by no one else. Anything else there gets one note."""
        if not self.trusted:
            return False
        st = safefs.lstat(path)
        if st is None:
            return False
        why = self.trust.why_not_file(st)
        if why and not quiet:
            self.note(path, why)
        return not why

    def has(self, digest: str, variant: str = "") -> bool:
        return self.usable(self.sqsh(digest, variant))

    def blocked(self, digest: str, variant: str = "") -> str:
        """Why this user cannot publish the entry here ('' when it can): its image or
        sidecar name is taken by another user's entry, which is never replaced."""
        for p in (self.sqsh(digest, variant), self.sidecar(digest, variant)):
            st = safefs.lstat(p)
            if st is not None and not (st.st_uid == os.geteuid() or
                                       (self.trust.owner(st.st_uid) and
                                        stat.S_ISREG(st.st_mode))):
                return f"{p} {self.trust.why_not_file(st) or 'is not yours'}"
        return ""

    def touch(self, digest: str, variant: str = "") -> None:
        """Record a use (gc evicts the least recently used): the ``.used`` marker is
        writable by every user, so a hit on another user's image counts too."""
        marker = self.used_marker(digest, variant)
        st = safefs.lstat(marker)
        if st is not None:
            if stat.S_ISREG(st.st_mode):
                try:
                    os.utime(marker, follow_symlinks=False)
                except OSError:
                    pass
            return
        try:
            os.close(safefs.create(marker, 0o666))
        except OSError:
            pass

    def last_use(self, digest: str, variant: str = "") -> float:
        """The newest of the entry's times; a ``.used`` marker counts only when a trusted
        owner made it, and no time counts past now (a planted future time would keep the
        entry for ever)."""
        used = self.used_marker(digest, variant)
        times = [_mtime(self.sidecar(digest, variant)), _mtime(self.sqsh(digest, variant))]
        st = safefs.lstat(used)
        if st is not None and stat.S_ISREG(st.st_mode) and self.trust.owner(st.st_uid):
            times.append(st.st_mtime)
        return min(max(times), time.time())

    def temp_path(self, digest: str, variant: str = "") -> Path:
        """A new, empty file of this process for a build's output beside the image:
        ``.building-<entry>.<host>.<pid>[~N]``, created with O_EXCL (a name someone
        planted is never opened)."""
        base = f"{TMP_PREFIX}{entry_name(digest, variant)}.{socket.gethostname()}.{os.getpid()}"
        for n in range(100):
            p = self.root / (base if n == 0 else f"{base}~{uuid.uuid4().hex[:8]}")
            try:
                os.close(safefs.create(p, 0o600))
                return p
            except FileExistsError:
                if n == 0 and safefs.unlink_own(p):
                    continue
        raise SquallError(f"cannot create a temporary file in {self.root}: too many names "
                          "taken")

    # -- reference index ------------------------------------------------------------------
    def _index_path(self, reference: str, platform: str) -> Path:
        key = hashlib.sha256(f"{reference}\0{platform}".encode()).hexdigest()
        return self.root / "index" / f"{key}.json"

    def lookup(self, reference: str, platform: str, variant: str = "") -> str | None:
        """The digest the index remembers for ``reference``, when its record is trusted
        and well formed and the image is here; anything else is absence (one note)."""
        if not self.trusted:
            return None
        path = self._index_path(reference, platform)
        data = self._read_json(path, "index record")
        if data is None:
            return None
        digest = data.get("digest")
        try:
            entry_name(digest if isinstance(digest, str) else "", variant)
        except SquallError:
            self._malformed(path, "index record", "its digest is not a sha256 digest")
            return None
        assert isinstance(digest, str)
        return digest if self.has(digest, variant) else None

    def _read_json(self, path: Path, what: str) -> dict[str, Any] | None:
        try:
            raw = safefs.read_file(path, self.trust, limit=16 << 20)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except safefs.Unsafe as exc:
            self.note(path, str(exc).removeprefix(f"{path} "))
            return None
        except OSError as exc:
            self._malformed(path, what, f"it cannot be read: {exc.strerror}")
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            self._malformed(path, what, "it is not JSON")
            return None
        if not isinstance(data, dict):
            self._malformed(path, what, "it is not a JSON object")
            return None
        return data

    def _malformed(self, path: Path, what: str, why: str) -> None:
        if str(path) not in self.noted:
            self.noted.add(str(path))
            log.warning("note: malformed %s %s (%s): treated as missing", what, path, why)

    def remember(self, reference: str, platform: str, digest: str) -> None:
        """Best effort (the index only serves offline hits): written to a new temporary
        name, made readable by all and renamed into place over nothing but this user's
        own record; never an error."""
        if not self.writable:
            return
        path = self._index_path(reference, platform)
        if not safefs.owned_by_me(path):
            return  # another user's record (trusted or not): never replaced
        record = json.dumps({"reference": reference, "platform": platform, "digest": digest,
                             "updated": time.time()})
        try:
            write_atomic(path, record, FILE_MODE, tmp=temp_name(path, TMP_PREFIX), fsync=False)
        except OSError:
            pass

    # -- publish --------------------------------------------------------------------------
    def publish(self, digest: str, built: Path, sidecar: dict[str, Any],
                variant: str = "") -> Path:
        """Move a finished image into place with its sidecar; return the final path.
        Neither replaces another user's entry (:meth:`blocked` says so first)."""
        final = self.sqsh(digest, variant)
        side = self.sidecar(digest, variant)
        blocked = self.blocked(digest, variant)
        if blocked:
            raise SquallError(f"cannot publish {final}: {blocked}; remove it (an admin) or "
                              "build with --cache-dir elsewhere")
        try:
            fd = safefs.open_read(built)
            try:
                os.fchmod(fd, FILE_MODE)
                os.fsync(fd)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            sidecar = dict(sidecar, size=size, path=str(final))
            try:
                write_atomic(side, json.dumps(sidecar, indent=2, sort_keys=True) + "\n",
                             FILE_MODE, tmp=temp_name(side, TMP_PREFIX))
            except PermissionError:
                # a trusted user's sidecar of this very entry (same digest and options) in
                # a sticky root: it describes the same image; keep it
                pass
            os.replace(built, final)
            fsync_dir(self.root)
        except (OSError, safefs.Unsafe) as exc:
            if isinstance(exc, safefs.Unsafe):
                raise SquallError(f"cannot publish {final}: {exc}") from None
            raise disk_error(exc, final, "publishing") from None
        self.touch(digest, variant)
        return final

    def read_sidecar(self, digest: str, variant: str = "") -> dict[str, Any] | None:
        if not self.trusted:
            return None
        return self._read_json(self.sidecar(digest, variant), "sidecar")

    # -- gc -------------------------------------------------------------------------------
    def entries(self) -> list[tuple[float, str, int, str]]:
        """(last use, digest, bytes, variant) for every complete entry this user trusts,
        oldest first (other users' are in :meth:`foreign`)."""
        return sorted(e for e, mine in self._scan() if mine)

    def foreign(self) -> list[tuple[float, str, int, str]]:
        """The image entries of users this one does not trust: never used or evicted."""
        return sorted(e for e, mine in self._scan() if not mine)

    def _scan(self) -> list[tuple[tuple[float, str, int, str], bool]]:
        out: list[tuple[tuple[float, str, int, str], bool]] = []
        if not self.trusted:
            return out
        for p in self.root.glob("sha256-*.sqsh"):
            name = p.stem.removeprefix("sha256-")
            hexpart, _, variant = name.partition("-")
            if len(hexpart) != 64:
                continue
            st = safefs.lstat(p)
            if st is None:
                continue
            digest = "sha256:" + hexpart
            mine = not self.trust.why_not_file(st)
            out.append(((self.last_use(digest, variant), digest, st.st_size, variant), mine))
        return out

    def gc(self, max_bytes: int, dry_run: bool = False) -> list[dict[str, Any]]:
        """Evict least recently used images until the images and layers this user trusts
        fit in max_bytes; first remove what killed builds left (temporary files, partial
        downloads). Other users' entries are never removed, nor counted."""
        removed: list[dict[str, Any]] = []
        if not dry_run:
            removed += self._remove_leftovers()
        entries = self.entries()
        layer_dir = self.layer_root / "sha256"
        layers: dict[str, int] = {}
        if layer_dir.is_dir():
            for p in layer_dir.glob("*.tar"):
                st = safefs.lstat(p)
                if st is not None and not self.trust.why_not_file(st):
                    layers[p.name] = st.st_size
        total = sum(e[2] for e in entries) + sum(layers.values())
        # Layers first: they are only a speed-up for rebuilds.
        for name, size in sorted(layers.items(), key=lambda kv: _mtime(layer_dir / kv[0])):
            if total <= max_bytes:
                break
            if not dry_run:
                try:
                    ok = (layer_dir / name).with_suffix(".ok")
                    ok_st = safefs.lstat(ok)
                    if ok_st is not None and may_remove(ok_st, self.trust):
                        ok.unlink()
                    (layer_dir / name).unlink(missing_ok=True)
                except OSError:
                    continue  # not ours to remove (a sticky directory)
            removed.append({"layer": f"sha256:{name.removesuffix('.tar')}", "size": size})
            total -= size
        for _used, digest, size, variant in entries:
            if total <= max_bytes:
                break
            lock = self.lock(digest, variant)
            if not dry_run:
                try:
                    if not lock.try_acquire():
                        continue
                except SquallError:
                    continue
                try:
                    for p in (self.sqsh(digest, variant), self.sidecar(digest, variant),
                              self.used_marker(digest, variant)):
                        st = safefs.lstat(p)
                        if st is not None and may_remove(st, self.trust):
                            p.unlink()
                except OSError:
                    continue
                finally:
                    lock.release()
            entry: dict[str, Any] = {"image": digest, "size": size}
            if variant:
                entry["variant"] = variant
            removed.append(entry)
            total -= size
        foreign = self.foreign()
        if foreign:
            log.warning("note: %d image(s) of other users (%d bytes) in %s are neither used "
                        "nor removed by %s (docs/security.md): their owners' gc or an admin "
                        "removes them", len(foreign), sum(e[2] for e in foreign), self.root,
                        who(os.geteuid()))
        return removed

    def _remove_leftovers(self) -> list[dict[str, Any]]:
        """Temporary files of dead builds in the cache, and partial layer downloads no
        build holds (their lock is free), of this user (root: of trusted owners too)."""
        gone = [*remove_dead_temps(self.root, f"{TMP_PREFIX}*"),
                *remove_dead_temps(self.root / "index", f"{TMP_PREFIX}*")]
        layer_dir = self.layer_root / "sha256"
        if layer_dir.is_dir():
            stems = {p.name.split(".")[0] for pat in ("*.partial", "*.tar.tmp", "*.tar")
                     for p in layer_dir.glob(pat)}
            for stem in sorted(stems):
                tar, ok = layer_dir / f"{stem}.tar", layer_dir / f"{stem}.ok"
                junk = [layer_dir / f"{stem}.partial", layer_dir / f"{stem}.tar.tmp"]
                if safefs.lstat(tar) is not None and not self.usable(ok, quiet=True):
                    junk.append(tar)  # a crash before the fsync: fetched again anyway
                junk = [j for j in junk if (st := safefs.lstat(j)) is not None
                        and not stat.S_ISDIR(st.st_mode) and may_remove(st, self.trust)]
                if not junk:
                    continue
                lock = SharedLock(layer_dir / f"{stem}.lock", trust=self.trust)
                try:
                    if not lock.try_acquire() and not lock.break_stale():
                        continue
                    if not lock.held and not lock.try_acquire():
                        continue
                except SquallError:
                    continue
                try:
                    for j in junk:
                        try:
                            size = j.lstat().st_size
                            j.unlink()
                            gone.append((j, size))
                        except OSError:
                            pass
                finally:
                    lock.release()
        return [{"leftover": str(p), "size": size} for p, size in gone]


class _NotWritable(Exception):
    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(str(path))
        self.path, self.mode = path, mode


def _fs_writable(d: Path) -> bool:
    try:
        return not os.statvfs(d).f_flag & os.ST_RDONLY
    except OSError:
        return True


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``500M``, ``2G``, ``1.5T``, ``1024`` (bytes); KiB-based units."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B") if text.strip() else ""
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    num = t[:-1] if unit else t
    try:
        value = float(num)
    except ValueError:
        raise SquallError(f"size {text!r} is not a number with an optional K, M, G or T suffix:"
                          " write e.g. 500G") from None
    if value < 0:
        raise SquallError(f"size {text!r} is negative: give a positive size like 500G")
    return int(value * _UNITS[unit])
