"""A failed build's record, for the builds that waited for it.

When the build holding an image's lock fails (the registry stalls past the deadline,
refuses, the disk is full), it writes ``locks/<entry>.failed`` (host, pid, the error line)
before it lets the lock go. A build that was waiting for that lock sees the record change
and fails at once with the same cause, instead of taking the lock and trying in turn: at N
nodes a stalled pull would otherwise cost N deadlines one after the other. A build that
comes later (a new step, a retry) tries again. The next success removes the record.
Records are read like every other record of the cache (trusted owner, bounded).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from squall.errors import SquallError
from squall.sqshbuild import safefs
from squall.sqshbuild.cache.image_cache import ImageCache, write_json
from squall.sqshbuild.cache.layout import entry_name


def _state(path: Path) -> tuple[int, int] | None:
    st = safefs.lstat(path)
    return (st.st_ino, st.st_mtime_ns) if st is not None else None


@dataclass
class BuildFailures:
    cache: ImageCache
    digest: str
    variant: str = ""
    seen: tuple[int, int] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.seen = _state(self.path)  # a failure before this build waited is not its own

    @property
    def path(self) -> Path:
        return self.cache.root / "locks" / f"{entry_name(self.digest, self.variant)}.failed"

    def new(self) -> dict[str, object] | None:
        """The record of a failure since this build began to wait, when trusted."""
        now = _state(self.path)
        if now is None or now == self.seen:
            return None
        return self.cache.read_json(self.path, "build failure record")

    def error(self, reference: str, record: dict[str, object]) -> SquallError:
        return SquallError(f"{reference}: the build on {record.get('host', '?')} that this "
                           f"one waited for failed: {record.get('error', '?')} (a later "
                           "step or job tries again)")

    def record(self, exc: SquallError) -> None:
        """Best effort: the build's own error is the one that matters."""
        try:
            write_json(self.cache, self.path, {"host": socket.gethostname(), "pid": os.getpid(),
                                               "time": time.time(), "error": str(exc)[:2000]},
                       fsync=False)
        except OSError:
            pass

    def clear(self) -> None:
        st = safefs.lstat(self.path)
        if st is not None and not self.cache.trust.why_not_file(st):
            try:
                self.path.unlink()
            except OSError:
                pass
