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

Permissions (docs/sqshbuild.md, "Permissions"): directories sqshbuild creates inside a
cache root get the root's mode without the sticky bit (a ``1777`` root: ``0777``; a
``2775`` root: ``2775``), set explicitly whatever the umask, and, when sqshbuild runs as
root, the root's owner and group; every file it publishes is ``0644``. A cache this user
cannot write (a read-only one, or one made by an older version as root) still serves
hits; :meth:`ImageCache.open` says why it is not writable, and the build goes to the
per-user cache (:func:`user_cache_dir`).

Publishing writes ``.building-sha256-<hex>.<host>.<pid>`` beside the target, fsyncs it,
renames the sidecar then the image into place and fsyncs the directory, so a reader sees
either no image or a complete one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pwd
import shutil
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild.lock import SharedLock, pid_alive

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
    root's permission and setgid bits, never sticky (another user must be able to take over
    a dead build's lock or partial download), always usable by its owner."""
    return (stat.S_IMODE(root_mode) & ~stat.S_ISVTX & ~stat.S_ISUID) | 0o700


def _who(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def make_dir(path: Path, mode: int, like: Path | None = None) -> None:
    """``mkdir`` with exactly ``mode`` (the umask does not apply); as root, owned like
    ``like`` (the cache root), so an admin's run leaves directories its users can use.
    An existing directory of ours with another mode is set to ``mode``."""
    created = False
    try:
        path.mkdir(mode=0o700)
        created = True
    except FileExistsError:
        pass
    st = path.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    euid = os.geteuid()
    if created or euid in (0, st.st_uid):
        if euid == 0 and like is not None:
            owner = like.stat()
            if (owner.st_uid, owner.st_gid) != (st.st_uid, st.st_gid):
                os.chown(path, owner.st_uid, owner.st_gid)
        if stat.S_IMODE(os.stat(path).st_mode) != mode:
            os.chmod(path, mode)  # after chown, which clears setgid


def make_shared_dir(path: Path, like: Path) -> None:
    """mkdir -p ``path`` inside the cache root ``like`` with :func:`sub_dir_mode` of the
    root's mode (see the module docstring); a clear error when it cannot be made."""
    try:
        if path.is_dir() and os.access(path, os.W_OK | os.X_OK):
            return
        mode = sub_dir_mode(like.stat().st_mode) if like.is_dir() else 0o755
        for d in reversed([path, *path.parents]):
            if d.is_dir() and d != path:
                continue
            make_dir(d, mode, like if like.is_dir() else None)
    except OSError as exc:
        raise SquallError(f"cannot create cache directory {path}: {exc.strerror}; pass "
                          "--cache-dir (or set SQSHBUILD_CACHE) to a writable place") from None


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
    """For a name ending ``<host>.<pid>``: True when the host is this one and the process
    is gone, False when it lives, None when the name is another host's or has no owner."""
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
    """Remove the files matching ``pattern`` in ``directory`` that dead builds left;
    what this user may not remove is left to its owner or gc. Returns (path, bytes)."""
    removed: list[tuple[Path, int]] = []
    try:
        candidates = list(directory.glob(pattern))
    except OSError:
        return removed
    for p in candidates:
        if not is_dead_temp(p):
            continue
        try:
            size = p.lstat().st_size
            if p.is_dir() and not p.is_symlink():
                rmtree_forced(p)
            else:
                p.unlink()
            removed.append((p, size))
        except OSError:
            pass
    return removed


def rmtree_forced(path: Path) -> None:
    """rmtree that also removes what a build made read-only (``chmod u+w`` first)."""
    def onerror(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=onerror)
    if path.exists():
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
        candidates = [p for p in directory.glob(f"{WORK_PREFIX}*") if p.is_dir()]
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


@dataclass
class ImageCache:
    root: Path
    layer_root: Path
    writable: bool = True
    problem: str = ""  # why this user cannot write it: one line, with the fix

    @classmethod
    def open(cls, root: Path | None = None, private: bool = False,
             must_write: bool = True, layer_root: Path | None = None) -> ImageCache:
        """The cache at ``root`` (default: env SQSHBUILD_CACHE or /fsx/squall/images),
        created if missing (``1777``, or ``0700`` for a ``private`` per-user cache). With
        ``must_write`` a cache this user cannot write is an error; without, the result
        says so (``writable``, ``problem``) and still serves hits."""
        root = Path(root) if root is not None else default_cache_dir()
        if layer_root is None:
            layer_root = Path(os.environ.get(LAYER_CACHE_ENV) or root / "layers")
        cache = cls(root.absolute(), layer_root.absolute())
        problem = cache._prepare(PRIVATE_ROOT_MODE if private else SHARED_ROOT_MODE)
        if problem:
            if must_write:
                raise SquallError(problem)
            cache.writable, cache.problem = False, problem
        if cache.root.is_dir():
            cache.root = cache.root.resolve()
        return cache

    def _prepare(self, root_mode: int) -> str:
        """Create what is missing; '' when this user can write every directory a build
        writes, else the one-line reason (naming the directory and the fix)."""
        root = self.root
        try:
            if not root.is_dir():
                for d in reversed([*root.parents]):
                    if not d.is_dir():
                        make_dir(d, 0o755)
                parent = root.parent.stat()
                make_dir(root, (0o2775 if parent.st_mode & stat.S_ISGID and root_mode != 0o700
                                else root_mode))
        except OSError as exc:
            return (f"cannot create cache directory {root}: {exc.strerror}; pass --cache-dir "
                    "(or set SQSHBUILD_CACHE) to a writable place")
        if not os.access(root, os.W_OK | os.X_OK):
            return self._not_writable(root, SHARED_ROOT_MODE)
        mode = sub_dir_mode(root.stat().st_mode)
        dirs = [root / "index", root / "locks"]
        layer_sub = [self.layer_root, self.layer_root / "sha256"]
        for d in [*dirs, *layer_sub]:
            like = root if d in dirs or self.layer_root == root / "layers" else None
            try:
                if not d.is_dir() or (os.geteuid() in (0, d.stat().st_uid)
                                      and _differs(d, mode, like)):
                    if like is None:
                        make_shared_dir(d, d.parent)
                    else:
                        make_dir(d, mode, like)
            except (OSError, SquallError) as exc:
                if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM,
                                                              errno.EROFS):
                    return self._not_writable(d.parent if not d.exists() else d, mode)
                return f"cannot create cache directory {d}: {getattr(exc, 'strerror', exc)}"
            if not os.access(d, os.W_OK | os.X_OK):
                return self._not_writable(d, mode)
        return ""

    def _not_writable(self, d: Path, mode: int) -> str:
        """Why ``d`` is not writable, and the admin's fix: ``chmod`` to the mode of the
        permission model, or ``chown`` like the root where the mode is right but the owner
        is not (a directory an older version made as root in a user's cache)."""
        if not _fs_writable(d):
            return f"the image cache {self.root} is on a read-only filesystem"
        try:
            st = d.stat()
            how = f"owner {_who(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}"
            root = self.root.stat()
        except OSError as exc:
            return f"cannot use the image cache directory {d}: {exc.strerror}"
        fix = f"chmod {mode:04o} {d}"
        if d != self.root and not mode & 0o002 and st.st_uid != root.st_uid:
            fix = f"chown --reference={self.root} {d}"
        return (f"the image cache directory {d} is not writable by {_who(os.geteuid())} "
                f"({how}): an admin can fix it with {fix}")

    def sqsh(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.sqsh"

    def sidecar(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.json"

    def used_marker(self, digest: str, variant: str = "") -> Path:
        return self.root / f"{entry_name(digest, variant)}.used"

    def lock(self, digest: str, variant: str = "") -> SharedLock:
        return SharedLock(self.root / "locks" / f"{entry_name(digest, variant)}.lock")

    def has(self, digest: str, variant: str = "") -> bool:
        return self.sqsh(digest, variant).is_file()

    def touch(self, digest: str, variant: str = "") -> None:
        """Record a use (gc evicts the least recently used): the ``.used`` marker is
        writable by every user, so a hit on another user's image counts too."""
        marker = self.used_marker(digest, variant)
        try:
            os.utime(marker)
            return
        except FileNotFoundError:
            pass
        except OSError:
            return
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o666)
            try:
                os.fchmod(fd, 0o666)
            finally:
                os.close(fd)
        except OSError:
            pass

    def last_use(self, digest: str, variant: str = "") -> float:
        return max(_mtime(self.used_marker(digest, variant)),
                   _mtime(self.sidecar(digest, variant)), _mtime(self.sqsh(digest, variant)))

    def temp_path(self, digest: str, variant: str = "") -> Path:
        return self.root / (f"{TMP_PREFIX}{entry_name(digest, variant)}."
                            f"{socket.gethostname()}.{os.getpid()}")

    # -- reference index ------------------------------------------------------------------
    def _index_path(self, reference: str, platform: str) -> Path:
        key = hashlib.sha256(f"{reference}\0{platform}".encode()).hexdigest()
        return self.root / "index" / f"{key}.json"

    def lookup(self, reference: str, platform: str, variant: str = "") -> str | None:
        try:
            data = json.loads(self._index_path(reference, platform).read_text())
        except (OSError, ValueError):
            return None
        digest = data.get("digest") if isinstance(data, dict) else None
        return digest if isinstance(digest, str) and self.has(digest, variant) else None

    def remember(self, reference: str, platform: str, digest: str) -> None:
        """Best effort (the index only serves offline hits): written to a temporary name,
        made readable by all and renamed into place; never an error."""
        if not self.writable:
            return
        path = self._index_path(reference, platform)
        tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{socket.gethostname()}.{os.getpid()}")
        try:
            with open(tmp, "w") as f:
                os.fchmod(f.fileno(), FILE_MODE)
                json.dump({"reference": reference, "platform": platform, "digest": digest,
                           "updated": time.time()}, f)
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    # -- publish --------------------------------------------------------------------------
    def publish(self, digest: str, built: Path, sidecar: dict[str, Any],
                variant: str = "") -> Path:
        """Move a finished image into place with its sidecar; return the final path."""
        final = self.sqsh(digest, variant)
        side = self.sidecar(digest, variant)
        side_tmp = side.with_name(f"{TMP_PREFIX}{side.name}.{socket.gethostname()}."
                                  f"{os.getpid()}")
        try:
            os.chmod(built, FILE_MODE)
            fsync_file(built)
            sidecar = dict(sidecar, size=built.stat().st_size, path=str(final))
            with open(side_tmp, "w") as f:
                os.fchmod(f.fileno(), FILE_MODE)
                json.dump(sidecar, f, indent=2, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.replace(side_tmp, side)
            except PermissionError:
                # another user's sidecar of this very entry (same digest and options) in a
                # sticky root: it describes the same image; keep it
                side_tmp.unlink(missing_ok=True)
            os.replace(built, final)
            fsync_dir(self.root)
        except OSError as exc:
            side_tmp.unlink(missing_ok=True)
            raise disk_error(exc, final, "publishing") from None
        self.touch(digest, variant)
        return final

    def read_sidecar(self, digest: str, variant: str = "") -> dict[str, Any] | None:
        try:
            data = json.loads(self.sidecar(digest, variant).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    # -- gc -------------------------------------------------------------------------------
    def entries(self) -> list[tuple[float, str, int, str]]:
        """(last use, digest, bytes, variant) for every complete entry, oldest first."""
        out = []
        for p in self.root.glob("sha256-*.sqsh"):
            name = p.stem.removeprefix("sha256-")
            hexpart, _, variant = name.partition("-")
            if len(hexpart) != 64:
                continue
            digest = "sha256:" + hexpart
            try:
                size = p.stat().st_size
            except FileNotFoundError:
                continue
            out.append((self.last_use(digest, variant), digest, size, variant))
        return sorted(out)

    def gc(self, max_bytes: int, dry_run: bool = False) -> list[dict[str, Any]]:
        """Evict least recently used images until the images and layers fit in max_bytes;
        first remove what killed builds left (temporary files, partial downloads)."""
        removed: list[dict[str, Any]] = []
        if not dry_run:
            removed += self._remove_leftovers()
        entries = self.entries()
        layer_dir = self.layer_root / "sha256"
        layers = {p.name: p.stat().st_size for p in layer_dir.glob("*.tar")
                  if p.is_file()} if layer_dir.is_dir() else {}
        total = sum(e[2] for e in entries) + sum(layers.values())
        # Layers first: they are only a speed-up for rebuilds.
        for name, size in sorted(layers.items(), key=lambda kv: _mtime(layer_dir / kv[0])):
            if total <= max_bytes:
                break
            if not dry_run:
                try:
                    (layer_dir / name).with_suffix(".ok").unlink(missing_ok=True)
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
                    self.sqsh(digest, variant).unlink(missing_ok=True)
                    self.sidecar(digest, variant).unlink(missing_ok=True)
                    self.used_marker(digest, variant).unlink(missing_ok=True)
                except OSError:
                    continue
                finally:
                    lock.release()
            entry: dict[str, Any] = {"image": digest, "size": size}
            if variant:
                entry["variant"] = variant
            removed.append(entry)
            total -= size
        return removed

    def _remove_leftovers(self) -> list[dict[str, Any]]:
        """Temporary files of dead builds in the cache, and partial layer downloads no
        build holds (their lock is free)."""
        gone = [*remove_dead_temps(self.root, f"{TMP_PREFIX}*"),
                *remove_dead_temps(self.root / "index", f"{TMP_PREFIX}*")]
        layer_dir = self.layer_root / "sha256"
        if layer_dir.is_dir():
            stems = {p.name.split(".")[0] for pat in ("*.partial", "*.tar.tmp", "*.tar")
                     for p in layer_dir.glob(pat)}
            for stem in sorted(stems):
                tar, ok = layer_dir / f"{stem}.tar", layer_dir / f"{stem}.ok"
                junk = [layer_dir / f"{stem}.partial", layer_dir / f"{stem}.tar.tmp"]
                if tar.exists() and not ok.exists():
                    junk.append(tar)  # a crash before the fsync: fetched again anyway
                junk = [j for j in junk if j.exists()]
                if not junk:
                    continue
                lock = SharedLock(layer_dir / f"{stem}.lock")
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


def _differs(d: Path, mode: int, like: Path | None) -> bool:
    """``d`` lacks the model's mode, or (for root, who can fix it) the root's owner."""
    st = d.stat()
    if stat.S_IMODE(st.st_mode) != mode:
        return True
    if os.geteuid() == 0 and like is not None:
        owner = like.stat()
        return (owner.st_uid, owner.st_gid) != (st.st_uid, st.st_gid)
    return False


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
