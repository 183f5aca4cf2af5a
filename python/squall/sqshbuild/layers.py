"""Content-addressed layer cache: parallel downloads, sha256 verified while streaming, resume.

A layer is kept uncompressed, as ``<layers>/sha256/<hex>.tar`` where ``<hex>`` is the digest
of the blob the registry served: the merge then reads headers with random access and the
squash step copies file data straight from the page cache (``sendfile``), and a warm build
does no decompression at all. The price is disk space (an uncompressed copy), which ``gc``
reclaims first.

A download in progress is ``<hex>.partial``, guarded by a :class:`SharedLock`
(``<hex>.lock``) so two builders never write the same file. An interrupted download (error,
SIGKILL) leaves the partial file; the next attempt hashes what is there and asks the
registry for the rest with ``Range: bytes=N-``. A verified blob is renamed to ``<hex>``, then
decompressed (gzip in-process, zstd through ``zstd -dc``) to ``<hex>.tar.tmp`` and renamed to
``<hex>.tar``. A blob whose digest does not match is deleted and never published.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import requests

from squall.errors import SquallError
from squall.sqshbuild.lock import SharedLock
from squall.sqshbuild.registry import Descriptor, RegistryClient

CHUNK = 1 << 20
Progress = Callable[[int], None]


def _hex(digest: str) -> str:
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or not all(c in "0123456789abcdef" for c in hexpart):
        raise SquallError(f"unsupported or malformed digest {digest!r}: only sha256 is supported")
    return hexpart


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _disk_error(exc: OSError, path: Path) -> SquallError:
    if exc.errno == errno.ENOSPC:
        return SquallError(f"disk full while writing {path}: free space or move the cache "
                           "(--cache-dir / SQSHBUILD_CACHE, SQSHBUILD_LAYER_CACHE)")
    return SquallError(f"cannot write {path}: {exc.strerror}")


class LayerCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "sha256"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SquallError(f"cannot create layer cache {self.dir}: {exc.strerror}; set "
                              "SQSHBUILD_LAYER_CACHE or --cache-dir to a writable place") from None

    def path(self, digest: str) -> Path:
        """The uncompressed layer tar."""
        return self.dir / f"{_hex(digest)}.tar"

    def blob(self, digest: str) -> Path:
        """The verified blob as served, kept only until it is decompressed."""
        return self.dir / _hex(digest)

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def fetch(self, client: RegistryClient, desc: Descriptor,
              progress: Progress | None = None) -> Path:
        """The cached blob for ``desc``, downloading it if needed (waits for another
        process that is downloading the same blob)."""
        final = self.path(desc.digest)
        if final.is_file():
            if progress:
                progress(desc.size)
            return final
        lock = SharedLock(self.dir / f"{_hex(desc.digest)}.lock")
        if not lock.acquire(done=final.is_file):
            if progress:
                progress(desc.size)
            return final
        try:
            if final.is_file():
                if progress:
                    progress(desc.size)
                return final
            blob = self.blob(desc.digest)
            if not blob.is_file():
                self._download(client, desc, blob, progress)
            elif progress:
                progress(desc.size)
            self._decompress(blob, final, desc.digest)
            return final
        finally:
            lock.release()

    def _decompress(self, blob: Path, final: Path, digest: str) -> None:
        tmp = final.with_name(final.name + ".tmp")
        try:
            with open(blob, "rb") as src:
                magic = src.read(4)
                src.seek(0)
                if magic[:2] == b"\x1f\x8b":
                    with open(tmp, "wb") as out:
                        _gunzip(src, out, digest)
                elif magic == b"\x28\xb5\x2f\xfd":
                    exe = shutil.which("zstd")
                    if exe is None:
                        raise SquallError(f"layer {digest} is zstd-compressed and zstd is not "
                                          "installed: apt install zstd")
                    with open(tmp, "wb") as out:
                        proc = subprocess.run([exe, "-dc"], stdin=src, stdout=out,
                                              stderr=subprocess.PIPE, check=False)
                    if proc.returncode != 0:
                        raise SquallError(f"layer {digest} is not valid zstd data: the image "
                                          "is corrupt; re-push it")
                else:
                    os.rename(blob, final)
                    _fsync_dir(self.dir)
                    return
            os.rename(tmp, final)
            blob.unlink()
            _fsync_dir(self.dir)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise _disk_error(exc, final) from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _download(self, client: RegistryClient, desc: Descriptor, final: Path,
                  progress: Progress | None) -> Path:
        partial = final.with_name(final.name + ".partial")
        delay = 0.5
        mismatches = 0
        for attempt in range(client.retries):
            try:
                self._download_once(client, desc, partial, progress)
            except _Retry as exc:
                if attempt + 1 >= client.retries:
                    raise SquallError(f"download of {desc.digest} from {client.name} kept "
                                      f"failing ({exc}): check the network and try again") from None
                time.sleep(delay)
                delay *= 2
                continue
            except _Mismatch as exc:
                partial.unlink(missing_ok=True)
                mismatches += 1
                if mismatches >= 2:
                    raise SquallError(
                        f"digest mismatch for layer {desc.digest} from {client.name}: the data "
                        f"hashes to {exc}; the registry served corrupt or tampered content, "
                        "nothing was published") from None
                continue
            try:
                os.rename(partial, final)
                _fsync_dir(self.dir)
            except OSError as exc:
                raise _disk_error(exc, final) from None
            return final
        raise SquallError(f"download of {desc.digest} from {client.name} failed: try again")

    def _download_once(self, client: RegistryClient, desc: Descriptor, partial: Path,
                       progress: Progress | None) -> None:
        hasher = hashlib.sha256()
        have = 0
        if partial.exists():
            with open(partial, "rb") as f:
                while chunk := f.read(CHUNK):
                    hasher.update(chunk)
                    have += len(chunk)
            if desc.size and have > desc.size:
                partial.unlink()
                hasher, have = hashlib.sha256(), 0
        if desc.size and have == desc.size:
            resp = None
        else:
            resp = client.open_blob(desc.digest, have)
            if resp.status_code == 416 or (have and resp.status_code == 200):
                # the registry cannot resume: start over
                resp.close()
                hasher, have = hashlib.sha256(), 0
                resp = client.open_blob(desc.digest, 0)
        if progress and have:
            progress(have)
        try:
            with open(partial, "ab" if have else "wb") as out:
                if resp is not None:
                    try:
                        for chunk in resp.iter_content(CHUNK):
                            out.write(chunk)
                            hasher.update(chunk)
                            if progress:
                                progress(len(chunk))
                    except (requests.RequestException, ConnectionError) as exc:
                        out.flush()
                        raise _Retry(type(exc).__name__) from None
                    finally:
                        resp.close()
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise _disk_error(exc, partial) from None
        got = "sha256:" + hasher.hexdigest()
        if got != desc.digest:
            raise _Mismatch(got)

    def fetch_all(self, client: RegistryClient, descs: list[Descriptor], jobs: int = 4,
                  progress: Progress | None = None) -> list[Path]:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(descs) or 1))) as pool:
            return [f.result() for f in self.submit_all(pool, client, descs, progress)]

    def submit_all(self, pool: ThreadPoolExecutor, client: RegistryClient,
                   descs: list[Descriptor], progress: Progress | None = None
                   ) -> list[Future[Path]]:
        """Start every download; the top layer first, since the merge reads it first."""
        futures: dict[Descriptor, Future[Path]] = {}
        for d in reversed(descs):
            if d not in futures:
                futures[d] = pool.submit(self.fetch, client, d, progress)
        return [futures[d] for d in descs]


def _gunzip(src, out, digest: str) -> None:  # type: ignore[no-untyped-def]
    """Decompress (possibly multi-member) gzip; zlib releases the GIL, so the download
    threads decompress layers in parallel."""
    d = zlib.decompressobj(wbits=47)
    try:
        while chunk := src.read(CHUNK):
            while chunk:
                out.write(d.decompress(chunk))
                if d.eof:
                    chunk = d.unused_data
                    d = zlib.decompressobj(wbits=47)
                else:
                    chunk = b""
        out.write(d.flush())
    except zlib.error as exc:
        raise SquallError(f"layer {digest} is not valid gzip data ({exc}): the image is "
                          "corrupt; re-push it") from None


class _Retry(Exception):
    pass


class _Mismatch(Exception):
    pass
