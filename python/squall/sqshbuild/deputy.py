"""The builder working for a user (``sqshbuild build --for-user NAME``, as the plugin runs
it): it does for her only what she could do herself, and no more of it than the site
allows her (docs/security.md, "The builder as a service").

* **Credentials**: the builder's own are spent only on repositories the site declared open
  to every user (``[credentials] shared`` in the site file); anything else is pulled
  anonymously, and what needs credentials is refused with exit status 3, on which the
  plugin builds it as the user, with her credentials, in her own cache. A cached image that
  was pulled with credentials is served to her only when the declaration covers it: by tag
  and by digest alike.
* **Names that mean the same on every node**: a loopback, link-local or node-local registry
  is a different registry on each node; its images are never shared (exit status 3).
* **Her share**: the bytes the builder adds to the shared cache for one user in a window
  (``user_share`` / ``user_share_window``); a build beyond it is refused (exit status 3:
  built in her own cache) and says so.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild import site as site_conf
from squall.sqshbuild.cache.image_cache import ImageCache, write_json
from squall.sqshbuild.credentials import split_port
from squall.sqshbuild.refs import Source
from squall.sqshbuild.registry import Refused
from squall.sqshbuild.transport import human

_USER = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}")
SHARES_DIR = "shares"
_MAX_GRANTS = 1000  # one ledger stays a small file whatever the window


def _addresses(host: str) -> list[str]:
    """The addresses ``host`` names: itself when it is one, else what the resolver says
    (the build resolves it anyway to connect; a name that does not resolve fails there)."""
    host = host.strip("[]")
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        return list({str(ai[4][0]) for ai in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError):
        return []


def node_local(registry: str) -> str:
    """Why ``registry`` names something of this node alone ('' when it does not): the same
    name reaches another registry, or none, on every other node."""
    host = split_port(registry)[0].strip("[]").lower()
    if host in ("localhost", socket.gethostname().lower(),
                socket.gethostname().split(".")[0].lower()):
        return f"{host} is this node's own name"
    for addr in _addresses(host):
        ip = ipaddress.ip_address(addr.split("%")[0])
        if ip.is_loopback:
            return f"{host} is a loopback address" if addr == host else \
                f"{host} resolves to the loopback address {addr}"
        if ip.is_link_local:
            return f"{host} is a link-local address ({addr})"
    return ""


@dataclass
class Deputy:
    """The rules of one build for ``user`` by the builder."""

    user: str
    site: site_conf.Site = field(default_factory=site_conf.load)

    @classmethod
    def named(cls, user: str) -> Deputy:
        if not _USER.fullmatch(user):
            raise SquallError(f"--for-user {user!r} is not a user name")
        return cls(user)

    # -- credentials ----------------------------------------------------------------------
    def anonymous(self, registry: str, repository: str) -> str:
        """'' when the builder's credentials may be spent on this repository for any user,
        else why not (said when the registry asks for credentials)."""
        if self.site.shares_credentials(registry, repository):
            return ""
        where = self.site.path or site_conf.SITE_FILE
        return (f"the builder's credentials are not shared for {registry}/{repository} "
                f"(credentials.shared in {where})")

    def check_reference(self, src: Source) -> None:
        why = node_local(src.registry)
        if why:
            raise Refused(f"{src.canonical} names a registry on this node only ({why}): its "
                          "images are never shared between users; building it as "
                          f"{self.user}, in that user's own cache")

    def check_hit(self, cache: ImageCache, src: Source, digest: str, variant: str) -> None:
        """A cached image pulled with credentials is hers only when the site shares them
        for where it came from."""
        side = cache.read_sidecar(digest, variant) or {}
        pulled = side.get("pulled_with_credentials")
        if not isinstance(pulled, dict):
            return
        registry, repo = str(pulled.get("registry", "")), str(pulled.get("repository", ""))
        if not self.site.shares_credentials(registry, repo):
            raise Refused(f"{src.canonical} ({digest}) is in the shared cache because it was "
                          f"pulled with credentials for {registry}/{repo}, which the site "
                          f"does not share with every user: building it as {self.user}, "
                          "with that user's own credentials")

    # -- the share ------------------------------------------------------------------------
    def _ledger(self, cache: ImageCache) -> Path:
        return cache.root / SHARES_DIR / f"{self.user}.json"

    def _grants(self, cache: ImageCache, now: float, window: int) -> list[list[Any]]:
        data = cache.read_json(self._ledger(cache), "share ledger") or {}
        grants = data.get("grants")
        if not isinstance(grants, list):
            return []
        return [g for g in grants if isinstance(g, list) and len(g) == 3
                and isinstance(g[0], int | float) and isinstance(g[1], int)
                and now - window <= g[0] <= now + 3600][-_MAX_GRANTS:]

    def check_share(self, cache: ImageCache, adding: int, src: Source) -> None:
        """Refuse (exit status 3) a build that would take the user past her share."""
        share, setting = self.site.limit("user_share")
        window, _ = self.site.limit("user_share_window")
        if share <= 0:
            return
        used = sum(g[1] for g in self._grants(cache, time.time(), window))
        if used + adding > share:
            raise Refused(f"{src.canonical} would add {human(adding)} to the shared cache for "
                          f"{self.user}, who has had {human(used)} of the {human(share)} "
                          f"allowed in {window // 3600 or 1} h ({setting}): building it as "
                          f"{self.user}, in that user's own cache")

    def charge(self, cache: ImageCache, added: int, digest: str) -> None:
        """Count ``added`` bytes against the user (best effort: a lost record only gives
        her more room, never less)."""
        if added <= 0 or not cache.writable:
            return
        window, _ = self.site.limit("user_share_window")
        now = time.time()
        grants = self._grants(cache, now, window) + [[now, added, digest]]
        try:  # shares/ is one of the cache's own directories (cache/layout.py)
            write_json(cache, self._ledger(cache),
                       {"user": self.user, "grants": grants[-_MAX_GRANTS:]}, fsync=False)
        except OSError:
            pass
