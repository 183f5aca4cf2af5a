"""No one holds others hostage (issue 39): a build waiting for another's download of a
layer pulls it from its own source when that one trickles or stalls.

Her manifest names a popular base layer with ``size: 0`` and her registry (a proxy of the
tests' registry on loopback) sends it at 4 KiB/s, or not at all; the build serving her
holds the layer's lock. Another build needs the same layer for its own image from the
tests' registry, with a stall window of 2 s (``SQSHBUILD_TIMEOUT``): it must finish in
seconds with a correct image, its progress lines naming whom it waited for and how fast
that one went; the holder, when it finishes or is killed, must leave no partial file and
the layer the waiter placed whole (same file, same bytes).
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
from conftest import run_env, sqshbuild_cmd
from imagekit import Image, layer, sha
from sqfs import cat

pytestmark = pytest.mark.registry
RATE = 4096
WINDOW = "2"  # the waiter's stall window (s)
LINE = re.compile(r"^sqshbuild: progress: (.*)$", re.M)


class HerRegistry:
    """The tests' registry as her registry serves it: her manifest gives ``slow`` no size,
    and ``slow``'s bytes come at ``rate`` bytes a second (0: none after the headers)."""

    def __init__(self, upstream: str, slow: str, rate: int) -> None:
        self.upstream, self.slow, self.rate = upstream, slow, rate
        self.stopping = threading.Event()
        self.sending = threading.Event()  # the slow blob's answer has begun
        her = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                try:
                    her.serve(self)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    self.close_connection = True

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def serve(self, h: http.server.BaseHTTPRequestHandler) -> None:
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "connection")}
        resp = requests.get(f"{self.upstream}{h.path}", headers=headers, timeout=30)
        body = resp.content
        if "/manifests/" in h.path and resp.ok:
            doc = json.loads(body)
            for d in doc.get("layers", []):
                if d["digest"] == self.slow:
                    d["size"] = 0
            body = json.dumps(doc).encode()
        h.send_response(resp.status_code)
        for k, v in resp.headers.items():
            if k.lower() not in ("connection", "transfer-encoding", "content-length",
                                 "docker-content-digest", "content-encoding"):
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if self.slow not in h.path:
            h.wfile.write(body)
            return
        h.wfile.flush()
        self.sending.set()
        piece = max(1, self.rate // 8)
        for i in range(0, len(body), piece):
            if self.stopping.wait(piece / self.rate if self.rate else 3600):
                return
            h.wfile.write(body[i:i + piece])
            h.wfile.flush()

    def close(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def images(registry) -> tuple[bytes, str, str]:
    """(the base layer, her reference's repository, the other's reference)."""
    tag = uuid.uuid4().hex[:8]
    base = layer(("dir", "etc"), ("file", "etc/base-release", "base\n"),
                 ("file", "etc/noise", os.urandom(120 << 10)))  # 30 s at 4 KiB/s
    hers = Image([base, layer(("file", "hers", "her app\n"))], {"Cmd": ["x"]})
    other = Image([base, layer(("file", "other", "the other app\n"))], {"Cmd": ["x"]})
    registry.pusher.push(f"hostage/her-{tag}", "v1", hers)
    registry.pusher.push(f"hostage/other-{tag}", "v1", other)
    return base, f"hostage/her-{tag}:v1", f"{registry.host}/hostage/other-{tag}:v1"


def start(args: list[str], home: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*sqshbuild_cmd(), *args], env={**run_env(home), **env},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def pulling(lock: Path, holder: subprocess.Popen[str], her: HerRegistry,
            timeout: float = 20) -> None:
    """Until the holder holds the layer's lock and her registry has begun to send it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and holder.poll() is None:
        if lock.exists() and her.sending.is_set():
            return
        time.sleep(0.05)
    if holder.poll() is None:
        holder.kill()
    raise AssertionError(f"the holder never said it pulls the layer: {holder.communicate()}")


def leftovers(layers: Path) -> list[str]:
    """What is in the layer directory besides layers, markers and configs."""
    return sorted(p.name for p in layers.iterdir()
                  if not re.fullmatch(r"[0-9a-f]{64}\.(tar|ok|config)", p.name))


@pytest.fixture
def scene(registry, cache_dir, clean_env):
    base, her_repo, other_ref = images(registry)
    servers: list[HerRegistry] = []
    procs: list[subprocess.Popen[str]] = []

    def her(rate: int) -> tuple[str, HerRegistry]:
        servers.append(HerRegistry(registry.base, sha(base), rate))
        return f"{servers[-1].host}/{her_repo}", servers[-1]

    def run(args: list[str], **env: str) -> subprocess.Popen[str]:
        procs.append(start(["--json", "--cache-dir", str(cache_dir), *args], clean_env, **env))
        return procs[-1]

    yield base, her, other_ref, run, cache_dir
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.communicate()
    for s in servers:
        s.close()


@pytest.mark.parametrize("rate", [RATE, 0], ids=["trickle", "silent"])
def test_a_waiter_pulls_around_a_holder_that_trickles(scene, rate):
    base, her, other_ref, run, cache = scene
    hexd = sha(base).split(":")[1]
    layers = cache / "layers" / "sha256"
    ref, server = her(rate)
    holder = run(["--progress-every", "1", ref], SQSHBUILD_TIMEOUT="5")
    pulling(layers / f"{hexd}.lock", holder, server)
    began = time.monotonic()
    waiter = run(["--progress-every", "0.5", other_ref], SQSHBUILD_TIMEOUT=WINDOW)
    out, err = waiter.communicate(timeout=60)
    took = time.monotonic() - began
    if os.environ.get("SHOW_LINES"):
        print(f"WAITER took {took:.1f} s\n{err}")
    assert waiter.returncode == 0, err
    assert took < 15, (took, err)
    image = Path(json.loads(out.strip().splitlines()[-1])["path"])
    assert cat(image, "etc/base-release") == "base\n"
    assert cat(image, "other") == "the other app\n"

    host, short = socket.gethostname(), sha(base)[:19]
    said = LINE.findall(err)
    waits = [m for m in said if m.startswith(f"{host} waits for layer {short}, pulled by ")]
    assert waits, err
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert all(f"pulled by {me} on {host} (pid {holder.pid})" in m for m in waits), waits
    rate_said = r": [\d.]+ (B|KiB) of ([\d.]+ KiB|\?), [\d.]+ (B|KiB)/s$"
    assert any(re.search(rate_said, m) for m in waits), waits
    note = [ln for ln in err.splitlines() if "note: layer " + short in ln]
    assert len(note) == 1 and f"(pid {holder.pid})" in note[0], err
    assert "pulls it from" in note[0] and "itself" in note[0], note

    tar, ok = layers / f"{hexd}.tar", layers / f"{hexd}.ok"
    truth = hashlib.sha256(gzip.decompress(base)).hexdigest()
    placed = tar.stat().st_ino
    assert ok.exists() and hashlib.sha256(tar.read_bytes()).hexdigest() == truth

    hout, herr = holder.communicate(timeout=60)
    assert holder.returncode == 0, herr
    assert cat(Path(json.loads(hout.strip().splitlines()[-1])["path"]),
               "etc/base-release") == "base\n"
    assert tar.stat().st_ino == placed, "the holder replaced the waiter's layer"
    assert hashlib.sha256(tar.read_bytes()).hexdigest() == truth
    assert leftovers(layers) == [], leftovers(layers)
    assert "Traceback" not in err + herr


def test_a_holder_killed_after_the_waiter_placed_the_layer_leaves_it_whole(scene):
    base, her, other_ref, run, cache = scene
    hexd = sha(base).split(":")[1]
    layers = cache / "layers" / "sha256"
    ref, server = her(RATE)
    holder = run([ref], SQSHBUILD_TIMEOUT="5")
    pulling(layers / f"{hexd}.lock", holder, server)
    waiter = run([other_ref], SQSHBUILD_TIMEOUT=WINDOW)
    _out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    tar = layers / f"{hexd}.tar"
    placed, truth = tar.stat().st_ino, hashlib.sha256(tar.read_bytes()).hexdigest()
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=30)
    gc = subprocess.run([*sqshbuild_cmd(), "gc", "--json", "--max-size", "1T", "--cache-dir",
                         str(cache)], env=run_env(Path(os.environ["HOME"])),
                        capture_output=True, text=True, timeout=60)
    assert gc.returncode == 0, gc.stderr
    # a lock the holder was killed with may stay (gc takes it only to remove a partial
    # download; the next holder takes it over): it is the dead holder's, and nothing else
    lock = layers / f"{hexd}.lock"
    assert leftovers(layers) in ([], [lock.name]), leftovers(layers)
    assert not lock.exists() or json.loads(lock.read_text())["pid"] == holder.pid
    assert tar.stat().st_ino == placed
    assert hashlib.sha256(tar.read_bytes()).hexdigest() == truth
    # her next build reads the layer that is there: nothing from her slow registry
    again = run([her(RATE)[0]])
    out, err = again.communicate(timeout=30)
    assert again.returncode == 0, err
    assert cat(Path(json.loads(out.strip().splitlines()[-1])["path"]), "hers") == "her app\n"
