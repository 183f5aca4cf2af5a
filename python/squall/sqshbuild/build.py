"""The build: resolve, reuse or take the cache lock, download, merge, squash, publish.

The orchestrator; each step's own rules are elsewhere: the caches read and written and a
hit (:mod:`.caches`), a tag pinned once per job (:mod:`.pinning`), the image's build lock
(:mod:`.buildlock`), the layers (:mod:`.layers`), the squash pipelines (:mod:`.squash`),
the sidecar (:mod:`.sidecar`), ``-o`` (:mod:`.outpath`).
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild import enroot_files, fdtree, jsonbound, mirrors, policy, site
from squall.sqshbuild.bounds import after_publish, check_image_size
from squall.sqshbuild.buildlock import take_build_lock
from squall.sqshbuild.cache import index
from squall.sqshbuild.cache.failures import BuildFailures
from squall.sqshbuild.cache.image_cache import ImageCache
from squall.sqshbuild.cache.layout import TMP_PREFIX, entry_name, work_dir_prefix
from squall.sqshbuild.cache.leftovers import remove_dead_temps, remove_dead_work_dirs
from squall.sqshbuild.cache.publish import publish
from squall.sqshbuild.caches import Caches, hit, offline_hit, offline_ok, open_caches
from squall.sqshbuild.layers import LayerCache
from squall.sqshbuild.lock import SharedLock
from squall.sqshbuild.options import BuildOptions, BuildResult
from squall.sqshbuild.outpath import OutputTarget, publish_to
from squall.sqshbuild.pinning import Pinned, resolve_pinned
from squall.sqshbuild.progress import PullCount
from squall.sqshbuild.refs import Source, parse_source
from squall.sqshbuild.registry import (
    Descriptor,
    Manifest,
    NotFound,
    RegistryClient,
    host_arch,
    insecure_registries,
    normalise_arch,
)
from squall.sqshbuild.sidecar import completed, of_local, of_registry
from squall.sqshbuild.sources import load_source
from squall.sqshbuild.squash import Dest, check_options, pick_pipeline, squash
from squall.sqshbuild.unpack import Layer
from squall.sqshbuild.versions import VersionProbe
from squall.sqshbuild.writeback import EarlyWriteback

# build()'s callers take the options and the result from here
__all__ = ["BuildOptions", "BuildResult", "build", "default_jobs"]


def default_jobs() -> int:
    """Each download also inflates its layer (CPU-bound): 2 on up to 2 CPUs, else up to 4.
    Measured on the 2-CPU benchmark host: 2 jobs as fast as or faster than 4, 1 slower."""
    n = os.cpu_count() or 1
    return 2 if n <= 2 else min(4, n)


def build(ref_text: str, opts: BuildOptions) -> BuildResult:
    opts.started = time.monotonic()
    check_options(opts.squash)
    site.load()  # a bad site file stops every build at once, whatever it would have used
    src = parse_source(ref_text)
    arch = normalise_arch(opts.arch)[0] if opts.arch else host_arch()
    platform = f"linux/{arch}"
    # Every file the cache holds is readable by every user, whatever the caller's umask.
    umask = os.umask(0o022)
    try:
        caches = open_caches(opts)
        try:
            remove_dead_work_dirs(opts.work_dir or Path(tempfile.gettempdir()))
            remove_dead_temps(caches.write.root, f"{TMP_PREFIX}*", caches.write.trust)
            if src.kind == "registry":
                conf = mirrors.load()
                candidates = mirrors.search_candidates(src, conf)  # short names: search
                anonymous = opts.deputy.anonymous if opts.deputy else None
                for i, src in enumerate(candidates):  # noqa: B007
                    if opts.deputy is not None:
                        opts.deputy.check_reference(src)
                    client = mirrors.open_client(src, insecure_registries(opts.insecure), conf,
                                                 anonymous)
                    try:
                        resolved = _resolve_registry(src, client, caches, platform, arch, opts)
                        break
                    except NotFound:
                        if i + 1 == len(candidates):
                            raise
                if isinstance(resolved, BuildResult):
                    resolved.seconds = opts.elapsed()
                    return resolved
                result = _build_registry(src, client, caches, resolved, platform, arch, opts)
                result.pinned = isinstance(resolved, Pinned) and resolved.manifest is not None
                return result
            return _build_local(src, caches, platform, arch, opts)
        finally:
            if caches.scratch is not None:
                fdtree.remove_scratch(caches.scratch)
    finally:
        os.umask(umask)


def _resolve_registry(src: Source, client: RegistryClient, caches: Caches, platform: str,
                      arch: str, opts: BuildOptions) -> Manifest | BuildResult | Pinned:
    variant = opts.squash.variant()
    if src.digest and (where := caches.find(src.digest, variant)) is not None:
        return hit(where, src, src.digest, platform, opts, client)  # digests never move
    known = caches.lookup(src.canonical, platform, variant)
    where = caches.find(known, variant) if known else None
    if known and where and src.digest:
        return hit(where, src, known, platform, opts, client)  # an index digest, resolved
    if opts.job and not src.digest:
        return resolve_pinned(src, client, caches, platform, arch, opts)
    opts.reporter.stage(f"resolving {src.canonical} for {platform}")
    try:
        manifest = client.resolve(src.digest or src.tag, arch)
    except SquallError as exc:
        if known and where and offline_ok(src, exc, opts):
            return offline_hit(where, src, known, platform, opts, exc, client)
        raise
    return manifest


def _build_registry(src: Source, client: RegistryClient, caches: Caches,
                    target: Manifest | Pinned, platform: str, arch: str,
                    opts: BuildOptions) -> BuildResult:
    if isinstance(target, Pinned):
        manifest, digest, lock = target.manifest, target.digest, target.lock
    else:
        manifest, digest, lock = target, target.digest, None
    variant = opts.squash.variant()
    rep = opts.reporter
    if lock is None:  # a digest this process did not pin (pinning.py checked that one)
        policy.check_image(src, client, digest)
        found = caches.find(digest, variant)
        if found is not None:
            return hit(found, src, digest, platform, opts)
        cache = caches.building(rep)
        got, failures = take_build_lock(cache, src, digest, opts)
        if got is None:
            return hit(cache, src, digest, platform, opts)
        lock = got
    else:
        cache = caches.write
        failures = BuildFailures(cache, digest, variant)
    layers_cache: LayerCache | None = None
    try:
        if cache.has(digest, variant):
            return hit(cache, src, digest, platform, opts)
        if manifest is None:  # pinned by a build that did not finish: by its digest
            manifest = client.resolve(digest, arch)
        check_image_size(manifest, src)
        _clean_dead_temps(cache, digest, variant, lock)
        layers_cache = LayerCache(cache.layer_root, cache.trust, opts.work_dir,
                                  read_only=[(c.layer_root, c.trust) for c in caches.read
                                             if c is not cache])
        new_layers = _new_layers(manifest, layers_cache, cache, src, opts)
        config = _config(layers_cache, client, manifest)
        # Counted for the waiting builds, which read it in the lock file (progress.py);
        # a build that prints its progress counts already.
        count = rep if isinstance(rep, PullCount) else PullCount(rep, src.canonical)
        count.ref = src.canonical
        count.serves = opts.deputy.user if opts.deputy is not None else ""  # waiters say whom
        lock.status = count.fields
        opts = replace(opts, reporter=count)
        sidecar = of_registry(src, client, manifest, config, platform)
        result = _pull_and_squash(client, cache, digest, manifest, config, sidecar,
                                  layers_cache, opts)
        index.remember(cache, src.canonical, platform, digest)
        failures.clear()
        after_publish(cache, result[0], new_layers, layers_cache, digest, opts.deputy)
    except SquallError as exc:
        if lock.held:  # the builds waiting for this one fail with it (cache/failures.py)
            failures.record(exc)
        raise
    finally:
        lock.release()
        if layers_cache is not None:
            try:
                layers_cache.close()
            except SquallError:
                pass  # waited for above; what is left is the private layers' removal
    return BuildResult(result[0], digest, src.canonical, False, opts.elapsed(),
                       result[1], result[2])


def _pull_and_squash(client: RegistryClient, cache: ImageCache, digest: str,
                     manifest: Manifest, config: dict[str, Any], sidecar: dict[str, Any],
                     layers_cache: LayerCache, opts: BuildOptions
                     ) -> tuple[Path, dict[str, Any], str]:
    """The layers downloaded in parallel, squashed and published; the downloaded layers
    durable before it returns."""
    rep = opts.reporter
    rep.stage(f"downloading {len(manifest.layers)} layers")
    rep.download_start(sum(d.size for d in manifest.layers))
    # The merge starts on the top layer once it is downloaded, while the lower ones
    # still are.
    pool = ThreadPoolExecutor(max_workers=opts.jobs or default_jobs())
    built = False
    opts.mark("resolved")
    try:
        futures = layers_cache.submit_all(pool, client, manifest.layers, rep.download_advance)

        def layer_ready(_f: object) -> None:
            opts.mark("first_layer_ready")
            if all(f.done() for f in futures):
                opts.mark("layers_ready")

        for f in futures:
            f.add_done_callback(layer_ready)
        layers = [Layer(d.digest, resolve=f.result)
                  for d, f in zip(manifest.layers, futures, strict=True)]
        result = _squash_and_publish(cache, digest, config, layers, sidecar, opts)
        built = True
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if built:
            layers_cache.wait_durable()
            opts.mark("layers_durable")
        else:
            try:
                layers_cache.wait_durable()
            except SquallError:
                pass  # the build's own error is the one to report
    return result


def _new_layers(manifest: Manifest, layers_cache: LayerCache, cache: ImageCache, src: Source,
                opts: BuildOptions) -> list[Descriptor]:
    """The layers this build adds to the cache, within the user's share (deputy.py)."""
    new = [d for d in manifest.layers if not layers_cache.has(d.digest)]
    if opts.deputy is not None:
        opts.deputy.check_share(cache, sum(d.size for d in new), src)
    return new


