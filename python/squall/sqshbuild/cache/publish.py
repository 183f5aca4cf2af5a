"""Putting a finished image into a cache: its sidecar, then the image, renamed into place
and made durable, so that a reader sees either no image or a complete one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild import safefs
from squall.sqshbuild.cache.image_cache import ImageCache, write_json
from squall.sqshbuild.cache.layout import FILE_MODE, disk_error, fsync_dir


def publish(cache: ImageCache, digest: str, built: Path, sidecar: dict[str, Any],
            variant: str = "") -> Path:
    """Move ``built`` (a temporary file of this cache) into place with its sidecar;
    return the final path. Only the cache's writers get here: nobody else can have made
    a name in it."""
    final = cache.sqsh(digest, variant)
    try:
        fd = safefs.open_read(built)
        try:
            os.fchmod(fd, FILE_MODE)
            os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        write_json(cache, cache.sidecar(digest, variant), dict(sidecar, size=size,
                                                               path=str(final)), fsync=True)
        os.replace(built, final)
        fsync_dir(cache.root)
    except safefs.Unsafe as exc:
        raise SquallError(f"cannot publish {final}: {exc}") from None
    except OSError as exc:
        raise disk_error(exc, final, "publishing") from None
    cache.touch(digest, variant)
    return final
