"""The site's bounds on what one build adds to a cache (site.py): an image's size by its
manifest before anything is downloaded, the user's share after the builder published for
her (deputy.py), and the shared cache's size, kept by evicting the least recently used
images once a build has added one."""

from __future__ import annotations

from pathlib import Path

from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import site
from squall.sqshbuild.cache import gc as cache_gc
from squall.sqshbuild.cache.image_cache import ImageCache
from squall.sqshbuild.deputy import Deputy
from squall.sqshbuild.layers import LayerCache
from squall.sqshbuild.refs import Source
from squall.sqshbuild.registry import Descriptor, Manifest
from squall.sqshbuild.transport import human

MAX_IMAGE_ENV = "SQSHBUILD_MAX_IMAGE_SIZE"


def check_image_size(manifest: Manifest, src: Source) -> None:
    """Refuse, before a byte of a layer is fetched, an image whose layers add up to more
    than the site allows (the layers' own bounds still hold while they arrive)."""
    total = sum(max(d.size, 0) for d in manifest.layers)
    most, setting = site.load().limit("max_image_size", MAX_IMAGE_ENV)
    if total > most:
        raise SquallError(f"{src.canonical} is {human(total)} in {len(manifest.layers)} "
                          f"layers by its manifest, more than the {human(most)} allowed by "
                          f"{setting}: raise {setting} if the image is real")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def after_publish(cache: ImageCache, image: Path, new_layers: list[Descriptor],
                  layers: LayerCache, digest: str, deputy: Deputy | None) -> None:
    """Count what this build added against its user, then keep the shared cache under the
    site's size (never an error: the image is published)."""
    if deputy is not None:
        added = _size(image) + sum(_size(layers.path(d.digest)) for d in new_layers)
        deputy.charge(cache, added, digest)
    most, _ = site.load().limit("cache_size")
    if most <= 0 or not cache.writable or not cache.shared:
        return
    try:  # the newest image, which this build returns, is never the one evicted
        gone = cache_gc.gc(cache, max(most, _size(image) + 1))
    except (SquallError, OSError) as exc:
        log.warning("note: the shared cache could not be kept under %s: %s", human(most), exc)
        return
    if gone:
        log.info("evicted %d entries to keep the shared cache under %s", len(gone), human(most))