def _config(layers_cache: LayerCache, client: RegistryClient,
            manifest: Manifest) -> dict[str, Any]:
    config = jsonbound.loads(layers_cache.config(client, manifest.config.digest),
                             f"config {manifest.config.digest} of {client.name}")
    if not isinstance(config, dict):
        raise SquallError(f"config {manifest.config.digest} of {client.name} is not a JSON "
                          "object: the image is broken; re-push it")
    return config


def _build_local(src: Source, caches: Caches, platform: str, arch: str,
                 opts: BuildOptions) -> BuildResult:
    work = Path(tempfile.mkdtemp(prefix=work_dir_prefix("src"), dir=opts.work_dir))
    variant = opts.squash.variant()
    try:
        opts.reporter.stage(f"reading {src.canonical}")
        image = load_source(src, arch, work)
        digest = image.key
        found = caches.find(digest, variant)
        if found is not None:
            return hit(found, src, digest, platform, opts)
        cache = caches.building(opts.reporter)
        lock = cache.lock(digest, variant)
        if not lock.acquire(done=lambda: cache.has(digest, variant),
                            on_wait=opts.reporter.waiting):
            return hit(cache, src, digest, platform, opts)
        try:
            _clean_dead_temps(cache, digest, variant, lock)
            layers = [Layer(name, opener) for name, opener in image.layers]
            path, side, pipeline = _squash_and_publish(cache, digest, image.config, layers,
                                                       of_local(src, image, platform), opts)
            index.remember(cache, src.canonical, platform, digest)
        finally:
            lock.release()
        return BuildResult(path, digest, src.canonical, False, opts.elapsed(), side,
                           pipeline)
    finally:
        fdtree.remove_scratch(work)


