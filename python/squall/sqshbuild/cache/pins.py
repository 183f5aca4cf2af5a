"""Job pins: a tag resolved once per job.

``pins/<job>-<sha256 of reference and platform>.json`` holds the manifest digest the job's
first resolution of a tag gave. The plugin names the job (``sqshbuild build --job``:
cluster, user and job id), so every node, every later step, every failover attempt and
every requeue of the job (Slurm keeps the job id) runs that digest, and the registry is
asked once per job instead of once per node per step. A pin is written under its own lock
by the cache's writers only (root and the builder in the shared cache, a user in the
user's own), read like every other record (:meth:`ImageCache.read_json`: a planted or
malformed file counts as absent), and removed by ``sqshbuild gc`` after ``MAX_AGE``.
The build's side, who resolves and who waits: :mod:`squall.sqshbuild.pinning`.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from squall.errors import SquallError
from squall.sqshbuild.cache.image_cache import ImageCache, write_json
from squall.sqshbuild.cache.layout import entry_name
from squall.sqshbuild.lock import SharedLock

# Slurm job ids wrap after 67,108,863 jobs; a pin this old belongs to no running job.
MAX_AGE = 60 * 86400
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_job(job: str) -> str:
    if not _JOB.fullmatch(job):
        raise SquallError(f"--job {job!r}: a job key is 1 to 128 letters, digits, '.', '_' or "
                          "'-' (the plugin passes CLUSTER-UID-JOBID)")
    return job


@dataclass(frozen=True)
class JobPin:
    job: str
    reference: str  # canonical, with its tag
    platform: str

    @property
    def name(self) -> str:
        key = hashlib.sha256(f"{self.reference}\0{self.platform}".encode()).hexdigest()[:32]
        return f"{self.job}-{key}"

    def path(self, cache: ImageCache) -> Path:
        return cache.root / "pins" / f"{self.name}.json"

    def lock(self, cache: ImageCache) -> SharedLock:
        return SharedLock(cache.root / "locks" / f"pin-{self.name}.lock", trust=cache.trust)

    def read(self, caches: Iterable[ImageCache]) -> str | None:
        """The pinned digest from the first cache that holds a trusted, well-formed pin."""
        for cache in caches:
            path = self.path(cache)
            data = cache.read_json(path, "job pin")
            if data is None:
                continue
            digest = data.get("digest")
            if data.get("reference") != self.reference or not isinstance(digest, str):
                cache.malformed(path, "job pin", "it names another image or no digest")
                continue
            try:
                entry_name(digest)
            except SquallError:
                cache.malformed(path, "job pin", "its digest is not a sha256 digest")
                continue
            return digest
        return None

    def write(self, cache: ImageCache, digest: str, host: str) -> None:
        record = {"job": self.job, "reference": self.reference, "platform": self.platform,
                  "digest": digest, "pinned": time.time(), "host": host}
        try:
            write_json(cache, self.path(cache), record, fsync=True)
        except OSError as exc:
            raise SquallError(f"cannot record the job's pin in {self.path(cache).parent}: "
                              f"{exc.strerror}; free space there or check its owner") from None


def expired(cache: ImageCache, now: float | None = None) -> list[Path]:
    """Pins older than MAX_AGE (by their file's time), for gc to remove."""
    now = time.time() if now is None else now
    out: list[Path] = []
    for p in sorted((cache.root / "pins").glob("*.json")):
        try:
            if now - p.lstat().st_mtime > MAX_AGE:
                out.append(p)
        except OSError:
            continue
    return out
