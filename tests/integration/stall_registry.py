"""alice's registry (issue 39): any image it is asked for has one layer whose body never
ends, sent at RATE bytes a second (above sqshbuild's low-speed cut, so only a bound or a
kill ends the download). Run on the login node:
python3 stall_registry.py PORT RATE LOG [LAYER_DIGEST]. LAYER_DIGEST: the layer's name in
the manifest (a popular base layer's digest, whose lock her build then holds). Each request
is one line in LOG ("GET PATH"), so a test sees the pull arrive."""

from __future__ import annotations

import hashlib
import http.server
import json
import sys
import tarfile
import time

PORT, RATE, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
CONFIG = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                     "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}}).encode()
CONFIG_DIGEST = "sha256:" + hashlib.sha256(CONFIG).hexdigest()
# nothing ever arrives whole to be checked against it
LAYER_DIGEST = sys.argv[4] if len(sys.argv) > 4 else "sha256:" + "5" * 64
# A tar of one 10 GiB file, of which the header and zeros are ever sent.
_BIG = tarfile.TarInfo("big")
_BIG.size = 10 << 30
HEADER = _BIG.tobuf(format=tarfile.GNU_FORMAT)
MANIFEST = json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
               "digest": CONFIG_DIGEST, "size": len(CONFIG)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": LAYER_DIGEST, "size": 0}]}).encode()
MANIFEST_DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    def _send(self, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        with open(LOG, "a") as log:
            log.write(f"{self.command} {self.path}\n")
        if self.path == "/v2/":
            self._send(b"{}", "application/json")
        elif "/manifests/" in self.path:
            self._send(MANIFEST, "application/vnd.oci.image.manifest.v1+json",
                       {"Docker-Content-Digest": MANIFEST_DIGEST})
        elif self.path.endswith(CONFIG_DIGEST):
            self._send(CONFIG, "application/octet-stream")
        elif self.path.endswith(LAYER_DIGEST):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"\0" * max(1, RATE // 10)
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(HEADER), HEADER))
                while True:  # never ends: a kill or a bound does
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                return
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()


http.server.ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