def _clean_dead_temps(cache: ImageCache, digest: str, variant: str, lock: SharedLock) -> None:
    """Holding the entry's lock, every temp file of this entry is a dead build's leftover,
    another node's too (a node killed mid-build left gigabytes on /fsx); going on without
    the lock (an untrusted or unremovable one), only what dead builds of this host left."""
    remove_dead_temps(cache.root, f"{TMP_PREFIX}{entry_name(digest, variant)}.*", cache.trust,
                      any_host=lock.held)


def _squash_and_publish(cache: ImageCache, digest: str, config: dict[str, Any],
                        layers: list[Layer], sidecar: dict[str, Any], opts: BuildOptions
                        ) -> tuple[Path, dict[str, Any], str]:
    files = enroot_files.generate(config)
    probe = VersionProbe()
    pipeline = pick_pipeline(opts.squash)
    variant = opts.squash.variant()
    target = OutputTarget(opts.output) if opts.output is not None else None
    tmp = target.temp if target is not None else cache.temp_path(digest, variant)
    dest = Dest(tmp, target.dir / target.name if target is not None else tmp,
                target.fds if target is not None else ())
    opts.reporter.stage(f"squashing ({pipeline}, {opts.squash.describe()})")
    opts.reporter.squash_start(len(layers))
    try:
        with EarlyWriteback(tmp):  # the publish fsync then waits for the last blocks only
            squash(pipeline, layers, files, probe, dest, opts)
        opts.mark("squash_done")
        sidecar = completed(sidecar, config, probe.found, pipeline, opts.squash)
        if target is not None:
            path = publish_to(target, sidecar)
        else:
            path = publish(cache, digest, tmp, sidecar, variant)
        opts.mark("published")
    except BaseException:
        if target is None:
            tmp.unlink(missing_ok=True)  # our own temporary file in a cache we write
        raise
    finally:
        if target is not None:
            target.close()
    opts.reporter.done()
    return path, sidecar, pipeline
