"""Fixtures: Debian's docker-registry on loopback (anonymous, Bearer token, Basic), a token
server, and a counting, throttling proxy. Everything listens on 127.0.0.1 only."""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent))
from imagekit import Pusher  # noqa: E402

from gate import missing, skip_unless  # noqa: E402

REGISTRY_BIN = "/usr/bin/docker-registry"
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.registry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Registry:
    host: str
    storage: Path
    log: Path
    proc: subprocess.Popen[bytes]
    pusher: Pusher
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://{self.host}"

    def blob_gets(self) -> Counter[str]:
        """GET /v2/.../blobs/sha256:X requests answered, from the registry's access log."""
        counts: Counter[str] = Counter()
        for line in self.log.read_text(errors="replace").splitlines():
            m = re.search(r'"GET /v2/\S+/blobs/(sha256:[0-9a-f]{64}) HTTP', line)
            if m:
                counts[m.group(1)] += 1
        return counts

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_registry(tmp: Path, auth: dict | None = None, pusher_auth=None,
                   token_url: str | None = None, proxy: str | None = None) -> Registry:
    """A docker-registry on loopback; with ``proxy``, a pull-through cache of that URL."""
    skip_unless(os.path.exists(REGISTRY_BIN), f"{REGISTRY_BIN} is not installed",
                "apt-get install docker-registry")
    port = free_port()
    storage = tmp / "storage"
    storage.mkdir(parents=True)
    cfg = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": uuid.uuid4().hex},
    }
    if auth:
        cfg["auth"] = auth
    if proxy:
        cfg["proxy"] = {"remoteurl": proxy}
    cfg_path = tmp / "config.yml"
    cfg_path.write_text(json.dumps(cfg))  # JSON is YAML
    log = tmp / "registry.log"
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(cfg_path)], stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {log.read_text()[-2000:]}")
        try:
            requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("docker-registry did not start")
    return Registry(f"127.0.0.1:{port}", storage, log, proc,
                    Pusher(f"http://127.0.0.1:{port}", pusher_auth, token_url))


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


