"""A fault-injecting HTTP proxy in front of a real docker-registry (test helper).

Requests are forwarded to the registry unless a rule matches first. A rule matches a path
regex and fires ``times`` times (None: always), then the request is forwarded again:

* ``("status", code, retry_after)``: answer ``code`` with an optional ``Retry-After``;
* ``("status-endless", code)``: answer ``code`` with an endless chunked body;
* ``("stall",)``: read the request and never answer;
* ``("endless",)``: answer 200 and send bytes forever (chunked, no length);
* ``("trickle", interval)``: forward, but send the body a byte every ``interval`` seconds
  (never silent for a whole read timeout, never done);
* ``("rate", bytes_per_second)``: forward, no faster than that (a slow link, which ends);
* ``("replace", body, content_type[, pause])``: answer 200 with this body instead of
  upstream's (with ``pause``: its first half, a pause of that many seconds, the rest).

Every request is logged as (monotonic time, path, what was done).
"""

from __future__ import annotations

import http.server
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import requests

ENDLESS_LIMIT = 2 << 30  # stop an endless body after 2 GiB, so a broken test cannot hang


@dataclass
class Rule:
    pattern: str
    action: tuple[Any, ...]
    times: int | None = 1

    def take(self, path: str) -> bool:
        if self.times == 0 or not re.search(self.pattern, path):
            return False
        if self.times is not None:
            self.times -= 1
        return True


@dataclass
class FaultProxy:
    upstream: str
    rules: list[Rule] = field(default_factory=list)
    log: list[tuple[float, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stopping = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self, "GET")

            def do_HEAD(self) -> None:
                proxy._handle(self, "HEAD")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add(self, pattern: str, *action: Any, times: int | None = 1) -> None:
        self.rules.append(Rule(pattern, tuple(action), times))

    def hits(self, pattern: str) -> list[tuple[float, str, str]]:
        return [e for e in self.log if re.search(pattern, e[1])]

    def close(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- serving ------------------------------------------------------------------------------
    def _handle(self, h: http.server.BaseHTTPRequestHandler, method: str) -> None:
        rule = next((r for r in self.rules if r.take(h.path)), None)
        kind = rule.action[0] if rule else "forward"
        self.log.append((time.monotonic(), h.path, kind))
        try:
            if rule is None:
                self._forward(h, method)
            elif kind == "trickle":
                self._forward(h, method, trickle=rule.action[1])
            elif kind == "rate":
                self._forward(h, method, rate=rule.action[1])
            elif kind == "status":
                code, retry_after = rule.action[1], rule.action[2]
                body = b'{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}'
                h.send_response(code)
                if retry_after is not None:
                    h.send_header("Retry-After", str(retry_after))
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)
            elif kind == "status-endless":
                h.send_response(rule.action[1])
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                self._endless(h)
            elif kind == "stall":
                while not self.stopping.wait(0.2):
                    pass
                h.close_connection = True
            elif kind == "endless":
                h.send_response(200)
                h.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                self._endless(h)
            elif kind == "replace":
                body, ctype = rule.action[1], rule.action[2]
                h.send_response(200)
                h.send_header("Content-Type", ctype)
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                if len(rule.action) > 3:
                    h.wfile.write(body[:len(body) // 2])
                    h.wfile.flush()
                    time.sleep(rule.action[3])
                    body = body[len(body) // 2:]
                h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True

    def _endless(self, h: http.server.BaseHTTPRequestHandler) -> None:
        chunk = b" " * (64 << 10)
        frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        sent = 0
        while sent < ENDLESS_LIMIT and not self.stopping.is_set():
            h.wfile.write(frame)
            sent += len(chunk)
        h.close_connection = True

    def _forward(self, h: http.server.BaseHTTPRequestHandler, method: str,
                 trickle: float = 0.0, rate: int = 0) -> None:
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "connection")}
        try:
            resp = requests.request(method, f"{self.upstream}{h.path}", headers=headers,
                                    stream=True, allow_redirects=False, timeout=30)
        except requests.RequestException:
            h.send_response(502)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        h.send_response(resp.status_code)
        for k, v in resp.raw.headers.items():
            if k.lower() not in ("connection", "transfer-encoding"):
                h.send_header(k, v)
        h.end_headers()
        if method == "HEAD":
            return
        for chunk in resp.raw.stream(64 << 10, decode_content=False):
            if rate:
                if self.stopping.wait(len(chunk) / rate):
                    return
                h.wfile.write(chunk)
                h.wfile.flush()
                continue
            if not trickle:
                h.wfile.write(chunk)
                continue
            for i in range(len(chunk)):
                if self.stopping.wait(trickle):
                    return
                h.wfile.write(chunk[i:i + 1])
                h.wfile.flush()


def silent_server() -> tuple[socket.socket, str]:
    """A listening socket that accepts connections (the kernel does) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s, f"127.0.0.1:{s.getsockname()[1]}"
