"""Registry credentials and the token dance.

Credentials, first match wins, for the registry host (with and without port):
1. Enroot's credentials file, ``$ENROOT_CONFIG_PATH/.credentials`` (default
   ``~/.config/enroot/.credentials``), netrc lines ``machine HOST login USER password PASS``;
   ``$VAR`` or ``${VAR}`` in the password is taken from the environment, as Enroot does.
2. Docker's ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``), ``auths``
   entries with ``auth`` (base64 ``user:password``) or ``username``/``password``.
3. nvcr.io: user ``$oauthtoken`` with the API key from ``NGC_API_KEY``.

When the reference names a user (``USER@REGISTRY#IMAGE``), only credentials for that user
are used. Bearer challenges (``WWW-Authenticate: Bearer realm=...,service=...,scope=...``)
are answered by fetching a token from the realm, with Basic credentials when there are
some; Basic challenges are answered with the credentials directly.
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from squall.errors import SquallError

NVCR = "nvcr.io"
NGC_USER = "$oauthtoken"
NGC_KEY_ENV = "NGC_API_KEY"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    origin: str  # where they came from, for error messages

    def basic_header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()


def _hosts(registry: str) -> list[str]:
    hosts = [registry]
    if ":" in registry:
        hosts.append(registry.rsplit(":", 1)[0])
    if registry == "registry-1.docker.io":
        hosts += ["docker.io", "index.docker.io", "https://index.docker.io/v1/"]
    return hosts


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _expand(value: str) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return os.environ.get(name, m.group(0))
    return _VAR.sub(repl, value)


def enroot_credentials_path() -> Path:
    base = os.environ.get("ENROOT_CONFIG_PATH")
    if not base:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        base = os.path.join(xdg, "enroot")
    return Path(base) / ".credentials"


def _from_netrc(path: Path, hosts: list[str], user: str) -> Credentials | None:
    try:
        words = path.read_text().split()
    except OSError:
        return None
    entries: list[dict[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("machine", "default"):
            entries.append({"machine": words[i + 1] if word == "machine" and i + 1 < len(words)
                            else ""})
            i += 2 if word == "machine" else 1
            continue
        if word in ("login", "password", "account") and entries and i + 1 < len(words):
            entries[-1][word] = words[i + 1]
            i += 2
            continue
        i += 1
    for entry in entries:
        if entry.get("machine") not in hosts or "login" not in entry:
            continue
        if user and entry["login"] != user:
            continue
        return Credentials(entry["login"], _expand(entry.get("password", "")), str(path))
    return None


def _from_docker_config(hosts: list[str], user: str) -> Credentials | None:
    base = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
    path = Path(base) / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        host = re.sub(r"^https?://", "", key).rstrip("/")
        if key not in hosts and host not in hosts and host.split("/")[0] not in hosts:
            continue
        if not isinstance(entry, dict):
            continue
        username, password = entry.get("username"), entry.get("password")
        if entry.get("auth"):
            try:
                raw = base64.b64decode(entry["auth"], validate=True).decode()
                username, _, password = raw.partition(":")
            except (ValueError, UnicodeDecodeError):
                raise SquallError(f"{path}: the 'auth' entry for {key} is not base64 of "
                                  "user:password; run 'docker login' again") from None
        if username and password is not None and (not user or user == username):
            return Credentials(username, password, str(path))
    return None


def find_credentials(registry: str, user: str = "") -> Credentials | None:
    hosts = _hosts(registry)
    found = _from_netrc(enroot_credentials_path(), hosts, user)
    if found is None:
        found = _from_docker_config(hosts, user)
    if found is None and registry.split(":")[0] == NVCR and user in ("", NGC_USER):
        key = os.environ.get(NGC_KEY_ENV)
        if key:
            found = Credentials(NGC_USER, key, f"${NGC_KEY_ENV}")
    return found


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "bearer" or "basic"
    params: dict[str, str]


_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def parse_challenge(header: str) -> Challenge | None:
    """Parse a ``WWW-Authenticate`` value; None if there is no usable scheme."""
    header = header.strip()
    if not header:
        return None
    scheme, _, rest = header.partition(" ")
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
              for m in _PARAM.finditer(rest)}
    return Challenge(scheme.lower(), params)
