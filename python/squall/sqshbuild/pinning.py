"""A tag resolved once per job (``sqshbuild build --job``): the job's first build to get
here asks the registry and pins the digest (:mod:`.cache.pins`, the records), the others
wait for the pin and never ask the registry."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from squall.errors import SquallError
from squall.sqshbuild import policy
from squall.sqshbuild.buildlock import take_build_lock
from squall.sqshbuild.cache.pins import JobPin
from squall.sqshbuild.caches import Caches, hit, offline_hit, offline_ok
from squall.sqshbuild.lock import SharedLock
from squall.sqshbuild.options import BuildOptions, BuildResult
from squall.sqshbuild.refs import Source
from squall.sqshbuild.registry import Manifest, RegistryClient


@dataclass
class Pinned:
    """A job's pinned digest not in any cache yet: with the manifest and the build lock
    when this process resolved the tag (it took the lock before it wrote the pin, so the
    job's other nodes wait for its build), else only the digest."""

    digest: str
    manifest: Manifest | None = None
    lock: SharedLock | None = None


def resolve_pinned(src: Source, client: RegistryClient, caches: Caches, platform: str,
                   arch: str, opts: BuildOptions) -> BuildResult | Pinned:
    """The digest the job pinned for this tag; the first of the job's builds to get here
    resolves the tag (the job's one registry request) and pins it, the others wait for
    the pin and never ask the registry."""
    pin = JobPin(opts.job, src.canonical, platform)
    # each cache once (root's write cache is also its read cache): every waiting node
    # reads these on every poll
    caches_all = list({c.root: c for c in (*caches.read, caches.write)}.values())
    digest = pin.read(caches_all)
    if digest is None:
        cache = caches.write
        lock = pin.lock(cache)
        rep = opts.reporter
        got = lock.acquire(done=lambda: pin.read(caches_all) is not None,
                           on_wait=lambda o: rep.stage(
                               f"waiting for {(o or {}).get('host', 'another node')} to "
                               f"resolve {src.canonical} for job {opts.job}"),
                           progress=rep.waiting_progress if rep.progress_every else None,
                           every=rep.progress_every)
        try:
            digest = pin.read(caches_all)
            if got and digest is None:
                return _pin_now(pin, src, client, caches, platform, arch, opts, lock)
        finally:
            lock.release()
        if digest is None:  # the holder failed: its error was its own; this one resolves
            return resolve_pinned(src, client, caches, platform, arch, opts)
    found = caches.find(digest, opts.squash.variant())
    if found is not None:  # a later step of the job: the policy in force, checked again
        return hit(found, src, digest, platform, opts, client)
    return Pinned(digest)


def _pin_now(pin: JobPin, src: Source, client: RegistryClient, caches: Caches,
             platform: str, arch: str, opts: BuildOptions,
             pin_lock: SharedLock | None = None) -> BuildResult | Pinned:
    """Under the pin's lock: resolve the tag, take the image's build lock when it is not
    cached, then write the pin, so that the job's other nodes wait for this build."""
    variant = opts.squash.variant()
    opts.reporter.stage(f"resolving {src.canonical} for {platform} (job {pin.job})")
    try:
        manifest = client.resolve(src.tag, arch)
    except SquallError as exc:
        known = caches.lookup(src.canonical, platform, variant)
        where = caches.find(known, variant) if known else None
        if not (known and where and offline_ok(src, exc, opts)):
            raise
        pin.write(caches.write, known, socket.gethostname())
        result = offline_hit(where, src, known, platform, opts, exc, client)
        result.pinned = True
        return result
    digest = manifest.digest
    policy.check_image(src, client, digest)  # a refused image is never pinned
    found = caches.find(digest, variant)
    held: SharedLock | None = None
    if found is None:
        cache = caches.building(opts.reporter)
        held, _failures = take_build_lock(cache, src, digest, opts, mirror=pin_lock)
        if held is None:
            found = cache
    try:
        pin.write(caches.write, digest, socket.gethostname())
    except BaseException:
        if held is not None:
            held.release()
        raise
    if found is not None:
        result = hit(found, src, digest, platform, opts)
        result.pinned = True
        return result
    return Pinned(digest, manifest, held)
