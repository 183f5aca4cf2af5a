"""Mirrors, pull-through caches, blocked registries and short names from
``containers-registries.conf(5)`` (the file podman, buildah, skopeo and CRI-O read).

Files, as containers/image reads them: ``$CONTAINERS_REGISTRIES_CONF`` alone when set;
otherwise ``$HOME/.config/containers/registries.conf`` if it exists, else
``/etc/containers/registries.conf``, then the drop-ins (``*.conf``, in name order) of
``/etc/containers/registries.conf.d`` (only with the system file) and
``$HOME/.config/containers/registries.conf.d``. A drop-in replaces the
``unqualified-search-registries`` it sets and the ``[[registry]]`` tables of the same prefix.

Per image, the ``[[registry]]`` table whose ``prefix`` (default: its ``location``) is the
longest match of ``HOST/REPOSITORY`` is used (``*.example.com`` matches sub-domains): its
``location`` replaces the prefix, ``blocked = true`` refuses the image, ``insecure = true``
allows plain HTTP; its ``[[registry.mirror]]`` tables (``location``, ``insecure``,
``pull-from-mirror`` = ``all`` | ``digest-only`` | ``tag-only``; the older
``mirror-by-digest-only``) are tried in order, then the origin. Whatever answers, the
manifest digest (when the reference names one) and every blob digest are checked, so a
mirror can never change an image. Docker Hub is ``docker.io`` here, as in the format.
"""

from __future__ import annotations

import os
import re
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import requests

from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild.refs import DOCKER_HUB, Source
from squall.sqshbuild.registry import Manifest, RegistryClient
from squall.sqshbuild.transport import CONFIG_CAP

T = TypeVar("T")

ENV = "CONTAINERS_REGISTRIES_CONF"
SYSTEM_CONF = Path("/etc/containers/registries.conf")
PULL_MODES = ("all", "digest-only", "tag-only")


@dataclass(frozen=True)
class Mirror:
    location: str
    insecure: bool = False
    pull_from_mirror: str = "all"


@dataclass
class RegistryTable:
    prefix: str
    location: str
    insecure: bool = False
    blocked: bool = False
    mirrors: list[Mirror] = field(default_factory=list)
    origin: str = ""  # the file it came from


@dataclass
class RegistriesConf:
    registries: dict[str, RegistryTable] = field(default_factory=dict)  # by prefix
    search: list[str] | None = None
    files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Endpoint:
    """Where to ask for an image: a mirror or the origin."""

    registry: str  # host[:port], Docker Hub as registry-1.docker.io
    repository: str
    insecure: bool
    mirror: bool
    pull: str = "all"  # a mirror's pull-from-mirror

    def serves(self, by_digest: bool) -> bool:
        return self.pull == "all" or (self.pull == "digest-only") == by_digest


def config_files() -> list[Path]:
    explicit = os.environ.get(ENV)
    if explicit:
        return [Path(explicit)]
    home = Path(os.path.expanduser("~")) / ".config" / "containers"
    if (home / "registries.conf").is_file():
        files, dirs = [home / "registries.conf"], [home / "registries.conf.d"]
    else:
        files = [SYSTEM_CONF]
        dirs = [SYSTEM_CONF.with_name("registries.conf.d"), home / "registries.conf.d"]
    for d in dirs:
        try:
            files += sorted(p for p in d.iterdir() if p.suffix == ".conf" and p.is_file())
        except OSError:
            pass
    return files


