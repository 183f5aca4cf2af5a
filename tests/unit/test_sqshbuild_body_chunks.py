"""Blob bodies as transport.body_chunks reads them, from a real HTTP server on loopback:
whole chunks while every byte is counted as it arrives, and a body that ends short of its
Content-Length (the server closed the connection) is a broken connection, not a blob."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
import requests

from squall.sqshbuild.transport import body_chunks

BODY = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture
def server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            short = self.path == "/short"
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[:len(BODY) // 3] if short else BODY)
            self.wfile.flush()
            self.close_connection = True

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_whole_chunks_and_every_byte_counted(server):
    counted: list[int] = []
    resp = requests.get(f"{server}/whole", stream=True, timeout=10)
    chunks = list(body_chunks(resp, 300_000, counted.append))
    assert b"".join(chunks) == BODY
    assert [len(c) for c in chunks[:-1]] == [300_000] * (len(chunks) - 1)
    assert sum(counted) == len(BODY)


def test_a_body_short_of_its_length_is_a_broken_connection(server):
    counted: list[int] = []
    resp = requests.get(f"{server}/short", stream=True, timeout=10)
    got = bytearray()
    with pytest.raises(requests.exceptions.ChunkedEncodingError, match="broke|ended"):
        for chunk in body_chunks(resp, 300_000, counted.append):
            got += chunk
    assert BODY.startswith(bytes(got)) and len(got) < len(BODY)
