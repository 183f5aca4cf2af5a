"""The reference index: ``index/<sha256 of reference and platform>.json`` -> manifest
digest, so that a cached image is found without the registry (offline hits)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from squall.errors import SquallError
from squall.sqshbuild.cache.image_cache import ImageCache, write_json
from squall.sqshbuild.cache.layout import entry_name


def index_path(cache: ImageCache, reference: str, platform: str) -> Path:
    key = hashlib.sha256(f"{reference}\0{platform}".encode()).hexdigest()
    return cache.root / "index" / f"{key}.json"


def lookup(cache: ImageCache, reference: str, platform: str, variant: str = "") -> str | None:
    """The digest the index remembers for ``reference``, when its record is trusted and
    well formed and the image is here; anything else is absence (one note)."""
    path = index_path(cache, reference, platform)
    data = cache.read_json(path, "index record")
    if data is None:
        return None
    digest = data.get("digest")
    try:
        entry_name(digest if isinstance(digest, str) else "", variant)
    except SquallError:
        cache.malformed(path, "index record", "its digest is not a sha256 digest")
        return None
    assert isinstance(digest, str)
    return digest if cache.has(digest, variant) else None


def remember(cache: ImageCache, reference: str, platform: str, digest: str) -> None:
    """Best effort (the index only serves offline hits): never an error."""
    if not cache.writable:
        return
    record = {"reference": reference, "platform": platform, "digest": digest,
              "updated": time.time()}
    try:
        write_json(cache, index_path(cache, reference, platform), record, fsync=False)
    except OSError:
        pass
