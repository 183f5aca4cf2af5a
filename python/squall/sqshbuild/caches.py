"""The caches one build reads and the one it writes (:class:`Caches`), and a build
answered from one of them (:func:`hit`)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import policy
from squall.sqshbuild.cache import index
from squall.sqshbuild.cache.image_cache import (
    ImageCache,
    open_private,
    open_reader,
    open_shared,
)
from squall.sqshbuild.cache.layout import default_cache_dir, user_cache_dir, work_dir_prefix
from squall.sqshbuild.deputy import node_local
from squall.sqshbuild.options import BuildOptions, BuildResult
from squall.sqshbuild.outpath import copy_out
from squall.sqshbuild.progress import Reporter
from squall.sqshbuild.refs import Source
from squall.sqshbuild.registry import RegistryClient
from squall.sqshbuild.trust import builder_name, is_writer


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


def hit(cache: ImageCache, src: Source, digest: str, platform: str,
        opts: BuildOptions, client: RegistryClient | None = None) -> BuildResult:
    """A cached image for ``src``. With ``client``, the site's policy is checked first (a
    cached image still has to satisfy the policy in force); without, the caller did."""
    variant = opts.squash.variant()
    if client is not None:
        policy.check_image(src, client, digest)
    if opts.deputy is not None:
        opts.deputy.check_hit(cache, src, digest, variant)
    cache.touch(digest, variant)
    index.remember(cache, src.canonical, platform, digest)
    path = cache.sqsh(digest, variant)
    side = cache.read_sidecar(digest, variant) or {}
    if opts.output is not None:
        path = copy_out(path, opts.output, side)
    return BuildResult(path, digest, src.canonical, True, opts.elapsed(), side)


def offline_ok(src: Source, exc: SquallError, opts: BuildOptions) -> bool:
    """The registry could not be reached and a cached digest may stand in for the tag: not
    for a registry of this node alone (another node's cache record names another registry's
    image under the same name)."""
    return (opts.offline_ok and str(exc).startswith("registry unreachable")
            and not node_local(src.registry))


def offline_hit(where: ImageCache, src: Source, known: str, platform: str,
                opts: BuildOptions, exc: SquallError, client: RegistryClient) -> BuildResult:
    said = f"{exc}; using the cached image {known}"
    opts.reporter.stage(said)
    result = hit(where, src, known, platform, opts, client)
    result.offline = said
    return result