def _bool(table: dict[str, Any], key: str, where: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise SquallError(f"{where}: {key} must be true or false, not {value!r}")
    return value


def _str(table: dict[str, Any], key: str, where: str) -> str:
    value = table.get(key, "")
    if not isinstance(value, str):
        raise SquallError(f"{where}: {key} must be a string, not {value!r}")
    return value.strip().rstrip("/")


def _registry_table(raw: Any, path: Path, n: int) -> RegistryTable:
    where = f"{path}: [[registry]] #{n}"
    if not isinstance(raw, dict):
        raise SquallError(f"{where} is not a table")
    location, prefix = _str(raw, "location", where), _str(raw, "prefix", where)
    if not location and not prefix:
        raise SquallError(f"{where} has neither location nor prefix: give one")
    default_pull = "digest-only" if _bool(raw, "mirror-by-digest-only", where) else "all"
    mirrors = []
    for m, mraw in enumerate(raw.get("mirror") or [], 1):
        mwhere = f"{where} mirror #{m}"
        if not isinstance(mraw, dict) or not _str(mraw, "location", mwhere):
            raise SquallError(f"{mwhere} has no location")
        mode = _str(mraw, "pull-from-mirror", mwhere) or default_pull
        if mode not in PULL_MODES:
            raise SquallError(f"{mwhere}: pull-from-mirror must be one of "
                              f"{', '.join(PULL_MODES)}, not {mode!r}")
        mirrors.append(Mirror(_str(mraw, "location", mwhere), _bool(mraw, "insecure", mwhere),
                              mode))
    return RegistryTable(prefix or location, location or prefix, _bool(raw, "insecure", where),
                         _bool(raw, "blocked", where), mirrors, str(path))


def _merge(conf: RegistriesConf, path: Path) -> None:
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SquallError(f"cannot read {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SquallError(f"{path} is not valid TOML ({exc}): fix it "
                          "(see containers-registries.conf(5))") from None
    conf.files.append(str(path))
    search = doc.get("unqualified-search-registries")
    if search is not None:
        if not isinstance(search, list) or not all(isinstance(s, str) for s in search):
            raise SquallError(f"{path}: unqualified-search-registries must be a list of "
                              "host[:port] strings")
        conf.search = [s.strip() for s in search if s.strip()]
    v1 = doc.get("registries")
    if isinstance(v1, dict):  # version 1: [registries.search] / .insecure / .block
        for kind in ("search", "insecure", "block"):
            names = (v1.get(kind) or {}).get("registries") or []
            if kind == "search":
                conf.search = [str(n) for n in names]
                continue
            for name in names:
                t = conf.registries.setdefault(str(name), RegistryTable(str(name), str(name)))
                t.insecure |= kind == "insecure"
                t.blocked |= kind == "block"
    tables = doc.get("registry") or []
    if not isinstance(tables, list):
        raise SquallError(f"{path}: write [[registry]] (an array of tables)")
    for n, raw in enumerate(tables, 1):
        table = _registry_table(raw, path, n)
        conf.registries[table.prefix] = table


def load() -> RegistriesConf:
    conf = RegistriesConf()
    for path in config_files():
        _merge(conf, path)
    return conf


def hub_name(registry: str) -> str:
    """The format's name for a registry: Docker Hub is docker.io."""
    return "docker.io" if registry == DOCKER_HUB else registry


def api_host(host: str) -> str:
    return DOCKER_HUB if host in ("docker.io", "index.docker.io") else host


def _matches(prefix: str, name: str) -> int:
    """Length of the match of ``prefix`` on ``name`` (HOST/REPO), 0 if none."""
    if prefix.startswith("*."):
        host = name.split("/", 1)[0]
        return len(host) if host.endswith(prefix[1:]) else 0
    if name == prefix or (name.startswith(prefix) and name[len(prefix)] in "/:@"):
        return len(prefix)
    return 0


def find_table(conf: RegistriesConf, name: str) -> tuple[RegistryTable, int] | None:
    best: tuple[RegistryTable, int] | None = None
    for table in conf.registries.values():
        n = _matches(table.prefix, name)
        if n and (best is None or n > best[1]):
            best = (table, n)
    return best


def _split(name: str, insecure: bool, mirror: bool, pull: str = "all") -> Endpoint:
    host, _, repo = name.partition("/")
    host = api_host(host)
    if host == DOCKER_HUB and repo and "/" not in repo:
        repo = f"library/{repo}"
    return Endpoint(host, repo, insecure, mirror, pull)


def endpoints(conf: RegistriesConf, registry: str, repository: str) -> list[Endpoint]:
    """Mirrors to try in order, then the origin (last); raises if the registry is
    blocked. A mirror's ``pull`` says whether it serves tags, digests or both."""
    name = f"{hub_name(registry)}/{repository}"
    found = find_table(conf, name)
    if found is None:
        return [Endpoint(registry, repository, False, False)]
    table, n = found
    if table.blocked:
        raise SquallError(f"registry {hub_name(registry)} is blocked for {name} by "
                          f"{table.origin} (prefix {table.prefix!r}): pull from an allowed "
                          "registry or mirror, or ask the site's administrators")
    rest = name[n:] if not table.prefix.startswith("*.") else name[len(name.split("/")[0]):]
    out = []
    for m in table.mirrors:
        out.append(_split(m.location + rest, m.insecure, True, m.pull_from_mirror))
    location = table.location if not table.prefix.startswith("*.") else name.split("/")[0]
    out.append(_split(location + rest, table.insecure, False))
    return out


_DOMAIN = re.compile(r"[.:]|^localhost$")


def is_short_name(text: str) -> bool:
    """A name without a registry (``ubuntu:24.04``, ``team/app``), the kind
    ``unqualified-search-registries`` applies to; Enroot's ``docker://`` forms are not."""
    text = text.strip()
    if "://" in text or "#" in text or "@" in text.split("/")[0]:
        return False
    first, sep, _ = text.partition("/")
    return not (sep and _DOMAIN.search(first))


def search_candidates(src: Source, conf: RegistriesConf) -> list[Source]:
    """For a short name, the same image on each of ``unqualified-search-registries`` in
    order (Docker Hub when the files set none); otherwise just ``src``."""
    if src.kind != "registry" or not conf.search or not is_short_name(src.text):
        return [src]
    repo = src.repository.removeprefix("library/") if src.registry == DOCKER_HUB else \
        src.repository
    out = []
    for host in conf.search:
        ep = _split(f"{host}/{repo}", False, False)
        out.append(Source(kind="registry", text=src.text, registry=ep.registry,
                          repository=ep.repository, tag=src.tag, digest=src.digest,
                          user=src.user))
    return out


# -- the client that tries mirrors, then the origin --------------------------------------------
class MirroredClient(RegistryClient):
    """The origin's client, which asks its mirrors first (manifests and every blob), and
    moves on to the next source on any failure, a wrong digest included."""

    def __init__(self, origin: Endpoint, user: str, insecure: set[str],
                 mirrors: list[Endpoint], anonymous: Anonymous | None = None) -> None:
        def why(ep: Endpoint) -> str:
            return anonymous(ep.registry, ep.repository) if anonymous else ""
        super().__init__(origin.registry, origin.repository, user,
                         insecure | ({origin.registry} if origin.insecure else set()),
                         anonymous=why(origin))
        self._mirrors = [(RegistryClient(ep.registry, ep.repository, "",
                                         insecure | ({ep.registry} if ep.insecure else set()),
                                         anonymous=why(ep)),
                          ep) for ep in mirrors]
        self._active: list[RegistryClient] = [c for c, _ in self._mirrors] + [self]
        self._next: dict[str, int] = {}
        self._blob_lock = threading.Lock()

    def sources(self) -> list[RegistryClient]:
        return list(self._active)

    @property
    def credentialed(self) -> bool:
        """Some source was sent a password, or a token got with one."""
        return self.used_credentials or any(c.used_credentials for c, _ in self._mirrors)

    def resolve(self, reference: str, arch: str) -> Manifest:
        by_digest = reference.startswith("sha256:")
        self._active = [c for c, ep in self._mirrors if ep.serves(by_digest)] + [self]
        return self._first(lambda c: (super(MirroredClient, self).resolve(reference, arch)
                                      if c is self else c.resolve(reference, arch)),
                           f"manifest {reference}")

    def _first(self, call: Callable[[RegistryClient], T], what: str, start: int = 0,
               digest: str = "") -> T:
        failed: list[tuple[RegistryClient, SquallError]] = []
        for i, client in enumerate(self._active[start:], start):
            try:
                result = call(client)
            except SquallError as exc:
                failed.append((client, exc))
                if digest:
                    with self._blob_lock:
                        self._next[digest] = i + 1
                continue
            if client is not self:
                log.info("%s from mirror %s", what, client.registry)
            return result
        if not failed:
            raise SquallError(f"every source of {self.name} failed for {what}: try again")
        last_client, last = failed[-1]
        also = "; ".join(f"mirror {c.registry}: {e}" for c, e in failed[:-1])
        raise type(last)(f"{last}" + (f" (also tried {also})" if also else ""))

    def open_blob(self, digest: str, offset: int = 0) -> requests.Response:
        start = self._next.get(digest, 0)
        return self._first(lambda c: (super(MirroredClient, self).open_blob(digest, offset)
                                      if c is self else c.open_blob(digest, offset)),
                           f"blob {digest}", start, digest)

    def get_blob(self, digest: str, cap: int = CONFIG_CAP) -> bytes:
        start = self._next.get(digest, 0)
        return self._first(lambda c: (super(MirroredClient, self).get_blob(digest, cap)
                                      if c is self else c.get_blob(digest, cap)),
                           f"blob {digest}", start, digest)

    def blob_failed(self, digest: str) -> bool:
        with self._blob_lock:
            nxt = self._next.get(digest, 0) + 1
            if nxt >= len(self._active):
                return False
            self._next[digest] = nxt
            return True


# For a build for another user: None when the builder's credentials may be used for that
# registry and repository, else why not (RegistryClient's ``anonymous``).
Anonymous = Callable[[str, str], str]


def open_client(src: Source, insecure: set[str], conf: RegistriesConf | None = None,
                anonymous: Anonymous | None = None) -> RegistryClient:
    """The client for a registry source: with its mirrors when registries.conf has some."""
    conf = load() if conf is None else conf
    *mirrors, origin = endpoints(conf, src.registry, src.repository)
    why = anonymous(origin.registry, origin.repository) if anonymous else ""
    if not mirrors:
        extra = {origin.registry} if origin.insecure else set()
        return RegistryClient(origin.registry, origin.repository, src.user, insecure | extra,
                              anonymous=why)
    return MirroredClient(origin, src.user, insecure, mirrors, anonymous)
