"""Where registry credentials come from; first match wins (docs/registries.md).

1. Enroot's ``$ENROOT_CONFIG_PATH/.credentials`` (default ``~/.config/enroot/.credentials``),
   netrc ``machine HOST login USER password PASS``, read as Enroot reads it: on a line of
   at least six words whose sixth (the password) starts with ``$``, the rest of the line is
   given to the shell as ``echo REST`` (so ``$VAR``, ``${VAR}`` and ``$(command)`` all work,
   e.g. ``password $(aws ecr get-login-password --region us-east-1)``), as the user running
   sqshbuild, with a timeout (``SQSHBUILD_CREDENTIALS_TIMEOUT``, 30 s). Unlike Enroot, only
   the entry of the registry being asked is evaluated, and only once it asks for credentials.
2. Docker's ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``), in Docker's
   order: ``credHelpers[HOST]``, then ``credsStore``, both through the credential helper
   protocol (``docker-credential-NAME get``, the server on stdin, ``{"Username", "Secret"}``
   on stdout; Docker Hub is asked for as ``https://index.docker.io/v1/``), then ``auths``
   (``auth`` = base64 ``user:password``, or ``username``/``password``).
3. nvcr.io: user ``$oauthtoken`` with the key in ``NGC_API_KEY``.

A secret is never put in a message. What a password command or a credential helper prints,
on stdout or stderr, is never quoted (it may hold the secret: a helper that prints its JSON
and fails): an error names the command and its exit status only. Every secret found is
remembered, and :func:`redact` takes it out of any text that might hold one. A credentials
file that other users can read gets one note naming it and the fix (``chmod 600``).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from squall.errors import SquallError
from squall.log import log
from squall.sqshbuild import jsonbound

NVCR = "nvcr.io"
NGC_USER = "$oauthtoken"
NGC_KEY_ENV = "NGC_API_KEY"
TIMEOUT_ENV = "SQSHBUILD_CREDENTIALS_TIMEOUT"
DOCKER_HUB_SERVER = "https://index.docker.io/v1/"
IDENTITY_TOKEN_USER = "<token>"  # a helper's way of returning an OAuth2 refresh token
FILE_CAP = 4 << 20  # a credentials file larger than this is not one

_SECRETS: set[str] = set()
_NOTED: set[str] = set()  # files already named as readable by others, in this run


def remember_secret(secret: str) -> None:
    if len(secret) >= 3:
        _SECRETS.add(secret)


def redact(text: str) -> str:
    """``text`` with every secret seen so far replaced by ``***``."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class Credentials:
    """A user name and a secret, resolved at most once, when first needed."""

    def __init__(self, origin: str, username: str = "", password: str = "",
                 resolve: Callable[[], tuple[str, str]] | None = None) -> None:
        self.origin = origin  # where they come from, for messages
        self._pair: tuple[str, str] | None = None if resolve else (username, password)
        self._resolve = resolve
        self._username = username
        if password:
            remember_secret(password)

    def _get(self) -> tuple[str, str]:
        if self._pair is None:
            assert self._resolve is not None
            user, secret = self._resolve()
            remember_secret(secret)
            self._pair = (user or self._username, secret)
        return self._pair

    @property
    def username(self) -> str:
        return self._username if self._pair is None and self._username else self._get()[0]

    @property
    def password(self) -> str:
        return self._get()[1]

    @property
    def identity_token(self) -> bool:
        return self.username == IDENTITY_TOKEN_USER

    def basic_header(self) -> str:
        user, secret = self._get()
        return "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()

    def __repr__(self) -> str:
        return f"Credentials(user={self._username or '?'!r}, from {self.origin})"

    __str__ = __repr__


def split_port(registry: str) -> tuple[str, str]:
    """``host:5000`` -> (host, 5000); ``host`` and ``[::1]`` -> (host, "")."""
    host, sep, port = registry.rpartition(":")
    if sep and port.isdigit() and (not host.startswith("[") or host.endswith("]")):
        return host, port
    return registry, ""


def hosts_for(registry: str) -> list[str]:
    """The names a credentials entry may use for ``registry``: exactly its host and port.
    An entry without a port is for the registry's default port alone (HTTPS, 443): the
    builder's password for ``host`` never goes to a server on another port of that host."""
    host, port = split_port(registry)
    hosts = [registry]
    if not port:
        hosts.append(f"{host}:443")
    elif port == "443":
        hosts.append(host)
    if registry == "registry-1.docker.io":
        hosts += ["docker.io", "index.docker.io", DOCKER_HUB_SERVER]
    return hosts


