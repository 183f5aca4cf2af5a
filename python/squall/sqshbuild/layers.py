"""Content-addressed layer cache: parallel downloads, sha256 verified while streaming, resume.

A layer is kept uncompressed, as ``<layers>/sha256/<hex>.tar`` where ``<hex>`` is the digest
of the blob the registry served: the merge then reads headers with random access and the
squash step copies file data straight from the page cache (``sendfile``), and a warm build
does no decompression at all. The price is disk space (an uncompressed copy), which ``gc``
reclaims first.

A download in progress is ``<hex>.partial``, guarded by a :class:`SharedLock`
(``<hex>.lock``) so two builders never write the same file. An interrupted download (error,
SIGKILL) leaves the partial file; the next build hashes what is there and asks the
registry for the rest with ``Range: bytes=N-``. Within a build, a connection cut mid-layer
goes on the same way into the same layer tar (:class:`LayerTar`). The bytes are hashed
and decompressed (:mod:`squall.sqshbuild.inflate`) into ``<hex>.tar.tmp`` as they
arrive; only when the digest matches is that renamed to ``<hex>.tar`` (and the partial
blob deleted); the fsync follows in the background and ends with an ``<hex>.ok`` marker,
so a build never waits on the disk for a layer it reads from the page cache, and a crash
cannot leave a torn layer that looks cached.
A blob whose digest does not match is deleted and nothing is published.

A build waiting for another's download of a layer watches how fast that one goes
(:mod:`.layerwait`, from what the holder writes into the lock every second) and, when the
holder holds it hostage (a trickle, a stall), pulls the same digest from its own source
into names of its own (``<hex>.tar.own-<host>.<pid>~<random>``), without the lock. Every
copy is placed without replacing one that is there (:mod:`.noreplace`): the first verified
copy is the layer, and the build that loses the race drops its own and reads it (a holder
also stops downloading as soon as it sees the layer there).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import socket
import stat
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import requests

from squall.atomic_write import write_atomic
from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import safefs
from squall.sqshbuild.cache.layout import fsync_dir, work_dir_prefix
from squall.sqshbuild.cache.leftovers import remove_dead_temps
from squall.sqshbuild.jsonbound import check as check_depth
from squall.sqshbuild.layerfiles import (
    Beaten,
    LayerTar,
    Mismatch,
    Progress,
    Retry,
    TooLong,
    ensure_dir,
    file_size,
    fsync_file,
    longer,
    mark_ok,
    open_partial,
)
from squall.sqshbuild.layerwait import HolderWatch
from squall.sqshbuild.layerwait import status as layer_status
from squall.sqshbuild.lock import SharedLock
from squall.sqshbuild.noreplace import place_new
from squall.sqshbuild.progress import PullCount
from squall.sqshbuild.registry import Descriptor, RegistryClient
from squall.sqshbuild.transport import (
    BodyWatch,
    blob_bound,
    body_chunks,
    low_speed,
    request_timeout,
    short_digest,
)
from squall.sqshbuild.trust import Trust, may_remove, who

CHUNK = 1 << 20
CONFIG_LIMIT = 64 << 20  # an image config read back from the cache



def _count_of(progress: Progress | None) -> PullCount | None:
    """The build's count whose ``download_advance`` is ``progress`` (build.py passes
    that): it says whose pull of a layer the build waits for, and whom it works for."""
    count = getattr(progress, "__self__", None)
    return count if isinstance(count, PullCount) else None


def _advance(progress: Progress | None, n: int) -> None:
    if progress and n > 0:
        progress(n)


def _hex(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not all(c in "0123456789abcdef" for c in hexpart):
        raise SquallError(f"unsupported or malformed digest {digest!r}: only sha256 is supported")
    return hexpart


def _disk_error(exc: OSError, path: Path) -> SquallError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "disk full" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        return SquallError(f"{what} while writing {path}: free space or move the cache "
                           "(--cache-dir / SQSHBUILD_CACHE, SQSHBUILD_LAYER_CACHE)")
    return SquallError(f"cannot write {path}: {exc.strerror}")


class LayerCache:
    """The layer cache at ``root``; ``trust`` says whose layers it uses (docs/security.md).

    A layer whose names in the shared directory are taken by entries this user may not use
    or replace (another user's tar, marker, partial download or lock) is downloaded into a
    private directory for this build only (:meth:`close` removes it), with one note.

    ``read_only`` are other layer caches (root, trust) whose durable layers and configs
    are used as they are and never written: a user's build reads the shared cache's."""

    def __init__(self, root: Path, trust: Trust | None = None,
                 work_dir: Path | None = None,
                 read_only: list[tuple[Path, Trust]] | None = None) -> None:
        self.root = root
        self.dir = root / "sha256"
        self.trust = trust or Trust.current()
        self.read_only = [(r / "sha256", t) for r, t in read_only or []]
        self.work_dir = work_dir
        self._private: Path | None = None
        self._sync_pool = ThreadPoolExecutor(max_workers=1)
        self._syncs: list[Future[None]] = []
        self._noted: set[str] = set()
        self._active: dict[str, LayerTar] = {}  # digest -> its download's tar (its status)
        self._own: list[Path] = []  # verified copies this build reads, removed at close
        ensure_dir(root)
        ensure_dir(self.dir)

    def path(self, digest: str) -> Path:
        """The uncompressed layer tar."""
        return self.dir / f"{_hex(digest)}.tar"

    def has(self, digest: str) -> bool:
        return self._usable(self.path(digest)) and self._usable(self.ok_path(digest))

    def _elsewhere(self, digest: str) -> Path | None:
        """The durable layer tar in one of the read-only caches, if one holds it."""
        h = _hex(digest)
        for d, trust in self.read_only:
            tar, ok = (safefs.lstat(d / f"{h}{ext}") for ext in (".tar", ".ok"))
            if tar is not None and ok is not None and not (
                    trust.why_not_file(tar) or trust.why_not_file(ok)):
                return d / f"{h}.tar"
        return None

    def ok_path(self, digest: str) -> Path:
        """Exists once the layer tar is on disk for good (fsynced)."""
        return self.dir / f"{_hex(digest)}.ok"

    def _usable(self, path: Path) -> bool:
        st = safefs.lstat(path)
        if st is None:
            return False
        why = self.trust.why_not_file(st)
        if why:
            self._note(f"note: ignoring {path}: it {why} (docs/security.md); an admin can "
                       "remove it")
        return not why

    def _note(self, line: str) -> None:
        if line not in self._noted:
            self._noted.add(line)
            log.warning("%s", line)

    def _taken(self, digest: str) -> str:
        """Why this layer's names cannot be written here ('' when each is absent or ours
        to replace)."""
        h = _hex(digest)
        for name in (f"{h}.tar", f"{h}.ok", f"{h}.partial", f"{h}.tar.tmp"):
            st = safefs.lstat(self.dir / name)
            if st is not None and not (stat.S_ISREG(st.st_mode) and may_remove(st, self.trust)):
                return f"{self.dir / name} {self.trust.why_not_file(st) or 'is not yours'}"
        return ""

    def private_dir(self) -> Path:
        """This build's own layer directory (0700), made on first use."""
        if self._private is None:
            self._private = Path(tempfile.mkdtemp(prefix=work_dir_prefix("layers"),
                                                  dir=self.work_dir))
        return self._private

    def close(self) -> None:
        """Wait for the background fsyncs, then remove the private layers."""
        try:
            self.wait_durable()
        finally:
            for own in self._own:
                safefs.unlink_own(own)
            self._own = []
            if self._private is not None:
                shutil.rmtree(self._private, ignore_errors=True)
                self._private = None

    def fetch(self, client: RegistryClient, desc: Descriptor,
              progress: Progress | None = None) -> Path:
        """The cached layer tar for ``desc``, downloading it if needed (waits for another
        process that is downloading the same blob, as long as that one goes on).

        The tar is usable as soon as it is renamed into place; its fsync runs in the
        background (see :meth:`wait_durable`) and ends with the ``.ok`` marker, and the
        layer's lock is held until then. A ``.tar`` without ``.ok`` is a crashed build's
        leftover that may not have reached the disk: it is fetched again."""
        final = self.path(desc.digest)
        there = final if self.has(desc.digest) else self._elsewhere(desc.digest)
        if there is not None:
            _advance(progress, desc.size)
            return there
        lock = SharedLock(self.dir / f"{_hex(desc.digest)}.lock", trust=self.trust)
        watch = HolderWatch(desc.digest, desc.size, request_timeout())
        if self._wait(lock, watch, progress):
            return self._fetch_locked(client, desc, progress, lock)
        if self.has(desc.digest):
            _advance(progress, desc.size)
            return final
        return self._around(client, desc, progress, watch)

    def _wait(self, lock: SharedLock, watch: HolderWatch, progress: Progress | None) -> bool:
        """Take the layer's lock (True), or False once the layer is there or its holder
        holds the waiters hostage (``watch.why``); the build's progress lines say whose
        pull it waits for meanwhile."""
        count = _count_of(progress)

        def seen(owner: dict[str, object] | None) -> None:
            if owner is not None and "user" not in owner:  # not written yet, or older
                st = safefs.lstat(lock.path)
                owner = {**owner, "user": who(st.st_uid)} if st is not None else owner
            watch.see(owner)
            if count is not None:
                count.layer_wait(watch.digest, watch.text() if owner else None)

        try:
            return lock.acquire(done=lambda: self.has(watch.digest) or bool(watch.why),
                                progress=seen, every=watch.every)
        finally:
            if count is not None:
                count.layer_wait(watch.digest, None)

    def _fetch_locked(self, client: RegistryClient, desc: Descriptor,
                      progress: Progress | None, lock: SharedLock) -> Path:
        """Under the layer's lock: download it into place, telling the builds that wait
        how far it is (the lock's status)."""
        final, ok = self.path(desc.digest), self.ok_path(desc.digest)
        handed = False
        try:
            if self.has(desc.digest):
                _advance(progress, desc.size)
                return final
            taken = "the layer's lock is not honoured" if lock.unlocked else \
                self._taken(desc.digest)
            if taken:
                self._note(f"note: layer {desc.digest[:19]} is downloaded for this build only: "
                           f"{taken}")
                return self._fetch_private(client, desc, progress)
            safefs.unlink_own(ok)
            if safefs.lstat(final) is not None and not safefs.unlink_own(final):
                final.unlink()  # root: a trusted owner's crashed layer (_taken checked it)
            count = _count_of(progress)
            serves = count.serves if count is not None else ""
            lock.status = lambda: self._status(desc.digest, serves)
            self._download(client, desc, final, progress,
                           beaten=lambda: self.has(desc.digest))
            lock.status = lambda: layer_status(desc.digest, None, 0, serves)
            self._syncs.append(self._sync_pool.submit(self._make_durable, final, ok, lock))
            handed = True
            return final
        finally:
            if not handed:
                lock.release()

    def _status(self, digest: str, serves: str) -> dict[str, object]:
        tar = self._active.get(digest)
        if tar is None:
            return layer_status(digest, 0, 0, serves)
        return layer_status(digest, tar.wire, tar.compressed, serves)

    def _fetch_private(self, client: RegistryClient, desc: Descriptor,
                       progress: Progress | None) -> Path:
        """The layer downloaded into this build's own directory, for this build only."""
        where = self.private_dir() / self.path(desc.digest).name
        self._download(client, desc, where, progress)
        return where

    def _around(self, client: RegistryClient, desc: Descriptor, progress: Progress | None,
                watch: HolderWatch) -> Path:
        """The layer pulled from this build's own source while another holds its lock
        and holds the waiters hostage: into names of this process's own, verified, made
        durable, then placed unless another verified copy was placed first."""
        log.warning("note: layer %s is pulled by %s, but %s: this build pulls it from %s "
                    "itself (docs/security.md)", short_digest(desc.digest), watch.holder(),
                    watch.why, client.name)
        taken = self._taken(desc.digest)
        if taken:
            self._note(f"note: layer {desc.digest[:19]} is downloaded for this build only: "
                       f"{taken}")
            return self._fetch_private(client, desc, progress)
        h = _hex(desc.digest)
        remove_dead_temps(self.dir, f"{h}.*.own-*", self.trust)  # killed builds' names
        tag = f"own-{socket.gethostname()}.{os.getpid()}~{uuid.uuid4().hex[:8]}"
        mine, partial = self.dir / f"{h}.tar.{tag}", self.dir / f"{h}.partial.{tag}"
        try:
            if not self._download(client, desc, mine, progress, partial=partial,
                                  beaten=lambda: self.has(desc.digest)):
                return self.path(desc.digest)  # another's copy came first
            return self._place_own(mine, desc.digest)
        except BaseException:
            for name in (mine, partial):  # a unique name: nobody would resume it
                safefs.unlink_own(name)
            raise

    def _place_own(self, mine: Path, digest: str) -> Path:
        """A verified copy pulled without the lock: made durable first (so that whoever
        reads it after a crash finds the bytes), then placed unless a copy is there."""
        final, ok = self.path(digest), self.ok_path(digest)
        try:
            fsync_file(mine)
            if place_new(mine, final):
                fsync_dir(self.dir)
                mark_ok(ok)  # or the holder's, after its fsync of this very file
                fsync_dir(self.dir)
                return final
        except (OSError, safefs.Unsafe) as exc:
            if isinstance(exc, safefs.Unsafe):
                raise SquallError(f"layer {mine} changed under this build: {exc}") from None
            raise _disk_error(exc, final) from None
        if self.has(digest):
            safefs.unlink_own(mine)
            return final
        self._own.append(mine)  # another's copy is not durable yet: this build reads its own
        return mine

    def _make_durable(self, final: Path, ok: Path, lock: SharedLock) -> None:
        try:
            fsync_file(final)
            mark_ok(ok)  # or already, by a build that pulled it while this one held it
            fsync_dir(self.dir)
        except (OSError, safefs.Unsafe) as exc:
            if isinstance(exc, safefs.Unsafe):
                raise SquallError(f"layer {final} changed under this build: {exc}") from None
            raise _disk_error(exc, final) from None
        finally:
            lock.release()

    def wait_durable(self) -> None:
        """Wait for the background fsyncs (and release their locks); raise their errors."""
        syncs, self._syncs = self._syncs, []
        for f in syncs:
            f.result()

    def _download(self, client: RegistryClient, desc: Descriptor, final: Path,
                  progress: Progress | None, partial: Path | None = None,
                  beaten: Callable[[], bool] | None = None) -> bool:
        """Download the layer to ``final`` (through ``partial``, by default
        ``<hex>.partial`` beside it): True once placed there, False when ``beaten`` said
        meanwhile that another's copy was placed first (this download's files removed)."""
        partial = partial or final.with_name(f"{_hex(desc.digest)}.partial")
        tar = LayerTar(final.with_name(final.name + ".tmp"), desc.digest, progress, partial)
        tar.beaten = beaten
        self._active[desc.digest] = tar
        try:
            self._attempts(client, desc, partial, final, tar)
            return True
        except Beaten:
            safefs.unlink_own(partial)
            _advance(progress, desc.size - tar.reported)
            return False
        except OSError as exc:
            raise _disk_error(exc, final) from None
        finally:
            tar.close()
            self._active.pop(desc.digest, None)

    def _attempts(self, client: RegistryClient, desc: Descriptor, partial: Path, final: Path,
                  tar: LayerTar) -> None:
        delay = 0.5
        mismatches = 0
        for attempt in range(client.retries):
            if tar.beaten is not None and tar.beaten():
                raise Beaten
            try:
                self._download_once(client, desc, partial, final, tar)
            except Retry as exc:
                if attempt + 1 >= client.retries:
                    raise SquallError(f"download of {desc.digest} from {client.name} kept "
                                      f"failing ({exc}): check the network and try "
                                      "again") from None
                time.sleep(delay)
                delay *= 2
                continue
            except TooLong as exc:
                safefs.unlink_own(partial)
                tar.reset()
                if client.blob_failed(desc.digest):
                    continue  # a mirror served it: the next source
                raise SquallError(str(exc)) from None
            except Mismatch as exc:
                safefs.unlink_own(partial)
                tar.reset()
                if client.blob_failed(desc.digest):
                    continue  # a mirror served it wrong: the next source
                mismatches += 1
                if mismatches >= 2:
                    raise SquallError(
                        f"digest mismatch for layer {desc.digest} from {client.name}: the "
                        f"data {exc}; the registry served corrupt or tampered content, "
                        "nothing was published") from None
                continue
            return
        raise SquallError(f"download of {desc.digest} from {client.name} failed: try again")

    def _download_once(self, client: RegistryClient, desc: Descriptor, partial: Path,
                       final: Path, tar: LayerTar) -> None:
        """Download (resuming ``partial``), hash and decompress in one pass over the bytes;
        publish ``final`` only if the digest matches.

        After a cut within this build, ``tar`` already holds the bytes of ``partial``: the
        download goes on from there into the same tar, so a merge reading it goes on too.
        Otherwise (a killed build's ``partial``) those bytes are hashed and inflated first.

        The blob may bring at most ``bound`` bytes: its descriptor's size, or without one
        the server's ``Content-Length`` and ``SQSHBUILD_MAX_BLOB_SIZE``."""
        bound = blob_bound(desc.digest, desc.size, client.name)
        tar.compressed = desc.size
        if not (tar.started and file_size(partial) == tar.have):
            self._replay_partial(desc, client.name, partial, tar, bound)
        resp = None
        if not (desc.size and tar.have == desc.size):
            resp = self._open_rest(client, desc, partial, tar, bound)
        with open_partial(partial, bool(tar.have)) as out:
            if resp is not None:
                self._receive(resp, desc, client.name, out, tar, bound)
        tar.publish(final, client.name)
        safefs.unlink_own(partial)
        fsync_dir(final.parent)

    @staticmethod
    def _replay_partial(desc: Descriptor, source: str, partial: Path, tar: LayerTar,
                        bound: int) -> None:
        """Start ``tar`` afresh from a killed download's ``partial``: its bytes hashed and
        inflated again, to be resumed."""
        tar.start()
        # A killed download of this user's: hashed and inflated again, then resumed.
        # Another's was never left here (:meth:`_taken`) but root's may take a trusted
        # owner's over: its bytes are only read, and checked by the digest.
        fd = safefs.open_own(partial, os.O_RDONLY) if safefs.lstat(partial) else None
        if fd is None and safefs.lstat(partial) is not None:
            partial.unlink()
        if fd is not None:
            with os.fdopen(fd, "rb") as f:
                while chunk := f.read(CHUNK):
                    tar.feed(chunk)
            if tar.have > bound:
                raise longer(desc, source, bound)

    @staticmethod
    def _open_rest(client: RegistryClient, desc: Descriptor, partial: Path, tar: LayerTar,
                   bound: int) -> requests.Response:
        """The response for the blob's bytes from ``tar.have`` on, its length checked."""
        resp = client.open_blob(desc.digest, tar.have)
        if resp.status_code == 416 or (tar.have and resp.status_code == 200):
            # the registry cannot resume: start over
            resp.close()
            safefs.unlink_own(partial)
            tar.reset()
            raise Retry("the registry refused to resume")
        length = resp.headers.get("Content-Length", "")
        if length.isdigit() and tar.have + int(length) > bound:
            resp.close()
            raise longer(desc, client.name, bound, tar.have + int(length))
        if length.isdigit() and not desc.size:
            tar.compressed = tar.have + int(length)
        return resp

    @staticmethod
    def _receive(resp: requests.Response, desc: Descriptor, source: str, out: BinaryIO,
                 tar: LayerTar, bound: int) -> None:
        """The body into ``out`` and ``tar``, stopped at ``bound`` or when it stalls."""
        window = request_timeout()
        watch = BodyWatch(resp, window, least=int(low_speed() * window))
        tar.wire = tar.have

        def arrived(n: int) -> None:
            watch.add(n)
            tar.arrived(n)

        try:
            with watch:
                for chunk in body_chunks(resp, CHUNK, arrived):
                    if tar.have + len(chunk) > bound:  # stop at once
                        raise longer(desc, source, bound)
                    out.write(chunk)
                    tar.feed(chunk)
        except (requests.RequestException, ConnectionError) as exc:
            # a body short of its length is a cut; one as long as the server said
            # but not the blob's fails its digest below (a mirror: the next source)
            raise Retry(watch.why or str(exc) or type(exc).__name__) from None
        finally:
            resp.close()
        if watch.why:  # a body without a length that the watch cut, ended quietly
            raise Retry(watch.why)

    def config(self, client: RegistryClient, digest: str) -> bytes:
        """The image config blob, kept beside the layers so a rerun does not fetch it again."""
        path = self.dir / f"{_hex(digest)}.config"
        for d in (self.dir, *(d for d, _t in self.read_only)):
            try:
                # checked by its digest, so anyone's copy would do, but a FIFO or a link is
                # never opened
                data = safefs.read_file(d / path.name, limit=CONFIG_LIMIT)
                if "sha256:" + hashlib.sha256(data).hexdigest() == digest:
                    check_depth(data, f"config {digest} of {client.name}")
                    return data
            except (OSError, safefs.Unsafe):
                pass
        data = client.get_blob(digest)
        # the caller parses it: bounded here, before anything recurses into it
        check_depth(data, f"config {digest} of {client.name}")
        if not safefs.owned_by_me(path):
            return data  # another user's name: never replaced
        tmp = path.with_name(f"{path.name}.{os.getpid()}~{uuid.uuid4().hex[:8]}.tmp")
        try:
            write_atomic(path, data, 0o644, tmp=tmp, fsync=False)
        except OSError:
            pass  # only a cache: the build goes on without it
        return data

    def fetch_all(self, client: RegistryClient, descs: list[Descriptor], jobs: int = 4,
                  progress: Progress | None = None) -> list[Path]:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(descs) or 1))) as pool:
            paths = [f.result() for f in self.submit_all(pool, client, descs, progress)]
        self.wait_durable()
        return paths

    def submit_all(self, pool: ThreadPoolExecutor, client: RegistryClient,
                   descs: list[Descriptor], progress: Progress | None = None
                   ) -> list[Future[Path]]:
        """Start every download; the top layer first, since the merge reads it first."""
        futures: dict[Descriptor, Future[Path]] = {}
        for d in reversed(descs):
            if d not in futures:
                futures[d] = pool.submit(self.fetch, client, d, progress)
        return [futures[d] for d in descs]
