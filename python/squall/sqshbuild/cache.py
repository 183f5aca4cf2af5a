"""The shared image cache: ``<cache>/sha256-<hex>.sqsh`` + sidecar, a reference index, gc.

Layout (default ``/fsx/squall/images``, env ``SQSHBUILD_CACHE``)::

    sha256-<hex>.sqsh          the image; its presence is what "complete" means
    sha256-<hex>.json          sidecar: reference, digests, size, created, versions
    index/<sha256 of ref>.json reference (+ platform) -> manifest digest, for offline hits
    locks/sha256-<hex>.lock    the build lock (see lock.py)
    layers/sha256/<hex>.tar    the layer cache, uncompressed (env SQSHBUILD_LAYER_CACHE)
    .building-*                temporary files; never end in .sqsh

Publishing writes ``.building-sha256-<hex>.<host>.<pid>`` beside the target, fsyncs it,
renames the sidecar then the image into place and fsyncs the directory, so a reader sees
either no image or a complete one. The sidecar's mtime is the entry's last use (touched on
every hit) and drives ``gc``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild.lock import SharedLock

DEFAULT_CACHE = "/fsx/squall/images"
CACHE_ENV = "SQSHBUILD_CACHE"
LAYER_CACHE_ENV = "SQSHBUILD_LAYER_CACHE"
TMP_PREFIX = ".building-"


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def entry_name(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64:
        raise SquallError(f"malformed digest {digest!r}")
    return f"sha256-{hexpart}"


def make_shared_dir(path: Path, like: Path) -> None:
    """mkdir -p, giving new subdirectories the permissions of the cache root: a root made
    group-writable (``chmod 2775``) for all the job users stays usable by all of them."""
    try:
        if path.is_dir():
            return
        path.mkdir(parents=True, exist_ok=True)
        if path != like and like.is_dir():
            mode = stat.S_IMODE(like.stat().st_mode)
            if mode & 0o022:
                os.chmod(path, mode)
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


@dataclass
class ImageCache:
    root: Path
    layer_root: Path

    @classmethod
    def open(cls, root: Path | None = None) -> ImageCache:
        root = Path(root) if root is not None else default_cache_dir()
        layer_root = Path(os.environ.get(LAYER_CACHE_ENV) or root / "layers")
        for d in (root, root / "index", root / "locks"):
            make_shared_dir(d, root)
        return cls(root.resolve(), layer_root)

    def sqsh(self, digest: str) -> Path:
        return self.root / f"{entry_name(digest)}.sqsh"

    def sidecar(self, digest: str) -> Path:
        return self.root / f"{entry_name(digest)}.json"

    def lock(self, digest: str) -> SharedLock:
        return SharedLock(self.root / "locks" / f"{entry_name(digest)}.lock")

    def has(self, digest: str) -> bool:
        return self.sqsh(digest).is_file()

    def touch(self, digest: str) -> None:
        try:
            os.utime(self.sidecar(digest))
        except OSError:
            pass

    def temp_path(self, digest: str) -> Path:
        return self.root / f"{TMP_PREFIX}{entry_name(digest)}.{socket.gethostname()}.{os.getpid()}"

    # -- reference index ------------------------------------------------------------------
    def _index_path(self, reference: str, platform: str) -> Path:
        key = hashlib.sha256(f"{reference}\0{platform}".encode()).hexdigest()
        return self.root / "index" / f"{key}.json"

    def lookup(self, reference: str, platform: str) -> str | None:
        try:
            data = json.loads(self._index_path(reference, platform).read_text())
        except (OSError, ValueError):
            return None
        digest = data.get("digest")
        return digest if isinstance(digest, str) and self.has(digest) else None

    def remember(self, reference: str, platform: str, digest: str) -> None:
        path = self._index_path(reference, platform)
        tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"reference": reference, "platform": platform,
                                   "digest": digest, "updated": time.time()}))
        os.replace(tmp, path)

    # -- publish --------------------------------------------------------------------------
    def publish(self, digest: str, built: Path, sidecar: dict[str, Any]) -> Path:
        """Move a finished image into place with its sidecar; return the final path."""
        final = self.sqsh(digest)
        side = self.sidecar(digest)
        side_tmp = side.with_name(f"{TMP_PREFIX}{side.name}.{os.getpid()}")
        try:
            os.chmod(built, 0o644)
            fsync_file(built)
            sidecar = dict(sidecar, size=built.stat().st_size, path=str(final))
            with open(side_tmp, "w") as f:
                json.dump(sidecar, f, indent=2, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.chmod(side_tmp, 0o644)
            os.replace(side_tmp, side)
            os.replace(built, final)
            fsync_dir(self.root)
        except OSError as exc:
            side_tmp.unlink(missing_ok=True)
            raise SquallError(f"cannot publish {final}: {exc.strerror}; check free space and "
                              "permissions of the cache directory") from None
        return final

    def read_sidecar(self, digest: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.sidecar(digest).read_text())
        except (OSError, ValueError):
            return None

    # -- gc -------------------------------------------------------------------------------
    def entries(self) -> list[tuple[float, str, int]]:
        """(last use, digest, bytes) for every complete entry, oldest first."""
        out = []
        for p in self.root.glob("sha256-*.sqsh"):
            digest = "sha256:" + p.stem.removeprefix("sha256-")
            side = self.sidecar(digest)
            try:
                size = p.stat().st_size
                used = side.stat().st_mtime if side.exists() else p.stat().st_mtime
            except FileNotFoundError:
                continue
            out.append((used, digest, size))
        return sorted(out)

    def gc(self, max_bytes: int, dry_run: bool = False) -> list[dict[str, Any]]:
        """Evict least recently used images until the images and layers fit in max_bytes."""
        removed: list[dict[str, Any]] = []
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
                (layer_dir / name).with_suffix(".ok").unlink(missing_ok=True)
                (layer_dir / name).unlink(missing_ok=True)
            removed.append({"layer": f"sha256:{name.removesuffix('.tar')}", "size": size})
            total -= size
        for _used, digest, size in entries:
            if total <= max_bytes:
                break
            lock = self.lock(digest)
            if not dry_run:
                if not lock.try_acquire():
                    continue
                try:
                    self.sqsh(digest).unlink(missing_ok=True)
                    self.sidecar(digest).unlink(missing_ok=True)
                finally:
                    lock.release()
            removed.append({"image": digest, "size": size})
            total -= size
        if not dry_run:
            self._remove_old_temps()
        return removed

    def _remove_old_temps(self, older_than: float = 24 * 3600) -> None:
        now = time.time()
        for p in self.root.glob(f"{TMP_PREFIX}*"):
            try:
                if now - p.stat().st_mtime > older_than:
                    p.unlink()
            except OSError:
                pass


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
