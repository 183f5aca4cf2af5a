"""The build: resolve, reuse or take the cache lock, download, merge, squash, publish."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import enroot_files, fdtree, jsonbound, mirrors, site
from squall.sqshbuild.bounds import after_publish, check_image_size
from squall.sqshbuild.cache import index
from squall.sqshbuild.cache.failures import BuildFailures
from squall.sqshbuild.cache.image_cache import (
    ImageCache,
    open_private,
    open_reader,
    open_shared,
)
from squall.sqshbuild.cache.layout import (
    TMP_PREFIX,
    default_cache_dir,
    disk_error,
    entry_name,
    user_cache_dir,
    work_dir_prefix,
)
from squall.sqshbuild.cache.leftovers import remove_dead_temps, remove_dead_work_dirs
from squall.sqshbuild.cache.pins import JobPin
from squall.sqshbuild.cache.publish import publish
from squall.sqshbuild.deputy import Deputy, node_local
from squall.sqshbuild.layers import LayerCache
from squall.sqshbuild.lock import SharedLock
from squall.sqshbuild.outpath import OutputTarget
from squall.sqshbuild.pipe import grow_pipe
from squall.sqshbuild.progress import PullCount, Reporter
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
from squall.sqshbuild.sources import load_source
from squall.sqshbuild.squash import (
    SquashOptions,
    check_options,
    mksquashfs_argv,
    pick_pipeline,
    squash_error,
    tar2sqfs_argv,
)
from squall.sqshbuild.trust import builder_name, is_writer
from squall.sqshbuild.unpack import DirSink, Layer, TarSink, merge_layers
from squall.sqshbuild.versions import VersionProbe
from squall.sqshbuild.writeback import EarlyWriteback

VERSION = "0.1.0"


@dataclass
class BuildOptions:
    cache_dir: Path | None = None
    output: Path | None = None
    arch: str = ""
    squash: SquashOptions = field(default_factory=SquashOptions)
    insecure: tuple[str, ...] = ()
    jobs: int = 0  # parallel downloads; 0 = default_jobs()
    work_dir: Path | None = None
    offline_ok: bool = True
    job: str = ""  # a job key (--job): a tag is resolved once for the job and pinned
    deputy: Deputy | None = None  # --for-user: the builder working for that user
    reporter: Reporter = field(default_factory=Reporter)
    # filled in: stage -> seconds since build() started (first time the stage was reached)
    timings: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def mark(self, stage: str) -> None:
        self.timings.setdefault(stage, round(self.elapsed(), 3))


@dataclass
class BuildResult:
    path: Path
    digest: str
    reference: str
    cached: bool
    seconds: float
    sidecar: dict[str, Any]
    pipeline: str = ""
    pinned: bool = False  # this build resolved the tag for its job and pinned the digest
    offline: str = ""  # the registry could not be reached: why, and the cached digest used


@dataclass
class _Pinned:
    """A job's pinned digest not in any cache yet: with the manifest and the build lock
    when this process resolved the tag (it took the lock before it wrote the pin, so the
    job's other nodes wait for its build), else only the digest."""

    digest: str
    manifest: Manifest | None = None
    lock: SharedLock | None = None


def default_jobs() -> int:
    """Each download also inflates its layer (CPU-bound): 2 on up to 2 CPUs, else up to 4.
    Measured on the 2-CPU benchmark host: 2 jobs as fast as or faster than 4, 1 slower."""
    n = os.cpu_count() or 1
    return 2 if n <= 2 else min(4, n)


@dataclass
class Caches:
    """Where hits are looked for (``read``, in order) and where this build writes (its
    lock, layers and image): for root and the builder the shared cache; for a user the
    user's own cache, the shared one only read (docs/security.md); for ``-o`` without a
    cache of one's own, a scratch cache removed afterwards."""

    read: list[ImageCache]
    write: ImageCache
    notice: str = ""
    scratch: Path | None = None

    def find(self, digest: str, variant: str) -> ImageCache | None:
        for cache in (*self.read, self.write):
            if cache.has(digest, variant):
                return cache
        return None

    def lookup(self, reference: str, platform: str, variant: str) -> str | None:
        for cache in (*self.read, self.write):
            known = index.lookup(cache, reference, platform, variant)
            if known:
                return known
        return None

    def building(self, reporter: Reporter) -> ImageCache:
        """The cache a build writes to; says once where, when it is not the shared one."""
        if self.notice.startswith("note: "):
            log.warning("%s", self.notice)
        elif self.notice:
            reporter.stage(self.notice)
        self.notice = ""
        return self.write


def open_caches(opts: BuildOptions) -> Caches:
    root = (opts.cache_dir or default_cache_dir()).absolute()
    notice = ""
    if is_writer():
        try:
            found: ImageCache | None = open_shared(root, must_write=False)
        except SquallError as exc:
            if opts.output is None:
                raise
            return _scratch([], opts, f"note: {exc}; -o needs no cache: building without one")
        assert found is not None
        if found.writable:
            return Caches([found], found)
        notice = found.problem
    else:
        # A user makes no shared path; only an explicit --cache-dir in a directory of the
        # user's alone becomes the user's own cache.
        found = open_reader(root, make_own=opts.cache_dir is not None)
        if found is not None and found.writable:
            return Caches([found], found)
    read = [found] if found is not None else []
    try:
        own = open_private(user_cache_dir().absolute())
    except SquallError:
        if opts.output is None:
            raise
        return _scratch(read, opts)
    if notice:
        return Caches(read, own, f"note: {notice}; building in your own cache {own.root}")
    writer = builder_name() or "root"
    return Caches(read, own, f"building in your own cache {own.root} (the shared cache "
                             f"{root} is written by {writer} alone)")


def _scratch(read: list[ImageCache], opts: BuildOptions, notice: str = "") -> Caches:
    """For -o without a cache to write: a private one, removed after the build."""
    scratch = Path(tempfile.mkdtemp(prefix=work_dir_prefix("cache"), dir=opts.work_dir))
    return Caches(read, open_private(scratch), notice, scratch=scratch)


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
                result.pinned = isinstance(resolved, _Pinned) and resolved.manifest is not None
                return result
            return _build_local(src, caches, platform, arch, opts)
        finally:
            if caches.scratch is not None:
                _rmtree(caches.scratch)
    finally:
        os.umask(umask)


def _hit(cache: ImageCache, src: Source, digest: str, platform: str,
         opts: BuildOptions) -> BuildResult:
    variant = opts.squash.variant()
    if opts.deputy is not None:
        opts.deputy.check_hit(cache, src, digest, variant)
    cache.touch(digest, variant)
    index.remember(cache, src.canonical, platform, digest)
    path = cache.sqsh(digest, variant)
    side = cache.read_sidecar(digest, variant) or {}
    if opts.output is not None:
        path = _copy_out(path, opts.output, side)
    return BuildResult(path, digest, src.canonical, True, opts.elapsed(), side)


def _resolve_registry(src: Source, client: RegistryClient, caches: Caches, platform: str,
                      arch: str, opts: BuildOptions) -> Manifest | BuildResult | _Pinned:
    variant = opts.squash.variant()
    if src.digest and (where := caches.find(src.digest, variant)) is not None:
        return _hit(where, src, src.digest, platform, opts)  # digests never move: no request
    known = caches.lookup(src.canonical, platform, variant)
    where = caches.find(known, variant) if known else None
    if known and where and src.digest:
        return _hit(where, src, known, platform, opts)  # an index digest, resolved before
    if opts.job and not src.digest:
        return _resolve_pinned(src, client, caches, platform, arch, opts)
    opts.reporter.stage(f"resolving {src.canonical} for {platform}")
    try:
        manifest = client.resolve(src.digest or src.tag, arch)
    except SquallError as exc:
        if known and where and _offline_ok(src, exc, opts):
            return _offline_hit(where, src, known, platform, opts, exc)
        raise
    return manifest


def _offline_ok(src: Source, exc: SquallError, opts: BuildOptions) -> bool:
    """The registry could not be reached and a cached digest may stand in for the tag: not
    for a registry of this node alone (another node's cache record names another registry's
    image under the same name)."""
    return (opts.offline_ok and str(exc).startswith("registry unreachable")
            and not node_local(src.registry))


def _offline_hit(where: ImageCache, src: Source, known: str, platform: str,
                 opts: BuildOptions, exc: SquallError) -> BuildResult:
    said = f"{exc}; using the cached image {known}"
    opts.reporter.stage(said)
    result = _hit(where, src, known, platform, opts)
    result.offline = said
    return result


def _resolve_pinned(src: Source, client: RegistryClient, caches: Caches, platform: str,
                    arch: str, opts: BuildOptions) -> BuildResult | _Pinned:
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
            return _resolve_pinned(src, client, caches, platform, arch, opts)
    found = caches.find(digest, opts.squash.variant())
    if found is not None:
        return _hit(found, src, digest, platform, opts)
    return _Pinned(digest)


def _pin_now(pin: JobPin, src: Source, client: RegistryClient, caches: Caches,
             platform: str, arch: str, opts: BuildOptions,
             pin_lock: SharedLock | None = None) -> BuildResult | _Pinned:
    """Under the pin's lock: resolve the tag, take the image's build lock when it is not
    cached, then write the pin, so that the job's other nodes wait for this build."""
    variant = opts.squash.variant()
    opts.reporter.stage(f"resolving {src.canonical} for {platform} (job {pin.job})")
    try:
        manifest = client.resolve(src.tag, arch)
    except SquallError as exc:
        known = caches.lookup(src.canonical, platform, variant)
        where = caches.find(known, variant) if known else None
        if not (known and where and _offline_ok(src, exc, opts)):
            raise
        pin.write(caches.write, known, socket.gethostname())
        result = _offline_hit(where, src, known, platform, opts, exc)
        result.pinned = True
        return result
    digest = manifest.digest
    found = caches.find(digest, variant)
    held: SharedLock | None = None
    if found is None:
        cache = caches.building(opts.reporter)
        held, _failures = _take_build_lock(cache, src, digest, opts, mirror=pin_lock)
        if held is None:
            found = cache
    try:
        pin.write(caches.write, digest, socket.gethostname())
    except BaseException:
        if held is not None:
            held.release()
        raise
    if found is not None:
        result = _hit(found, src, digest, platform, opts)
        result.pinned = True
        return result
    return _Pinned(digest, manifest, held)


def _take_build_lock(cache: ImageCache, src: Source, digest: str, opts: BuildOptions,
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


def _build_registry(src: Source, client: RegistryClient, caches: Caches,
                    target: Manifest | _Pinned, platform: str, arch: str,
                    opts: BuildOptions) -> BuildResult:
    if isinstance(target, _Pinned):
        manifest, digest, lock = target.manifest, target.digest, target.lock
    else:
        manifest, digest, lock = target, target.digest, None
    variant = opts.squash.variant()
    rep = opts.reporter
    if lock is None:
        found = caches.find(digest, variant)
        if found is not None:
            return _hit(found, src, digest, platform, opts)
        cache = caches.building(rep)
        got, failures = _take_build_lock(cache, src, digest, opts)
        if got is None:
            return _hit(cache, src, digest, platform, opts)
        lock = got
    else:
        cache = caches.write
        failures = BuildFailures(cache, digest, variant)
    layers_cache: LayerCache | None = None
    try:
        if cache.has(digest, variant):
            return _hit(cache, src, digest, platform, opts)
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
        lock.status = count.fields
        opts = replace(opts, reporter=count)
        rep = count
        rep.stage(f"downloading {len(manifest.layers)} layers")
        rep.download_start(sum(d.size for d in manifest.layers))
        sidecar = _sidecar(src, client, manifest, config, platform)
        # The merge starts on the top layer once it is downloaded, while the lower ones
        # still are.
        pool = ThreadPoolExecutor(max_workers=opts.jobs or default_jobs())
        built = False
        opts.mark("resolved")
        try:
            futures = layers_cache.submit_all(pool, client, manifest.layers,
                                              rep.download_advance)

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


def _sidecar(src: Source, client: RegistryClient, manifest: Manifest, config: dict[str, Any],
             platform: str) -> dict[str, Any]:
    sidecar: dict[str, Any] = {
        "reference": src.text, "canonical": src.canonical, "manifest_digest": manifest.digest,
        "config_digest": manifest.config.digest,
        "layers": [d.digest for d in manifest.layers],
        "platform": manifest.platform or _platform_of(config, platform),
    }
    # Whose image this is (deputy.py): the registry asks for credentials at the manifest,
    # so by now the client knows whether it sent any.
    if client.credentialed:
        sidecar["pulled_with_credentials"] = {"registry": client.registry,
                                              "repository": client.repository}
    return sidecar


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
            return _hit(found, src, digest, platform, opts)
        cache = caches.building(opts.reporter)
        lock = cache.lock(digest, variant)
        if not lock.acquire(done=lambda: cache.has(digest, variant),
                            on_wait=opts.reporter.waiting):
            return _hit(cache, src, digest, platform, opts)
        try:
            _clean_dead_temps(cache, digest, variant, lock)
            layers = [Layer(name, opener) for name, opener in image.layers]
            sidecar = {
                "reference": src.text, "canonical": src.canonical, "manifest_digest": digest,
                "config_digest": image.config_digest, "layers": [n for n, _ in image.layers],
                "platform": image.platform or _platform_of(image.config, platform),
            }
            path, side, pipeline = _squash_and_publish(cache, digest, image.config, layers,
                                                       sidecar, opts)
            index.remember(cache, src.canonical, platform, digest)
        finally:
            lock.release()
        return BuildResult(path, digest, src.canonical, False, opts.elapsed(), side,
                           pipeline)
    finally:
        _rmtree(work)


def _platform_of(config: dict[str, Any], default: str) -> str:
    arch = config.get("architecture")
    return f"{config.get('os', 'linux')}/{arch}" if arch else default


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
            _squash(pipeline, layers, files, probe, dest, opts)
        opts.mark("squash_done")
        sidecar = dict(sidecar, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       versions=dict(sorted(probe.found.items())),
                       squash={"pipeline": pipeline, "compressor": opts.squash.compressor,
                               "level": opts.squash.level,
                               "block_size": opts.squash.block_size,
                               "no_data_compression": opts.squash.no_data_compression},
                       sqshbuild_version=VERSION,
                       env=_env_of(config), entrypoint=_ep_of(config))
        if target is not None:
            path = _publish_to(target, sidecar)
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


@dataclass(frozen=True)
class Dest:
    """Where a squash tool writes (``path``), what messages name (``shown``: the -o path,
    not ``/proc/self/fd/N/...``) and the descriptors the tool inherits for it."""

    path: Path
    shown: Path
    fds: tuple[int, ...] = ()


def _squash(pipeline: str, layers: list[Layer], files: enroot_files.EnrootFiles,
            probe: VersionProbe, dest: Dest, opts: BuildOptions) -> None:
    if pipeline == "stream":
        _squash_stream(layers, files, probe, dest, opts)
    else:
        _squash_unpack(layers, files, probe, dest, opts)


def _env_of(config: dict[str, Any]) -> list[str]:
    return list((config.get("config") or {}).get("Env") or [])


def _ep_of(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("config") or {}
    return {"entrypoint": inner.get("Entrypoint"), "cmd": inner.get("Cmd"),
            "workdir": inner.get("WorkingDir") or "/"}


def _squash_stream(layers: list[Layer], files: enroot_files.EnrootFiles, probe: VersionProbe,
                   dest: Dest, opts: BuildOptions) -> None:
    argv = tar2sqfs_argv(str(dest.path), opts.squash)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, pass_fds=dest.fds)
    assert proc.stdin is not None
    grow_pipe(proc.stdin.fileno())
    err_text = ""
    sink = TarSink(proc.stdin, opts.reporter.squash_advance)  # type: ignore[arg-type]
    try:
        merge_layers(layers, sink, files.as_synthetic(), [files.workdir], probe)
        proc.stdin.close()
        opts.mark("merge_done")
    except BrokenPipeError:
        sink.abort()
    except BaseException:
        sink.abort()
        proc.kill()
        proc.wait()
        raise
    finally:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
        if proc.stderr is not None:
            err_text = proc.stderr.read().decode(errors="replace")
    rc = proc.wait()
    if rc != 0:
        raise squash_error("tar2sqfs", rc, err_text, str(dest.shown))


def _squash_unpack(layers: list[Layer], files: enroot_files.EnrootFiles, probe: VersionProbe,
                   dest: Dest, opts: BuildOptions) -> None:
    work = Path(tempfile.mkdtemp(prefix=work_dir_prefix("rootfs"), dir=opts.work_dir))
    try:
        rootfs = work / "rootfs"
        try:
            merge_layers(layers, DirSink(rootfs, opts.reporter.squash_advance),
                         files.as_synthetic(), [files.workdir], probe)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_error(exc, work, "unpacking the image into") from None
            raise
        opts.mark("merge_done")
        argv = mksquashfs_argv(str(rootfs), str(dest.path), opts.squash)
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                              stdout=None if opts.squash.progress else subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, check=False,
                              pass_fds=dest.fds)
        if proc.returncode != 0:
            raise squash_error("mksquashfs", proc.returncode, proc.stderr, str(dest.shown))
    finally:
        _rmtree(work)


def _rmtree(path: Path) -> None:
    try:
        fdtree.remove_path(str(path))
    except OSError:
        pass  # what could not be removed is a dead build's, removed by the next run or gc


def _publish_to(target: OutputTarget, sidecar: dict[str, Any]) -> Path:
    final = target.dir / target.name
    try:
        size = os.stat(target.temp).st_size
        target.write_sidecar(json.dumps(dict(sidecar, size=size, path=str(final)), indent=2,
                                        sort_keys=True) + "\n")
        return target.publish()
    except OSError as exc:
        raise disk_error(exc, final) from None


def _copy_out(path: Path, output: Path, sidecar: dict[str, Any]) -> Path:
    with OutputTarget(output) as target:
        try:
            with open(path, "rb") as src, open(target.temp, "xb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except OSError as exc:
            raise disk_error(exc, target.dir / target.name) from None
        return _publish_to(target, dict(sidecar))
