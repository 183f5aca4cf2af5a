"""The build: resolve, reuse or take the cache lock, download, merge, squash, publish."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squall.atomic_write import temp_name, write_atomic
from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import enroot_files, mirrors
from squall.sqshbuild.cache import (
    FILE_MODE,
    TMP_PREFIX,
    ImageCache,
    disk_error,
    entry_name,
    fsync_dir,
    remove_dead_temps,
    remove_dead_work_dirs,
    rmtree_forced,
    user_cache_dir,
    work_dir_prefix,
)
from squall.sqshbuild.layers import LayerCache
from squall.sqshbuild.pipe import grow_pipe
from squall.sqshbuild.refs import Source, parse_source
from squall.sqshbuild.registry import (
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
from squall.sqshbuild.trust import may_remove
from squall.sqshbuild.unpack import DirSink, Layer, TarSink, merge_layers
from squall.sqshbuild.versions import VersionProbe
from squall.sqshbuild.writeback import EarlyWriteback

VERSION = "0.1.0"


class Reporter:
    """Progress callbacks; the CLI draws them on a terminal. Methods may be called from
    download threads."""

    def stage(self, text: str) -> None: ...
    def waiting(self, owner: dict[str, object] | None) -> None: ...
    def download_start(self, total: int) -> None: ...
    def download_advance(self, n: int) -> None: ...
    def squash_start(self, layers: int) -> None: ...
    def squash_advance(self, n: int) -> None: ...
    def done(self) -> None: ...


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


def default_jobs() -> int:
    """Each download also inflates its layer (CPU-bound): 2 on up to 2 CPUs, else up to 4.
    Measured on the 2-CPU benchmark host: 2 jobs as fast as or faster than 4, 1 slower."""
    n = os.cpu_count() or 1
    return 2 if n <= 2 else min(4, n)


@dataclass
class Caches:
    """Where hits are looked for (``read``, in order) and where this build writes (its
    lock, layers and image): the shared cache when this user can write it, else the
    per-user cache (with a notice), else, for ``-o``, a scratch cache removed afterwards."""

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
            known = cache.lookup(reference, platform, variant)
            if known:
                return known
        return None

    def building(self, digest: str = "", variant: str = "") -> ImageCache:
        """The cache a build writes to; says once why it is not the shared one. An entry
        whose names are taken there by another user's files (never replaced:
        docs/security.md) is built in the per-user cache instead."""
        blocked = self.write.blocked(digest, variant) if digest else ""
        if blocked:
            user_root = user_cache_dir().absolute()
            if user_root == self.write.root:
                raise SquallError(f"cannot build {digest} in {self.write.root}: {blocked}")
            user = ImageCache.open(user_root, private=True)
            log.warning("note: %s; building in the per-user cache %s instead", blocked,
                        user.root)
            self.write, self.notice = user, ""
            return user
        if self.notice:
            log.warning("note: %s", self.notice)
            self.notice = ""
        return self.write


def open_caches(opts: BuildOptions) -> Caches:
    shared = ImageCache.open(opts.cache_dir, must_write=False)
    if shared.writable:
        return Caches([shared], shared)
    read = [shared]
    user_root = user_cache_dir().absolute()
    user: ImageCache | None = None
    if user_root != shared.root:
        user = ImageCache.open(user_root, private=True, must_write=False)
        if user.writable:
            return Caches(read, user, f"{shared.problem}; building in the per-user cache "
                                      f"{user.root} instead")
        read.append(user)
    if opts.output is not None:  # -o needs no cache: layers go to a scratch one
        scratch = Path(tempfile.mkdtemp(prefix=work_dir_prefix("cache"), dir=opts.work_dir))
        cache = ImageCache.open(scratch, private=True, layer_root=scratch / "layers")
        return Caches(read, cache, scratch=scratch)
    why = f"; nor the per-user cache: {user.problem}" if user is not None else ""
    raise SquallError(f"{shared.problem}{why}")


def build(ref_text: str, opts: BuildOptions) -> BuildResult:
    opts.started = time.monotonic()
    check_options(opts.squash)
    src = parse_source(ref_text)
    arch = normalise_arch(opts.arch)[0] if opts.arch else host_arch()
    platform = f"linux/{arch}"
    # Every file the cache holds is readable by every user, whatever the caller's umask.
    umask = os.umask(0o022)
    try:
        caches = open_caches(opts)
        try:
            remove_dead_work_dirs(opts.work_dir or Path(tempfile.gettempdir()))
            if caches.write.writable:
                remove_dead_temps(caches.write.root, f"{TMP_PREFIX}*")
            if src.kind == "registry":
                conf = mirrors.load()
                candidates = mirrors.search_candidates(src, conf)  # short names: search
                for i, src in enumerate(candidates):  # noqa: B007
                    client = mirrors.open_client(src, insecure_registries(opts.insecure), conf)
                    try:
                        resolved = _resolve_registry(src, client, caches, platform, arch, opts)
                        break
                    except NotFound:
                        if i + 1 == len(candidates):
                            raise
                if isinstance(resolved, BuildResult):
                    resolved.seconds = opts.elapsed()
                    return resolved
                return _build_registry(src, client, caches, resolved, platform, opts)
            return _build_local(src, caches, platform, arch, opts)
        finally:
            if caches.scratch is not None:
                _rmtree(caches.scratch)
    finally:
        os.umask(umask)


def _hit(cache: ImageCache, src: Source, digest: str, platform: str,
         opts: BuildOptions) -> BuildResult:
    variant = opts.squash.variant()
    cache.touch(digest, variant)
    cache.remember(src.canonical, platform, digest)
    path = cache.sqsh(digest, variant)
    side = cache.read_sidecar(digest, variant) or {}
    if opts.output is not None:
        path = _copy_out(path, opts.output, side)
    return BuildResult(path, digest, src.canonical, True, opts.elapsed(), side)


def _resolve_registry(src: Source, client: RegistryClient, caches: Caches, platform: str,
                      arch: str, opts: BuildOptions) -> Manifest | BuildResult:
    variant = opts.squash.variant()
    known = caches.lookup(src.canonical, platform, variant)
    where = caches.find(known, variant) if known else None
    if known and where and src.digest:
        return _hit(where, src, known, platform, opts)  # digests never move
    opts.reporter.stage(f"resolving {src.canonical} for {platform}")
    try:
        manifest = client.resolve(src.digest or src.tag, arch)
    except SquallError as exc:
        if known and where and opts.offline_ok and str(exc).startswith("registry unreachable"):
            opts.reporter.stage(f"{exc}; using the cached image {known}")
            return _hit(where, src, known, platform, opts)
        raise
    return manifest


def _build_registry(src: Source, client: RegistryClient, caches: Caches, manifest: Manifest,
                    platform: str, opts: BuildOptions) -> BuildResult:
    digest = manifest.digest
    variant = opts.squash.variant()
    rep = opts.reporter
    found = caches.find(digest, variant)
    if found is not None:
        return _hit(found, src, digest, platform, opts)
    cache = caches.building(digest, variant)
    lock = cache.lock(digest, variant)
    if not lock.acquire(done=lambda: cache.has(digest, variant), on_wait=rep.waiting):
        return _hit(cache, src, digest, platform, opts)
    layers_cache: LayerCache | None = None
    try:
        if cache.has(digest, variant):
            return _hit(cache, src, digest, platform, opts)
        _clean_dead_temps(cache, digest, variant)
        layers_cache = LayerCache(cache.layer_root, cache.trust, opts.work_dir)
        config_bytes = layers_cache.config(client, manifest.config.digest)
        try:
            config = json.loads(config_bytes)
        except ValueError:
            raise SquallError(f"config {manifest.config.digest} of {client.name} is not JSON: "
                              "the image is broken; re-push it") from None
        rep.stage(f"downloading {len(manifest.layers)} layers")
        rep.download_start(sum(d.size for d in manifest.layers))
        sidecar = {
            "reference": src.text, "canonical": src.canonical, "manifest_digest": digest,
            "config_digest": manifest.config.digest,
            "layers": [d.digest for d in manifest.layers],
            "platform": manifest.platform or _platform_of(config, platform),
        }
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
        cache.remember(src.canonical, platform, digest)
    finally:
        lock.release()
        if layers_cache is not None:
            try:
                layers_cache.close()
            except SquallError:
                pass  # waited for above; what is left is the private layers' removal
    return BuildResult(result[0], digest, src.canonical, False, opts.elapsed(),
                       result[1], result[2])


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
        cache = caches.building(digest, variant)
        lock = cache.lock(digest, variant)
        if not lock.acquire(done=lambda: cache.has(digest, variant),
                            on_wait=opts.reporter.waiting):
            return _hit(cache, src, digest, platform, opts)
        try:
            _clean_dead_temps(cache, digest, variant)
            layers = [Layer(name, opener) for name, opener in image.layers]
            sidecar = {
                "reference": src.text, "canonical": src.canonical, "manifest_digest": digest,
                "config_digest": image.config_digest, "layers": [n for n, _ in image.layers],
                "platform": image.platform or _platform_of(image.config, platform),
            }
            path, side, pipeline = _squash_and_publish(cache, digest, image.config, layers,
                                                       sidecar, opts)
            cache.remember(src.canonical, platform, digest)
        finally:
            lock.release()
        return BuildResult(path, digest, src.canonical, False, opts.elapsed(), side,
                           pipeline)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _platform_of(config: dict[str, Any], default: str) -> str:
    arch = config.get("architecture")
    return f"{config.get('os', 'linux')}/{arch}" if arch else default


def _clean_dead_temps(cache: ImageCache, digest: str, variant: str) -> None:
    """We hold the lock, so any temp file for this entry is a dead build's leftover (one
    this user may not remove stays for its owner or gc)."""
    for p in cache.root.glob(f"{TMP_PREFIX}{entry_name(digest, variant)}.*"):
        try:
            st = p.lstat()
            if not stat.S_ISDIR(st.st_mode) and may_remove(st, cache.trust):
                p.unlink()
        except OSError:
            pass


def _squash_and_publish(cache: ImageCache, digest: str, config: dict[str, Any],
                        layers: list[Layer], sidecar: dict[str, Any], opts: BuildOptions
                        ) -> tuple[Path, dict[str, Any], str]:
    files = enroot_files.generate(config)
    probe = VersionProbe()
    pipeline = pick_pipeline(opts.squash)
    variant = opts.squash.variant()
    if opts.output is not None:
        out_final = opts.output.resolve()
        tmp = _output_temp(out_final)
    else:
        out_final = cache.sqsh(digest, variant)
        tmp = cache.temp_path(digest, variant)
    opts.reporter.stage(f"squashing ({pipeline}, {opts.squash.describe()})")
    opts.reporter.squash_start(len(layers))
    try:
        with EarlyWriteback(tmp):  # the publish fsync then waits for the last blocks only
            _squash(pipeline, layers, files, probe, tmp, opts)
        opts.mark("squash_done")
        sidecar = dict(sidecar, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       versions=dict(sorted(probe.found.items())),
                       squash={"pipeline": pipeline, "compressor": opts.squash.compressor,
                               "level": opts.squash.level,
                               "block_size": opts.squash.block_size,
                               "no_data_compression": opts.squash.no_data_compression},
                       sqshbuild_version=VERSION,
                       env=_env_of(config), entrypoint=_ep_of(config))
        if opts.output is not None:
            path = _publish_to(tmp, out_final, sidecar)
        else:
            path = cache.publish(digest, tmp, sidecar, variant)
        opts.mark("published")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    opts.reporter.done()
    return path, sidecar, pipeline


def _squash(pipeline: str, layers: list[Layer], files: enroot_files.EnrootFiles,
            probe: VersionProbe, out: Path, opts: BuildOptions) -> None:
    if pipeline == "stream":
        _squash_stream(layers, files, probe, out, opts)
    else:
        _squash_unpack(layers, files, probe, out, opts)


def _env_of(config: dict[str, Any]) -> list[str]:
    return list((config.get("config") or {}).get("Env") or [])


def _ep_of(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("config") or {}
    return {"entrypoint": inner.get("Entrypoint"), "cmd": inner.get("Cmd"),
            "workdir": inner.get("WorkingDir") or "/"}


def _squash_stream(layers: list[Layer], files: enroot_files.EnrootFiles, probe: VersionProbe,
                   out: Path, opts: BuildOptions) -> None:
    argv = tar2sqfs_argv(str(out), opts.squash)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
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
        raise squash_error("tar2sqfs", rc, err_text, str(out))


def _squash_unpack(layers: list[Layer], files: enroot_files.EnrootFiles, probe: VersionProbe,
                   out: Path, opts: BuildOptions) -> None:
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
        argv = mksquashfs_argv(str(rootfs), str(out), opts.squash)
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                              stdout=None if opts.squash.progress else subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            raise squash_error("mksquashfs", proc.returncode, proc.stderr, str(out))
    finally:
        _rmtree(work)


def _rmtree(path: Path) -> None:
    try:
        rmtree_forced(path)
    except OSError:
        pass  # what could not be removed is a dead build's, removed by the next run or gc


def _output_temp(final: Path) -> Path:
    """``.building-NAME.<host>.<pid>`` beside ``-o NAME``; what a killed build left there
    is removed first."""
    remove_dead_temps(final.parent, f"{TMP_PREFIX}{final.name}.*")
    return final.with_name(f"{TMP_PREFIX}{final.name}.{socket.gethostname()}.{os.getpid()}")


def _publish_to(tmp: Path, final: Path, sidecar: dict[str, Any]) -> Path:
    side = final.with_suffix(".json") if final.suffix == ".sqsh" else \
        final.with_name(final.name + ".json")
    try:
        os.chmod(tmp, FILE_MODE)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        sidecar = dict(sidecar, size=tmp.stat().st_size, path=str(final))
        write_atomic(side, json.dumps(sidecar, indent=2, sort_keys=True) + "\n", FILE_MODE,
                     tmp=temp_name(side, TMP_PREFIX))
        os.replace(tmp, final)
        fsync_dir(final.parent)
    except OSError as exc:
        raise disk_error(exc, final) from None
    return final


def _copy_out(path: Path, output: Path, sidecar: dict[str, Any]) -> Path:
    output = output.resolve()
    tmp = _output_temp(output)
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        return _publish_to(tmp, output, dict(sidecar))
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise disk_error(exc, output) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
