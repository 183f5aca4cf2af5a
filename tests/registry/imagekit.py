"""Build OCI/Docker images in memory and push them with the registry HTTP API (test helper).

Layers are tar archives written with ``tarfile`` and gzip-compressed; manifests are Docker
schema2 or OCI; indexes carry several platforms. Pushes use the monolithic blob upload
(``POST /v2/<name>/blobs/uploads/`` then ``PUT <location>?digest=``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from typing import Any

import requests

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer(*entries: tuple[Any, ...], compress: bool = True) -> bytes:
    """A layer from entries:
    ("file", name, data[, mode]), ("dir", name[, mode]), ("symlink", name, target),
    ("hardlink", name, target), ("chr", name), ("fifo", name)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            kind, name = e[0], e[1]
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            info.uid = info.gid = 1000
            info.uname = info.gname = "builder"
            data = None
            if kind == "file":
                data = e[2] if isinstance(e[2], bytes) else e[2].encode()
                info.size = len(data)
                info.mode = e[3] if len(e) > 3 else 0o644
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = e[2] if len(e) > 2 else 0o755
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = e[2]
                info.mode = 0o777
            elif kind == "hardlink":
                info.type = tarfile.LNKTYPE
                info.linkname = e[2]
                info.mode = 0o644
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
                info.devmajor, info.devminor = 1, 3
                info.mode = 0o666
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                info.mode = 0o644
            else:
                raise ValueError(kind)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    raw = buf.getvalue()
    return gzip.compress(raw, compresslevel=1, mtime=0) if compress else raw


@dataclass
class Image:
    layers: list[bytes]
    config: dict[str, Any] = field(default_factory=dict)
    architecture: str = "amd64"
    oci: bool = False

    def config_blob(self) -> bytes:
        diff_ids = [sha(gzip.decompress(x) if x[:2] == b"\x1f\x8b" else x) for x in self.layers]
        doc = {"architecture": self.architecture, "os": "linux",
               "config": self.config, "rootfs": {"type": "layers", "diff_ids": diff_ids}}
        return json.dumps(doc, sort_keys=True).encode()

    def manifest(self) -> bytes:
        cfg = self.config_blob()
        doc = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST if self.oci else DOCKER_MANIFEST,
            "config": {"mediaType": OCI_CONFIG if self.oci else DOCKER_CONFIG,
                       "digest": sha(cfg), "size": len(cfg)},
            "layers": [{"mediaType": OCI_LAYER if self.oci else DOCKER_LAYER,
                        "digest": sha(x), "size": len(x)} for x in self.layers],
        }
        return json.dumps(doc, indent=1).encode()

    @property
    def media_type(self) -> str:
        return OCI_MANIFEST if self.oci else DOCKER_MANIFEST

    def blobs(self) -> dict[str, bytes]:
        out = {sha(x): x for x in self.layers}
        cfg = self.config_blob()
        out[sha(cfg)] = cfg
        return out


@dataclass
class Blobs(Image):
    """An image whose config names no diff_ids (sqshbuild does not read them): its layers
    are never inflated here (a bomb, zstd)."""

    def config_blob(self) -> bytes:
        doc = {"architecture": self.architecture, "os": "linux", "config": self.config,
               "rootfs": {"type": "layers", "diff_ids": []}}
        return json.dumps(doc, sort_keys=True).encode()


def index(images: list[Image], oci: bool = True) -> bytes:
    doc = {"schemaVersion": 2, "mediaType": OCI_INDEX if oci else DOCKER_LIST, "manifests": [
        {"mediaType": im.media_type, "digest": sha(im.manifest()), "size": len(im.manifest()),
         "platform": {"architecture": im.architecture, "os": "linux"}} for im in images]}
    return json.dumps(doc, indent=1).encode()


class Pusher:
    def __init__(self, base: str, auth: tuple[str, str] | None = None,
                 token_url: str | None = None) -> None:
        self.base = base.rstrip("/")
        self.session = requests.Session()
        self.token_url = token_url
        self.auth = auth
        if auth and not token_url:
            self.session.auth = auth

    def _headers(self, repo: str) -> dict[str, str]:
        if not self.token_url:
            return {}
        resp = requests.get(self.token_url, auth=self.auth,
                            params={"scope": f"repository:{repo}:pull,push",
                                    "service": "squall-test"})
        resp.raise_for_status()
        return {"Authorization": f"Bearer {resp.json()['token']}"}

    def blob(self, repo: str, data: bytes, headers: dict[str, str]) -> str:
        digest = sha(data)
        resp = self.session.post(f"{self.base}/v2/{repo}/blobs/uploads/", headers=headers)
        assert resp.status_code == 202, (resp.status_code, resp.text)
        loc = resp.headers["Location"]
        if loc.startswith("/"):
            loc = self.base + loc
        sep = "&" if "?" in loc else "?"
        resp = self.session.put(f"{loc}{sep}digest={digest}", data=data,
                                headers={**headers, "Content-Type": "application/octet-stream"})
        assert resp.status_code == 201, (resp.status_code, resp.text)
        return digest

    def manifest(self, repo: str, ref: str, body: bytes, media_type: str,
                 headers: dict[str, str]) -> str:
        resp = self.session.put(f"{self.base}/v2/{repo}/manifests/{ref}", data=body,
                                headers={**headers, "Content-Type": media_type})
        assert resp.status_code == 201, (resp.status_code, resp.text)
        return sha(body)

    def push(self, repo: str, tag: str, image: Image) -> str:
        headers = self._headers(repo)
        for data in image.blobs().values():
            self.blob(repo, data, headers)
        return self.manifest(repo, tag, image.manifest(), image.media_type, headers)

    def push_index(self, repo: str, tag: str, images: list[Image], oci: bool = True) -> str:
        headers = self._headers(repo)
        for im in images:
            for data in im.blobs().values():
                self.blob(repo, data, headers)
            self.manifest(repo, sha(im.manifest()), im.manifest(), im.media_type, headers)
        return self.manifest(repo, tag, index(images, oci), OCI_INDEX if oci else DOCKER_LIST,
                             headers)
