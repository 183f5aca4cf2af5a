"""gc: evict the least recently used images (layers first) until a cache fits, after
removing what killed builds left. It runs on one cache this process writes: root and the
builder on the shared cache, a user on the user's own; it never removes an entry whose
owner the cache does not trust (there is none in a sound cache: one note says so)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild import safefs
from squall.sqshbuild.cache import pins
from squall.sqshbuild.cache.image_cache import ImageCache
from squall.sqshbuild.cache.layout import TMP_PREFIX
from squall.sqshbuild.cache.leftovers import remove_dead_temps
from squall.sqshbuild.lock import SharedLock
from squall.sqshbuild.trust import may_remove

Entry = tuple[float, str, int, str]  # (last use, digest, bytes, variant)


def entries(cache: ImageCache) -> list[Entry]:
    """Every complete, trusted entry, oldest first."""
    out: list[Entry] = []
    for p in cache.root.glob("sha256-*.sqsh"):
        hexpart, _, variant = p.stem.removeprefix("sha256-").partition("-")
        st = safefs.lstat(p)
        if len(hexpart) != 64 or st is None:
            continue
        if cache.trust.why_not_file(st):
            cache.note(p, cache.trust.why_not_file(st))
            continue
        digest = "sha256:" + hexpart
        out.append((cache.last_use(digest, variant), digest, st.st_size, variant))
    return sorted(out)


def _layers(cache: ImageCache) -> dict[Path, int]:
    found: dict[Path, int] = {}
    for p in (cache.layer_root / "sha256").glob("*.tar"):
        st = safefs.lstat(p)
        if st is not None and not cache.trust.why_not_file(st):
            found[p] = st.st_size
    return found


def _unlink(cache: ImageCache, *paths: Path) -> None:
    for p in paths:
        st = safefs.lstat(p)
        if st is not None and may_remove(st, cache.trust):
            try:
                p.unlink()
            except OSError:
                pass


def _evict_image(cache: ImageCache, digest: str, variant: str) -> bool:
    """Remove one image under its lock; False when a build holds it."""
    lock = cache.lock(digest, variant)
    try:
        if not lock.try_acquire() and not lock.break_stale():
            return False
        if not lock.held and not lock.try_acquire():
            return False
    except SquallError:  # a lock we cannot judge keeps the image
        return False
    try:
        _unlink(cache, cache.sqsh(digest, variant), cache.sidecar(digest, variant),
                cache.used_marker(digest, variant))
    finally:
        lock.release()
    return True


def gc(cache: ImageCache, max_bytes: int, dry_run: bool = False) -> list[dict[str, Any]]:
    removed: list[dict[str, Any]] = []
    if not dry_run:
        removed += remove_leftovers(cache)
    images = entries(cache)
    layers = _layers(cache)
    total = sum(e[2] for e in images) + sum(layers.values())
    for path, size in sorted(layers.items(), key=lambda kv: _mtime(kv[0])):
        if total <= max_bytes:
            break  # layers first: they only speed up rebuilds
        if not dry_run:
            _unlink(cache, path.with_suffix(".ok"), path)
        removed.append({"layer": f"sha256:{path.stem}", "size": size})
        total -= size
    for _used, digest, size, variant in images:
        if total <= max_bytes:
            break
        if not dry_run and not _evict_image(cache, digest, variant):
            continue
        entry: dict[str, Any] = {"image": digest, "size": size}
        if variant:
            entry["variant"] = variant
        removed.append(entry)
        total -= size
    return removed


def remove_leftovers(cache: ImageCache) -> list[dict[str, Any]]:
    """Temporary files of dead builds in the cache, partial layer downloads no build
    holds (their lock is free) or a dead build made without the lock, and job pins past
    their age (pins.MAX_AGE)."""
    gone = [*remove_dead_temps(cache.root, f"{TMP_PREFIX}*", cache.trust),
            *remove_dead_temps(cache.root / "index", f"{TMP_PREFIX}*", cache.trust),
            *remove_dead_temps(cache.root / "pins", f"{TMP_PREFIX}*", cache.trust)]
    for pin in pins.expired(cache):
        st = safefs.lstat(pin)
        if st is not None and may_remove(st, cache.trust):
            try:
                pin.unlink()
                gone.append((pin, st.st_size))
            except OSError:
                pass
    layer_dir = cache.layer_root / "sha256"
    # a killed build's copy of a layer pulled around another's lock (layers.py)
    gone += remove_dead_temps(layer_dir, "*.own-*", cache.trust)
    stems = {p.name.split(".")[0] for pat in ("*.partial", "*.tar.tmp", "*.tar")
             for p in layer_dir.glob(pat)}
    for stem in sorted(stems):
        gone += _layer_leftovers(cache, layer_dir, stem)
    return [{"leftover": str(p), "size": size} for p, size in gone]


def _layer_leftovers(cache: ImageCache, layer_dir: Path, stem: str) -> list[tuple[Path, int]]:
    tar, ok = layer_dir / f"{stem}.tar", layer_dir / f"{stem}.ok"
    junk = [layer_dir / f"{stem}.partial", layer_dir / f"{stem}.tar.tmp"]
    if safefs.lstat(tar) is not None and not cache.usable(ok, quiet=True):
        junk.append(tar)  # a crash before the fsync: fetched again anyway
    junk = [j for j in junk if (st := safefs.lstat(j)) is not None
            and not os.path.isdir(j) and may_remove(st, cache.trust)]
    if not junk:
        return []
    lock = SharedLock(layer_dir / f"{stem}.lock", trust=cache.trust)
    try:
        if not lock.try_acquire() and not lock.break_stale():
            return []
        if not lock.held and not lock.try_acquire():
            return []
    except SquallError:  # a lock we cannot judge keeps the download
        return []
    gone: list[tuple[Path, int]] = []
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
    return gone


def _mtime(p: Path) -> float:
    try:
        return p.lstat().st_mtime
    except OSError:
        return 0.0