# -- Bearer token auth ------------------------------------------------------------------------
TOKEN_USER, TOKEN_PASSWORD = "alice", "s3cret-token-pw"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """A minimal Docker token server: Basic-checks alice, signs RS256 JWTs with x5c."""

    def __init__(self, tmp: Path) -> None:
        try:
            import cryptography  # noqa: F401
        except ImportError:
            missing("the cryptography Python module is not installed", "pip install cryptography")
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
        from cryptography.x509.oid import NameOID

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "squall-test-token")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(self.key, hashes.SHA256()))
        self.cert_path = tmp / "token-cert.pem"
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
        self._sign = lambda data: self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        self.requests: list[dict[str, str]] = []
        self.port = free_port()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                from urllib.parse import parse_qs, urlparse
                q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
                auth = self.headers.get("Authorization", "")
                user = ""
                if auth.startswith("Basic "):
                    u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
                    if (u, p) != (TOKEN_USER, TOKEN_PASSWORD):
                        self.send_response(401)
                        self.end_headers()
                        return
                    user = u
                server.requests.append({"user": user, **q})
                if not user:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"token": server.token(q.get("scope", ""), user)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def token(self, scope: str, user: str) -> str:
        access = []
        for s in scope.split():
            parts = s.split(":")
            if len(parts) >= 3 and parts[0] == "repository":
                access.append({"type": "repository", "name": ":".join(parts[1:-1]),
                               "actions": parts[-1].split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {"iss": "squall-test-issuer", "sub": user, "aud": "squall-test",
                  "exp": now + 600, "nbf": now - 10, "iat": now, "jti": uuid.uuid4().hex,
                  "access": access}
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        return f"{signing}.{_b64(self._sign(signing.encode()))}"


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("token-registry")
    server = TokenServer(tmp)
    auth = {"token": {"realm": server.realm, "service": "squall-test",
                      "issuer": "squall-test-issuer", "rootcertbundle": str(server.cert_path)}}
    reg = start_registry(tmp, auth, pusher_auth=(TOKEN_USER, TOKEN_PASSWORD),
                         token_url=server.realm)
    reg.extra["token_server"] = server
    yield reg
    reg.stop()
    server.httpd.shutdown()


# -- Basic auth (htpasswd, bcrypt) ------------------------------------------------------------
BASIC_USER, BASIC_PASSWORD = "bob", "basic-pw-123"


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory):
    try:
        import bcrypt
    except ImportError:
        missing("the bcrypt Python module is not installed", "pip install bcrypt")
    tmp = tmp_path_factory.mktemp("basic-registry")
    htpasswd = tmp / "htpasswd"
    hashed = bcrypt.hashpw(BASIC_PASSWORD.encode(), bcrypt.gensalt(rounds=5)).decode()
    htpasswd.write_text(f"{BASIC_USER}:{hashed}\n")
    auth = {"htpasswd": {"realm": "squall-basic", "path": str(htpasswd)}}
    reg = start_registry(tmp, auth, pusher_auth=(BASIC_USER, BASIC_PASSWORD))
    yield reg
    reg.stop()


# -- counting, throttling proxy ---------------------------------------------------------------
class Proxy:
    """Forwards to a registry, counting blob GETs (and Range requests) and manifest
    requests (GET and HEAD, by the tag or digest asked for); optionally slow."""

    def __init__(self, upstream: str, rate: float = 0.0) -> None:
        self.upstream = upstream
        self.rate = rate  # bytes per second for blob bodies; 0 = unlimited
        self.gets: Counter[str] = Counter()
        self.manifests: Counter[str] = Counter()
        self.manifest_delay = 0.0  # seconds each manifest answer waits (a slow registry)
        self.ranges: list[tuple[str, str]] = []
        self.cut: dict[str, int] = {}  # digest -> close the connection after N body bytes, once
        self.cut_pause = 0.0  # seconds the cut connection stays open after its last byte
        self.no_range = False  # drop Range headers: the upstream answers 200, the whole blob
        self.port = free_port()
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _forward(self, method: str) -> None:
                asked = re.search(r"/manifests/([^/?]+)$", self.path)
                if asked:
                    with proxy.lock:
                        proxy.manifests[asked.group(1)] += 1
                    time.sleep(proxy.manifest_delay)
                m = re.search(r"/blobs/(sha256:[0-9a-f]{64})", self.path)
                if m and method == "GET":
                    proxy.gets[m.group(1)] += 1
                    if self.headers.get("Range"):
                        proxy.ranges.append((m.group(1), self.headers["Range"]))
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection")}
                if proxy.no_range:
                    headers = {k: v for k, v in headers.items() if k.lower() != "range"}
                try:
                    resp = requests.request(method, f"{proxy.upstream}{self.path}",
                                            headers=headers, stream=True,
                                            allow_redirects=False, timeout=30)
                except requests.RequestException:
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(resp.status_code)
                for k, v in resp.raw.headers.items():
                    if k.lower() not in ("connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.end_headers()
                if method == "HEAD":
                    return
                cut = proxy.cut.pop(m.group(1), None) if m and method == "GET" else None
                sent = 0
                try:
                    for chunk in resp.raw.stream(64 * 1024, decode_content=False):
                        if cut is not None and sent + len(chunk) >= cut:
                            self.wfile.write(chunk[:cut - sent])
                            self.wfile.flush()
                            time.sleep(proxy.cut_pause)
                            self.close_connection = True
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        self.wfile.write(chunk)
                        sent += len(chunk)
                        if proxy.rate and m:
                            time.sleep(len(chunk) / proxy.rate)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass

            def do_GET(self):
                self._forward("GET")

            def do_HEAD(self):
                self._forward("HEAD")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def proxy(registry):
    p = Proxy(registry.base)
    yield p
    p.close()


@pytest.fixture
def faulty(registry):
    """A fault-injecting proxy in front of the registry (faults.py); a module may define
    its own ``faulty`` with another proxy (test_registry_bounds.py)."""
    from faults import FaultProxy
    p = FaultProxy(registry.base)
    yield p
    p.close()


@pytest.fixture
def place():
    """A directory every user can reach, with homes (tests/registry/users.py)."""
    from users import make_place, remove_place
    d = make_place()
    yield d
    remove_place(d)


@pytest.fixture
def cache_dir(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    return d


BUILDER = "sqtest-builder"


def builder_account() -> int:
    """The builder identity the packages create (squall-builder), here a system account of
    the tests' own, made once (root only): its uid."""
    import pwd
    try:
        return pwd.getpwnam(BUILDER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", BUILDER], check=True, capture_output=True)
        return pwd.getpwnam(BUILDER).pw_uid


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """No credentials from the machine running the tests; the tests' builder account named
    (SQSHBUILD_BUILDER) when running as root, as /etc/squall/builder names it on a node."""
    if os.geteuid() == 0:
        builder_account()
        monkeypatch.setenv("SQSHBUILD_BUILDER", BUILDER)
    else:
        monkeypatch.setenv("SQSHBUILD_BUILDER", "none")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "home" / ".docker"))
    monkeypatch.setenv("ENROOT_CONFIG_PATH", str(tmp_path / "home" / ".config" / "enroot"))
    monkeypatch.delenv("NGC_API_KEY", raising=False)
    monkeypatch.delenv("SQSHBUILD_CACHE", raising=False)
    monkeypatch.delenv("SQSHBUILD_LAYER_CACHE", raising=False)
    (tmp_path / "home").mkdir(exist_ok=True)
    return tmp_path / "home"


def run_sqshbuild(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``sqshbuild ARGS`` in a process of its own, with ``env``."""
    return subprocess.run([*sqshbuild_cmd(), *args], env=env, capture_output=True, text=True,
                          timeout=120)


def write_credentials(home: Path, text: str, mode: int | None = None) -> Path:
    """Enroot's credentials file in ``home`` (its mode left to the umask unless given)."""
    path = home / ".config" / "enroot" / ".credentials"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def sqshbuild_cmd() -> list[str]:
    return [sys.executable, "-c", "from squall.sqshbuild.cli import main; main()"]


def run_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["HOME"] = str(home)
    env["DOCKER_CONFIG"] = str(home / ".docker")
    env["ENROOT_CONFIG_PATH"] = str(home / ".config" / "enroot")
    env.pop("NGC_API_KEY", None)
    return env


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one ``sqshbuild: error:`` line a failed run ends with (never a traceback)."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("sqshbuild: error: "), proc.stderr
    return last
