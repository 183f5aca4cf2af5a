"""The bounds on what a registry sends, without a registry (issue 19): a layer's length from
its descriptor and SQSHBUILD_MAX_BLOB_SIZE, descriptors with negative sizes, and a token
answer read capped on the refresh-token path too (a real HTTP server on loopback).
tests/registry/test_registry_bounds.py has the same through sqshbuild."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from squall.errors import SquallError
from squall.sqshbuild import transport
from squall.sqshbuild.auth import Challenge, Credentials
from squall.sqshbuild.registry import RegistryClient, parse_manifest

DIGEST = "sha256:" + "12" * 32


def test_a_descriptor_size_is_the_bound_up_to_the_site_maximum(monkeypatch):
    monkeypatch.delenv("SQSHBUILD_MAX_BLOB_SIZE", raising=False)
    assert transport.blob_bound(DIGEST, 1234, "r/x") == 1234
    assert transport.blob_bound(DIGEST, 0, "r/x") == 16 << 30  # no size: the site default
    monkeypatch.setenv("SQSHBUILD_MAX_BLOB_SIZE", "8M")
    assert transport.blob_bound(DIGEST, 0, "r/x") == 8 << 20
    assert transport.blob_bound(DIGEST, 8 << 20, "r/x") == 8 << 20
    with pytest.raises(SquallError) as info:
        transport.blob_bound(DIGEST, (8 << 20) + 1, "reg/team/app")
    assert str(info.value) == (
        "layer sha256:121212121212 of reg/team/app is 8388609 bytes (8.0 MiB) by its manifest, "
        "more than the 8388608 (8 MiB) allowed by SQSHBUILD_MAX_BLOB_SIZE: raise "
        "SQSHBUILD_MAX_BLOB_SIZE if the image is real")


@pytest.mark.parametrize("raw", ["lots", "-1G", "0"])
def test_a_bad_maximum_is_one_line(monkeypatch, raw):
    monkeypatch.setenv("SQSHBUILD_MAX_BLOB_SIZE", raw)
    with pytest.raises(SquallError, match=f"SQSHBUILD_MAX_BLOB_SIZE='{raw}'"):
        transport.max_blob_size()


def test_sizes_for_messages():
    assert transport.human(512) == "512 bytes"
    assert transport.human(64 << 30) == "64 GiB"
    assert transport.human(3 << 29) == "1.5 GiB"
    assert transport.short_digest(DIGEST) == "sha256:121212121212"


def test_a_negative_size_is_a_malformed_manifest():
    doc = {"config": {"digest": DIGEST, "size": 10},
           "layers": [{"digest": "sha256:" + "34" * 32, "size": -5}]}
    with pytest.raises(SquallError, match="size -5: the manifest is malformed"):
        parse_manifest(json.dumps(doc).encode(), "", DIGEST, "r/x")


@pytest.fixture
def token_server() -> Iterator[tuple[str, dict[str, int]]]:
    """Answers every POST with an endless chunked body (stops after 256 MiB)."""
    sent = {"bytes": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            block = b" " * (64 << 10)
            frame = f"{len(block):x}\r\n".encode() + block + b"\r\n"
            try:
                while sent["bytes"] < 256 << 20:
                    self.wfile.write(frame)
                    sent["bytes"] += len(block)
            except OSError:
                pass
            self.close_connection = True

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/token", sent
    httpd.shutdown()
    httpd.server_close()


def test_a_refresh_token_answer_is_read_capped(token_server, monkeypatch):
    """The OAuth2 refresh-token POST (docker login with an identity token, ACR) was read whole
    into memory before its cap was checked; now it stops at the cap."""
    realm, sent = token_server
    client = RegistryClient("127.0.0.1:9", "team/app")
    client._creds, client._creds_looked = Credentials("test", "<token>", "refresh-xyz"), True
    with pytest.raises(SquallError, match="larger than the 1048576 bytes allowed"):
        client._fetch_token(Challenge("bearer", {"realm": realm}), None)
    assert sent["bytes"] < 64 << 20, sent  # what the socket buffers took, not all of it
