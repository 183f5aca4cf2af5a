"""An image's build lock: taken, or the image published meanwhile by the build waited
for, or that build's failure raised as this one's (:mod:`.cache.failures`). While it
waits, a build holding its job's pin lock relays the pull it waits for into that lock, so
the job's other nodes waiting for the pin see how far it is (:mod:`.progress`)."""

from __future__ import annotations

from squall.sqshbuild.cache.failures import BuildFailures
from squall.sqshbuild.cache.image_cache import ImageCache
from squall.sqshbuild.lock import SharedLock
from squall.sqshbuild.options import BuildOptions
from squall.sqshbuild.refs import Source


def take_build_lock(cache: ImageCache, src: Source, digest: str, opts: BuildOptions,
                    mirror: SharedLock | None = None
                    ) -> tuple[SharedLock | None, BuildFailures]:
    """The image's build lock, or None when another build published the image meanwhile;
    the failure of the build this one waited for is raised as this one's. ``mirror``: the
    job's pin lock this build holds while it waits, which then says how far the pull it
    waits for is (``by``: whose), for the job's other nodes waiting for the pin."""
    variant = opts.squash.variant()
    failures = BuildFailures(cache, digest, variant)
    lock = cache.lock(digest, variant)
    rep = opts.reporter

    def relay(owner: dict[str, object] | None) -> None:
        if mirror is not None and owner and "pulled" in owner:
            seen = {k: v for k, v in owner.items() if k not in ("host", "pid", "since")}
            seen.update(by=owner.get("host"), by_pid=owner.get("pid"))
            mirror.status = lambda: seen
        if rep.progress_every:
            rep.waiting_progress(owner)

    relaying = mirror is not None or rep.progress_every > 0
    if lock.acquire(done=lambda: cache.has(digest, variant) or failures.new() is not None,
                    on_wait=rep.waiting, progress=relay if relaying else None,
                    every=rep.progress_every or 1.0):
        return lock, failures
    if cache.has(digest, variant):
        return None, failures
    record = failures.new()
    raise failures.error(src.canonical, record or {})
