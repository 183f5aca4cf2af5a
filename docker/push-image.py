#!/usr/bin/env python3
"""Push a local Docker image to the mini cluster's registry as an OCI image, with no
registry client: `docker save`, then the registry HTTP API (the monolithic blob upload that
tests/registry/imagekit.py uses, streamed from the saved file instead of held in memory).

    push-image.py DOCKER_IMAGE HOST:PORT REPO:TAG

Does nothing when REPO:TAG there is already this image (its config digest is the Docker
image's id), and uploads only the blobs the registry lacks. Layers go as `docker save`
writes them, uncompressed tars (application/vnd.oci.image.layer.v1.tar): the registry is on
the same host, where compressing 700 MB would cost more than sending it. Plain HTTP: the
login node's registry (docs/cluster.md). Prints one line: what was pushed, its manifest
digest, size and seconds. Errors are one line and exit status 1.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import IO

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
CHUNK = 1 << 20


class PushError(Exception):
    pass


class Registry:
    def __init__(self, hostport: str, repo: str) -> None:
        self.hostport, self.repo = hostport, repo

    def request(self, method: str, path: str, body: bytes | IO[bytes] | None = None,
                headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(self.hostport, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers or {})
        except OSError as e:
            raise PushError(f"cannot reach the registry {self.hostport}: {e}") from None
        resp = conn.getresponse()
        resp.read()
        conn.close()
        return resp

    def config_of(self, tag: str) -> str | None:
        conn = http.client.HTTPConnection(self.hostport, timeout=30)
        try:
            conn.request("GET", f"/v2/{self.repo}/manifests/{tag}",
                         headers={"Accept": OCI_MANIFEST})
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            raise PushError(f"cannot reach the registry {self.hostport}: {e}") from None
        finally:
            conn.close()
        if resp.status != 200:
            return None
        try:
            return str(json.loads(data)["config"]["digest"])
        except (ValueError, KeyError, TypeError):
            return None

    def has_blob(self, digest: str) -> bool:
        return self.request("HEAD", f"/v2/{self.repo}/blobs/{digest}").status == 200

    def put_blob(self, digest: str, size: int, body: bytes | IO[bytes]) -> None:
        resp = self.request("POST", f"/v2/{self.repo}/blobs/uploads/")
        location = resp.getheader("Location") or ""
        if resp.status != 202 or not location:
            raise PushError(f"the registry refused an upload to {self.repo} "
                            f"(HTTP {resp.status})")
        if location.startswith("http"):
            location = "/" + location.split("/", 3)[3]
        sep = "&" if "?" in location else "?"
        resp = self.request("PUT", f"{location}{sep}digest={digest}", body=body,
                            headers={"Content-Type": "application/octet-stream",
                                     "Content-Length": str(size)})
        if resp.status != 201:
            raise PushError(f"the registry refused blob {digest} (HTTP {resp.status})")

    def put_manifest(self, tag: str, body: bytes) -> None:
        resp = self.request("PUT", f"/v2/{self.repo}/manifests/{tag}", body=body,
                            headers={"Content-Type": OCI_MANIFEST})
        if resp.status != 201:
            raise PushError(f"the registry refused the manifest of {self.repo}:{tag} "
                            f"(HTTP {resp.status})")


def digest_of(fh: IO[bytes]) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    while chunk := fh.read(CHUNK):
        h.update(chunk)
        size += len(chunk)
    return "sha256:" + h.hexdigest(), size


def push(image: str, reg: Registry, tag: str) -> str:
    try:
        image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image],
                                  capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise PushError(f"no Docker image {image}: build it first") from None
    if reg.config_of(tag) == image_id:
        return f"{reg.repo}:{tag} is already {image} ({image_id[:19]})"
    start = time.monotonic()
    with tempfile.NamedTemporaryFile(dir="/var/tmp", prefix="squall-push-") as saved:
        if subprocess.run(["docker", "save", image], stdout=saved).returncode != 0:
            raise PushError(f"docker save {image} failed")
        saved.flush()
        with tarfile.open(saved.name) as tar:
            index = json.load(tar.extractfile("manifest.json"))[0]  # type: ignore[arg-type]
            config = tar.extractfile(index["Config"]).read()  # type: ignore[union-attr]
            layers: list[dict[str, str | int]] = []
            for name in index["Layers"]:
                digest, size = digest_of(tar.extractfile(name))  # type: ignore[arg-type]
                if not reg.has_blob(digest):
                    reg.put_blob(digest, size, tar.extractfile(name))  # type: ignore[arg-type]
                layers.append({"mediaType": OCI_LAYER, "digest": digest, "size": size})
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    if not reg.has_blob(config_digest):
        reg.put_blob(config_digest, len(config), config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
        "layers": layers}, indent=1).encode()
    reg.put_manifest(tag, manifest)
    total = sum(int(x["size"]) for x in layers)
    return (f"pushed {image} as {reg.repo}:{tag} (sha256:"
            f"{hashlib.sha256(manifest).hexdigest()[:12]}..., {total >> 20} MiB in "
            f"{len(layers)} layer{'s' if len(layers) != 1 else ''}) in "
            f"{time.monotonic() - start:.1f} s")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or ":" not in argv[2]:
        print("usage: push-image.py DOCKER_IMAGE HOST:PORT REPO:TAG", file=sys.stderr)
        return 2
    repo, _, tag = argv[2].rpartition(":")
    try:
        print(f"push-image: {push(argv[0], Registry(argv[1], repo), tag)}")
    except PushError as e:
        print(f"push-image: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
