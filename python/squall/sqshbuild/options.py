"""What one build is asked (:class:`BuildOptions`) and what it answers (:class:`BuildResult`).

Apart from :mod:`.build` so that the modules it calls (:mod:`.caches`, :mod:`.pinning`,
:mod:`.buildlock`) take the options without importing the orchestrator back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squall.sqshbuild.deputy import Deputy
from squall.sqshbuild.progress import Reporter
from squall.sqshbuild.squash import SquashOptions


@dataclass
class BuildOptions:
    cache_dir: Path | None = None
    output: Path | None = None
    arch: str = ""
    squash: SquashOptions = field(default_factory=SquashOptions)
    insecure: tuple[str, ...] = ()
    jobs: int = 0  # parallel downloads; 0 = build.default_jobs()
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
