"""The site's configuration of the builder: one file that every sqshbuild run reads, the
plugin's builds included (their environment is built from nothing, so a variable cannot
reach them) (docs/security.md).

``/etc/squall/sqshbuild.toml`` (``SQSHBUILD_SITE_CONFIG`` names another, for tests and
for a user's own runs), TOML, every key optional::

    [limits]
    max_blob_size = "16G"        # one layer as downloaded
    max_inflated_size = "64G"    # one layer as unpacked
    max_image_size = "64G"       # all the layers of one image, by its manifest
    cache_size = "2T"            # the shared cache: least recently used images go past it
    user_share = "200G"          # what the builder adds to the shared cache for one user
    user_share_window = "24h"    # ... in this window

    [credentials]
    # repositories the builder's credentials may be spent on for any user's step:
    # REGISTRY (every repository on it) or REGISTRY/REPOSITORY-PREFIX
    shared = ["nvcr.io/nvidia", "mirror.internal:5000"]

A variable (``SQSHBUILD_MAX_BLOB_SIZE`` ...) may lower a limit for one run, never raise it
above the file's. The file must be a regular file of root's (or the caller's) that nobody
else may write, not a link; any other file, an unknown key or a bad value stops the build
with one line naming the file and the key: a site's bounds are never dropped silently.
"""

from __future__ import annotations

import functools
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild.cache.layout import parse_size
from squall.sqshbuild.safefs import read_trusted

SITE_ENV = "SQSHBUILD_SITE_CONFIG"
SITE_FILE = Path("/etc/squall/sqshbuild.toml")
_FILE_LIMIT = 64 << 10

# Defaults for a cluster: the largest layers of NGC's framework images are a few GB, so
# 16 GiB refuses nothing real and bounds a blob that names no size to a quarter of the
# 64 GiB an earlier squall allowed.
DEFAULTS: dict[str, int] = {
    "max_blob_size": 16 << 30,
    "max_inflated_size": 64 << 30,
    "max_image_size": 64 << 30,
    "cache_size": 0,              # 0: no automatic eviction (gc --max-size by hand)
    "user_share": 200 << 30,
    "user_share_window": 24 * 3600,
}
_DURATION = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Site:
    """The parsed file: ``limits`` holds only what the file set."""

    path: Path | None = None
    limits: dict[str, int] = field(default_factory=dict)
    shared: tuple[str, ...] = ()

    def limit(self, key: str, env: str = "") -> tuple[int, str]:
        """The value in force for ``key`` and what sets it (for messages): the variable
        ``env`` when it is set and not above the file's value, else the file, else the
        default."""
        from squall.sqshbuild.transport import env_size  # transport imports this module

        raw = os.environ.get(env, "").strip() if env else ""
        mine = self.limits.get(key)
        where = f"{key} in {self.path}"
        if raw:
            wanted = env_size(env, 0)
            if mine is None or wanted <= mine:
                return wanted, env
            return mine, where
        if mine is not None:
            return mine, where
        return DEFAULTS[key], env or f"{key} (set it in {SITE_FILE})"

    def shares_credentials(self, registry: str, repository: str) -> bool:
        """The site declared ``registry/repository`` open to every user: the builder may
        spend its credentials on it for any user's step."""
        for scope in self.shared:
            reg, _, prefix = scope.partition("/")
            if reg != registry:
                continue
            if not prefix or repository == prefix or repository.startswith(prefix + "/"):
                return True
        return False


def _duration(raw: object, where: str) -> int:
    text = str(raw).strip().lower()
    unit = _DURATION.get(text[-1:], 0)
    number = text[:-1] if unit else text
    try:
        value = int(float(number) * (unit or 1))
    except ValueError:
        value = 0
    if value <= 0:
        raise SquallError(f"{where} = {raw!r} is not a duration: give e.g. 24h, 90m or a "
                          "number of seconds")
    return value


def _size(raw: object, where: str) -> int:
    try:
        value = raw if isinstance(raw, int) else parse_size(str(raw))
    except SquallError:
        value = -1
    if not isinstance(value, int) or value < 0 or isinstance(value, bool):
        raise SquallError(f"{where} = {raw!r} is not a size: give e.g. 16G, 500M or a number "
                          "of bytes")
    return value


def _limits(table: object, path: Path) -> dict[str, int]:
    if not isinstance(table, dict):
        raise SquallError(f"{path}: [limits] must be a table of sizes")
    out: dict[str, int] = {}
    for key, raw in table.items():
        where = f"{path}: limits.{key}"
        if key not in DEFAULTS:
            raise SquallError(f"{where} is not a setting: use one of "
                              f"{', '.join(sorted(DEFAULTS))} (docs/security.md)")
        out[key] = _duration(raw, where) if key.endswith("_window") else _size(raw, where)
    return out


def _shared(table: object, path: Path) -> tuple[str, ...]:
    where = f"{path}: credentials.shared"
    scopes = table.get("shared", []) if isinstance(table, dict) else None
    unknown = set(table) - {"shared"} if isinstance(table, dict) else set()
    if scopes is None or unknown:
        raise SquallError(f"{path}: [credentials] holds only shared = [\"REGISTRY[/REPO]\", "
                          "...] (docs/security.md)")
    if not isinstance(scopes, list) or not all(isinstance(s, str) and s.strip("/ ")
                                               for s in scopes):
        raise SquallError(f"{where} must be a list of \"REGISTRY[/REPOSITORY]\" strings")
    return tuple(s.strip().rstrip("/") for s in scopes)


def parse(data: bytes, path: Path) -> Site:
    try:
        doc: dict[str, Any] = tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SquallError(f"{path} is not valid TOML: {exc}") from None
    unknown = set(doc) - {"limits", "credentials"}
    if unknown:
        raise SquallError(f"{path}: [{sorted(unknown)[0]}] is not a section: use [limits] "
                          "and [credentials] (docs/security.md)")
    return Site(path, _limits(doc.get("limits", {}), path),
                _shared(doc.get("credentials", {}), path))


def path() -> Path:
    return Path(os.environ.get(SITE_ENV) or SITE_FILE)


@functools.lru_cache(maxsize=4)
def _load(where: Path) -> Site:
    data = read_trusted(where, f"the site configuration {where}", _FILE_LIMIT,
                        missing_ok=True, follow=False)
    return Site() if data is None else parse(data, where)


def load() -> Site:
    """The site's configuration in force for this run (an empty one when there is no file)."""
    return _load(path())