def _timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "30")
    try:
        value = float(raw)
    except ValueError:
        raise SquallError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    return value if value > 0 else 30.0


def read_private(path: Path) -> tuple[str, int] | None:
    """The text and mode of the credentials file ``path`` (None when there is none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        data = os.read(fd, FILE_CAP + 1)
        while len(data) <= FILE_CAP and (more := os.read(fd, FILE_CAP + 1 - len(data))):
            data += more
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > FILE_CAP:
        raise SquallError(f"{path} is larger than {FILE_CAP} bytes: it is not a credentials "
                          "file; fix or remove it")
    return data.decode(errors="replace"), stat.S_IMODE(st.st_mode)


def note_readable(path: Path, mode: int) -> None:
    """One note per file and run when users other than its owner may read it (group or
    others: mode & 0o044): a warning with the fix, never an error."""
    if mode & 0o044 and str(path) not in _NOTED:
        _NOTED.add(str(path))
        log.warning("note: the credentials file %s can be read by other users (mode %04o): "
                    "chmod 600 %s", path, mode, path)


def run_secret_command(argv: list[str], stdin: str, what: str) -> tuple[int, str, str]:
    """Run a credentials command as this user; (status, stdout, stderr). Raises a one-line
    error on a timeout or when it cannot start."""
    limit = _timeout()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        raise SquallError(f"{what} could not start: {exc.strerror}") from None
    try:
        out, err = proc.communicate(stdin, timeout=limit)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        raise SquallError(f"{what} did not finish within {limit:g} s: check it by hand "
                          f"(the limit is {TIMEOUT_ENV})") from None
    return proc.returncode, out, err


# -- Enroot's credentials file ----------------------------------------------------------------
def enroot_credentials_path() -> Path:
    base = os.environ.get("ENROOT_CONFIG_PATH")
    if not base:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        base = os.path.join(xdg, "enroot")
    return Path(base) / ".credentials"


@dataclass(frozen=True)
class _Evaluated:
    """A password Enroot gives to the shell: ``echo REST`` (REST: the line after 5 words)."""

    rest: str
    line: int


_WORD = re.compile(r"\S+")


def _tokens(text: str) -> list[str | _Evaluated]:
    tokens: list[str | _Evaluated] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        words = list(_WORD.finditer(line))
        if len(words) >= 6 and words[5].group().startswith("$"):
            tokens += [w.group() for w in words[:5]]
            tokens.append(_Evaluated(line[words[5].start():].rstrip(), lineno))
        else:
            tokens += [w.group() for w in words]
    return tokens


def _evaluate(value: _Evaluated, path: Path) -> str:
    what = f"the password command on line {value.line} of {path}"
    rc, out, _ = run_secret_command(["/bin/sh", "-c", f"echo {value.rest}"], "", what)
    words = out.split()
    # never what it printed: its stderr may hold the secret too
    if rc != 0:
        raise SquallError(f"{what} failed with exit status {rc}: run it by hand to see why")
    if not words:
        raise SquallError(f"{what} printed no password: run it by hand to see why")
    return words[0]


def _evaluated_credentials(path: Path, login: str, value: _Evaluated) -> Credentials:
    return Credentials(str(path), login, resolve=lambda: (login, _evaluate(value, path)))


def _from_netrc(path: Path, hosts: list[str], user: str) -> Credentials | None:
    got = read_private(path)
    if got is None:
        return None
    text, mode = got
    note_readable(path, mode)  # Enroot's file is for secrets, whatever this one holds
    tokens = _tokens(text)
    entries: list[dict[str, str | _Evaluated]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok == "default":
            entries.append({"machine": ""})
            i += 1
        elif tok in ("machine", "login", "password", "account") and nxt is not None:
            if tok == "machine":
                entries.append({"machine": nxt})
            elif entries:
                entries[-1][str(tok)] = nxt
            i += 2
        else:
            i += 1
    for entry in entries:
        login = entry.get("login")
        if entry.get("machine") not in hosts or not isinstance(login, str):
            continue
        if user and login != user:
            continue
        password = entry.get("password", "")
        if isinstance(password, _Evaluated):
            return _evaluated_credentials(path, login, password)
        return Credentials(str(path), login, password)
    return None


# -- Docker's config.json ---------------------------------------------------------------------
def docker_config_path() -> Path:
    base = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
    return Path(base) / "config.json"


def _helper_get(name: str, server: str, origin: str) -> tuple[str, str] | None:
    """``docker-credential-NAME get``: None when it has nothing for ``server``."""
    exe = f"docker-credential-{name}"
    what = f"the credential helper {exe} (from {origin})"
    path = shutil.which(exe)
    if path is None:
        raise SquallError(f"{what} is not found on PATH: install it or fix {origin}")
    rc, out, err = run_secret_command([path, "get"], server + "\n", what)
    if rc != 0:
        if "credentials not found" in (out + err).lower():
            return None
        # never what it printed: a helper may print its JSON, secret and all, and fail
        raise SquallError(f"{what} failed for {server} with exit status {rc}: run "
                          f"'{exe} get' by hand (the server on its input) to see why")
    try:
        doc = jsonbound.loads(out, f"{what}'s answer")
        user, secret = doc.get("Username", ""), doc.get("Secret", "")
    except (SquallError, AttributeError):
        raise SquallError(f"{what} printed no JSON for {server}: check the helper") from None
    if not isinstance(user, str) or not isinstance(secret, str) or not secret:
        return None
    remember_secret(secret)
    return user, secret


def _helper_credentials(name: str, hosts: list[str], user: str,
                        origin: str) -> Credentials | None:
    server = DOCKER_HUB_SERVER if DOCKER_HUB_SERVER in hosts else hosts[0]
    if user:  # the user name is known only once the helper ran
        got = _helper_get(name, server, origin)
        if got is None or got[0] != user:
            return None
        return Credentials(f"{origin} (docker-credential-{name})", got[0], got[1])

    def resolve() -> tuple[str, str]:
        got = _helper_get(name, server, origin)
        if got is None:
            raise SquallError(f"docker-credential-{name} (from {origin}) has no credentials "
                              f"for {server}: run 'docker login {hosts[0]}'")
        return got
    return Credentials(f"{origin} (docker-credential-{name})", resolve=resolve)


def _auths_entry(auths: dict[str, object], hosts: list[str], user: str,
                 path: Path) -> Credentials | None:
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
        if entry.get("identitytoken") and not password:
            username, password = IDENTITY_TOKEN_USER, entry["identitytoken"]
        if username and isinstance(password, str) and password and \
                (not user or user == username):
            return Credentials(str(path), str(username), password)
    return None


def _holds_secrets(auths: dict[str, object]) -> bool:
    keys = ("auth", "password", "identitytoken", "registrytoken")
    return any(isinstance(e, dict) and any(e.get(k) for k in keys) for e in auths.values())


def _from_docker_config(hosts: list[str], user: str) -> Credentials | None:
    path = docker_config_path()
    read = read_private(path)
    if read is None:
        return None
    try:
        data = jsonbound.loads(read[0], str(path))
    except SquallError:
        return None
    if not isinstance(data, dict):
        return None
    auths = data.get("auths")
    auths = auths if isinstance(auths, dict) else {}
    if _holds_secrets(auths):  # the names of helpers alone are no secret
        note_readable(path, read[1])
    helpers = data.get("credHelpers")
    if isinstance(helpers, dict):
        for host in hosts:
            name = helpers.get(host)
            if isinstance(name, str) and name:
                return _helper_credentials(name, hosts, user, str(path))
    store = data.get("credsStore")
    if isinstance(store, str) and store:
        server = DOCKER_HUB_SERVER if DOCKER_HUB_SERVER in hosts else hosts[0]
        got = _helper_get(store, server, str(path))
        if got is not None and (not user or got[0] == user):
            return Credentials(f"{path} (docker-credential-{store})", got[0], got[1])
    return _auths_entry(auths, hosts, user, path)


def find_credentials(registry: str, user: str = "") -> Credentials | None:
    """Credentials for ``registry`` (``host[:port]``), for ``user`` if one is named."""
    hosts = hosts_for(registry)
    found = _from_netrc(enroot_credentials_path(), hosts, user)
    if found is None:
        found = _from_docker_config(hosts, user)
    if found is None and registry.split(":")[0] == NVCR and user in ("", NGC_USER):
        key = os.environ.get(NGC_KEY_ENV)
        if key:
            found = Credentials(f"${NGC_KEY_ENV}", NGC_USER, key)
    return found
